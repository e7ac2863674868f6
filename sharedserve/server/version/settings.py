"""One model's settings, the same type from its file to run time: a model repository's
``sharedserve.yaml`` (``repository/directory.py``) and a shared server's (``pack``) are read and
written through it, every version of the model carries it, and the scheduler, the batcher and
the memory read their part of it. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from sharedserve.config import BatchingSettings
from sharedserve.server.version.footprint import MIB

__all__ = ["ModelSettings"]


@dataclass(frozen=True)
class ModelSettings:
    batching: BatchingSettings | None = None
    """Batch its requests with these settings; None: not batched (or the server's flags, where
    a catalog fills it in)."""
    weight: float | None = None
    """Its share of the model-call threads against other busy models' (2 gets twice 1's
    calls); None: the server's default, 1."""
    max_inflight: int | None = None
    """Its requests queued or running at most; more are refused at once. None: the server's
    ``--max-inflight-per-model``."""
    gpu_memory_mib: int | None = None
    """Its memory budget per version, in MiB, against the process's GPU cap; None: its peak as
    measured at load."""
    pinned: bool = False
    """Never paged out to make room for another model (``--paging lru``)."""

    @property
    def memory_budget(self) -> int | None:
        """The memory budget in bytes; None: its measured peak."""
        return None if self.gpu_memory_mib is None else self.gpu_memory_mib * MIB

    @property
    def warm_rows(self) -> int:
        """The largest batch a version serves, which its warm-up runs and its footprint is
        measured at: its batching's ``max_batch_size``, else 1."""
        return 1 if self.batching is None else self.batching.max_batch_size

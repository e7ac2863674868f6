"""What a server is told to serve: each model version on disk with its model's settings
(batching, labels, share of the scheduler, memory budget), from ``--model``, a TF Serving model
config file or a model repository. Pure data; ``registry.py`` serves them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sharedserve.config import BatchingSettings
from sharedserve.server.repository.config_file import ModelEntry, versions_to_serve
from sharedserve.server.version.backends.base import Backend
from sharedserve.server.version.footprint import MIB
from sharedserve.server.version.model import ServedModel
from sharedserve.server.version.source import ModelSource

__all__ = ["VersionToServe", "versions_of"]


@dataclass(frozen=True)
class VersionToServe:
    """One model version to serve: ``--model``'s, or one of a ``ModelEntry``'s versions."""

    source: ModelSource
    batching: BatchingSettings | None = None
    """None: batching off. Per model: each version of it gets a batcher of these settings."""
    labels: Mapping[str, int] = field(default_factory=dict)
    """Version labels of the model (label -> version), e.g. TF Serving's ``version_labels``."""
    weight: float | None = None
    """The model's share of the scheduler (``Share.weight``); None: 1."""
    max_inflight: int | None = None
    """The model's requests in flight at most; None: the server's ``--max-inflight-per-model``."""
    budget_bytes: int | None = None
    """The model's memory budget per version (``gpu_memory_mib``); None: its measured peak."""
    pinned: bool = False
    """Never paged out (``--paging lru``)."""

    def served_model(self, backend: Backend) -> ServedModel:
        """The version to load with ``backend``, warmed up (and measured) at the largest batch
        it serves."""
        rows = self.batching.max_batch_size if self.batching is not None else 1
        return ServedModel(self.source, backend, warm_rows=rows)


def versions_of(
    models: Sequence[ModelEntry], batching: BatchingSettings | None
) -> list[VersionToServe]:
    """The versions on disk that a model config file or repository names, each with its
    model's batching (``batching``, the server's flags, where its model file sets none) and
    labels; ConfigError where a model has no version to serve."""
    return [
        VersionToServe(
            source,
            model.batching or batching,
            dict(model.version_labels),
            model.weight,
            model.max_inflight,
            None if model.gpu_memory_mib is None else model.gpu_memory_mib * MIB,
            model.pinned,
        )
        for model in models
        for source in versions_to_serve(model)
    ]

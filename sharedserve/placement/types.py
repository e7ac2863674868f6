"""What the placement routine takes (replicas, GPUs to place them on) and gives back. Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sharedserve.gpu.info import GpuInfo

__all__ = ["Host", "OpenEnded", "PlacedReplica", "Placement", "PlannedGpu", "Replicas"]

NO_LIMIT = 1 << 30
"""A replica limit no GPU reaches: the density of a model nothing was measured for."""


@dataclass(frozen=True)
class Replicas:
    """A model's replicas to place, each alike."""

    model: str
    """Its name, unique among the requests: replicas of one model are spread apart."""
    replicas: int
    memory_mib: float
    """GPU memory of one replica in MiB, without the context reserve."""
    busy_share: float = 0.0
    """Share (0-1) of a GPU's time one replica keeps busy; 0 where nothing was measured."""
    max_density: int = NO_LIMIT
    """Most replicas of any model a GPU holding this one may have (its measured density)."""
    spread: int = 1
    """Its first ``spread`` replicas go on different GPUs (and nodes, where there are nodes)."""
    memory_fraction: float = 0.0
    """A share of whichever GPU a replica lands on, taken on top of ``memory_mib`` (a cap given
    as a fraction); in MiB it is ``contract.mib_of(memory_fraction, the GPU's memory)``."""
    gpu: int | None = None
    """The NVML index of the GPU every replica must go on (pinned); None: placed by policy."""


@dataclass(frozen=True)
class OpenEnded:
    """Open-ended: GPUs of one size, opened as needed, dealt to nodes (``size``)."""

    memory_mib: float
    gpus_per_node: int
    max_gpus: int | None = None
    """More GPUs than this is an error; None: no limit."""


@dataclass(frozen=True)
class Host:
    """A fixed set of GPUs on one host, of any sizes (``pack``); unhealthy ones take nothing
    (a replica pinned to one is an error)."""

    gpus: Sequence[GpuInfo]


@dataclass(frozen=True)
class PlacedReplica:
    model: str
    gpu_memory_mib: float
    """Its memory on the GPU, without the context reserve."""
    busy_share: float


@dataclass
class PlannedGpu:
    index: int
    """The NVML index on a ``Host``; the GPU's number in the plan on ``OpenEnded`` GPUs."""
    node: int
    replicas: list[PlacedReplica] = field(default_factory=list)
    memory_mib: float = 0.0
    """Used, reserves included."""
    busy_share: float = 0.0
    densest: int = NO_LIMIT
    """The most replicas this GPU may hold: its models' least measured density."""
    models: Counter[str] = field(default_factory=Counter)
    info: GpuInfo | None = None
    """The host's GPU; None for ``OpenEnded`` GPUs, which exist only in the plan."""


@dataclass(frozen=True)
class Placement:
    gpus: list[PlannedGpu]
    """The GPUs holding a replica, in index order."""
    unspread: list[str]
    """Models on fewer nodes than their ``spread`` although the plan has that many nodes."""

    def gpus_of(self, model: str) -> list[int]:
        """The index of the GPU of each replica of ``model``, in index order."""
        return [g.index for g in self.gpus for r in g.replicas if r.model == model]

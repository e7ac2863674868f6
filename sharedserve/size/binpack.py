"""Replicas onto as few GPUs as they fit: memory, time and measured density per GPU. Pure.

Best fit decreasing, the rule the allocator's ``bundle`` placement follows on one node (the GPU
with the least room that still holds the request), over the fleet's GPUs and in two resources:

- **memory**: the replicas' memory plus a context reserve each, within the GPU's;
- **time**: the replicas' busy shares within the utilisation target;
- **density**: no more replicas on a GPU than the least densely measured model on it was
  measured at (packing never extrapolates a profile);
- **spread**: a model's first ``spread`` replicas (its ``min_replicas``) go on different GPUs,
  so that losing a GPU never takes a whole model down; further replicas, and nodes, are spread
  where a GPU fits them anyway (a new GPU is opened for the first ``spread`` only). The plan
  lists the models whose replicas share a node although it has nodes enough.

Replicas are placed largest first (by the larger of their shares of memory and of time); each
goes to the GPU it fits best (the least room left in its tighter resource), a new GPU only when
none holds it. ``max_gpus`` caps the count: past it, the packing fails with what was left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sharedserve.errors import ConfigError
from sharedserve.size.demand import Demand

__all__ = ["Packing", "PlacedReplica", "PlannedGpu", "pack"]

_EPS = 1e-9  # float sums of shares that are exactly full must still fit


@dataclass(frozen=True)
class PlacedReplica:
    model: str
    gpu_memory_mib: float
    """Its memory on the GPU, without the context reserve."""
    busy_share: float


@dataclass
class PlannedGpu:
    index: int
    node: int
    replicas: list[PlacedReplica] = field(default_factory=list)
    memory_mib: float = 0.0
    """Used, reserves included."""
    busy_share: float = 0.0
    densest: int = 1 << 30
    """The most replicas this GPU may hold: its models' least measured density."""
    models: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class Packing:
    gpus: list[PlannedGpu]
    unspread: list[str]
    """Models on fewer nodes than their ``spread`` although the plan has that many nodes."""


@dataclass(frozen=True)
class _Item:
    demand: Demand
    size: float


class _Packer:
    def __init__(
        self, memory_mib: float, reserve_mib: float, target: float, gpus_per_node: int
    ) -> None:
        self.memory, self.reserve, self.target = memory_mib, reserve_mib, target
        self.per_node = gpus_per_node
        self.gpus: list[PlannedGpu] = []
        self.node_models: list[Counter[str]] = []

    def fits(self, gpu: PlannedGpu, d: Demand) -> bool:
        return (
            gpu.memory_mib + d.memory_mib + self.reserve <= self.memory + _EPS
            and gpu.busy_share + d.busy_share <= self.target + _EPS
            and len(gpu.replicas) + 1 <= min(gpu.densest, d.max_density)
        )

    def slack(self, gpu: PlannedGpu, d: Demand) -> float:
        """Room left in the GPU's tighter resource once ``d`` is on it, as a share."""
        memory = (self.memory - gpu.memory_mib - d.memory_mib - self.reserve) / self.memory
        busy = (self.target - gpu.busy_share - d.busy_share) / self.target
        return min(memory, busy)

    def choose(self, d: Demand, apart: bool) -> PlannedGpu | None:
        """The GPU ``d`` fits best; with ``apart``, only one without a replica of its model."""
        best, best_key = None, None
        for gpu in self.gpus:
            if not self.fits(gpu, d) or (apart and gpu.models[d.model]):
                continue
            key = (
                gpu.models[d.model] > 0,  # spread over GPUs first,
                self.node_models[gpu.node][d.model] > 0,  # then over nodes;
                # a GPU whose replica limit it does not lower (models measured only at low
                # densities fill GPUs together, rather than cap many GPUs each),
                d.max_density < gpu.densest,
                self.slack(gpu, d),  # then best fit
                gpu.index,
            )
            if best_key is None or key < best_key:
                best, best_key = gpu, key
        return best

    def place(self, d: Demand, gpu: PlannedGpu) -> None:
        gpu.replicas.append(PlacedReplica(d.model, d.memory_mib, d.busy_share))
        gpu.memory_mib += d.memory_mib + self.reserve
        gpu.busy_share += d.busy_share
        gpu.densest = min(gpu.densest, d.max_density)
        gpu.models[d.model] += 1
        self.node_models[gpu.node][d.model] += 1

    def open(self) -> PlannedGpu:
        index = len(self.gpus)
        gpu = PlannedGpu(index, index // self.per_node)
        if gpu.node == len(self.node_models):
            self.node_models.append(Counter())
        self.gpus.append(gpu)
        return gpu


def pack(
    demands: Sequence[Demand],
    *,
    gpu_memory_mib: float,
    reserve_mib: float,
    target: float,
    gpus_per_node: int,
    max_gpus: int | None = None,
) -> Packing:
    """Every replica of ``demands`` on a GPU; ConfigError when one replica fits no GPU at all,
    or when more than ``max_gpus`` would be needed."""
    packer = _Packer(gpu_memory_mib, reserve_mib, target, gpus_per_node)
    for d in demands:
        if not packer.fits(PlannedGpu(-1, -1), d):
            raise ConfigError(
                f"model {d.model}: one replica needs {d.memory_mib + reserve_mib:,.0f} MiB "
                f"(with its reserve) and {d.busy_share:.0%} of a GPU's time; a GPU has "
                f"{gpu_memory_mib:,.0f} MiB and a {target:.0%} target"
            )
    items = [
        _Item(d, max((d.memory_mib + reserve_mib) / gpu_memory_mib, d.busy_share / target))
        for d in demands
        for _ in range(d.replicas)
    ]
    # Models measured at the fewest replicas a GPU first, since they cap the GPUs they are on;
    # then largest first; a model's replicas one after another, to spread from their siblings.
    items.sort(key=lambda i: (i.demand.max_density, -i.size, i.demand.model))
    placed: Counter[str] = Counter()
    for item in items:
        d = item.demand
        gpu = packer.choose(d, apart=placed[d.model] < d.spread) or packer.open()
        packer.place(d, gpu)
        placed[d.model] += 1
    if max_gpus is not None and len(packer.gpus) > max_gpus:
        raise ConfigError(
            f"the fleet needs {len(packer.gpus)} GPUs and gpu.max_gpus allows {max_gpus}"
        )
    nodes = len(packer.node_models)
    unspread = sorted(
        d.model
        for d in demands
        if sum(1 for node in packer.node_models if node[d.model]) < min(d.spread, nodes)
    )
    return Packing(packer.gpus, unspread)

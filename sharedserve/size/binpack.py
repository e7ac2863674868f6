"""Replicas onto as few GPUs as they fit: memory, time and measured density per GPU. Pure.

Best fit decreasing, the rule the allocator's ``bundle`` placement follows on one node (the GPU
with the least room that still holds the request), over the fleet's GPUs and in two resources:

- **memory**: the replicas' memory plus a context reserve each, within the GPU's;
- **time**: the replicas' busy shares within the utilisation target;
- **density**: no more replicas on a GPU than the least densely measured model on it was
  measured at (packing never extrapolates a profile);
- **spread**: a model's first ``spread`` replicas (its ``min_replicas``) go on different GPUs,
  so that losing a GPU never takes a whole model down; further replicas are spread where a GPU
  fits them anyway (a new GPU is opened for the first ``spread`` only).
- **nodes**: GPUs are dealt to nodes after packing, GPU ``i`` to node ``i mod nodes``. A model's
  replicas are placed one after another, onto GPUs filling at the same time, so they lie near
  each other in GPU order: dealt out, they land on different nodes, where numbering nodes in
  blocks put half a 500-model fleet's pairs on one node. The plan lists the models whose replicas
  still share a node although it has nodes enough.

Replicas are placed largest first (by the largest of their shares of a GPU's memory, of its time
and of its replica limit); each goes to the GPU it fits best (the least room left in its tighter
resource), a new GPU only when none holds it. ``max_gpus`` caps the count: past it, the packing
fails with what was left out.

A fleet has thousands of GPUs and tens of thousands of replicas, so a replica's choice is a few
numpy operations over the GPUs that may still take one (``_Open``), not a loop in Python; a GPU
that no replica still to come fits is dropped from them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from sharedserve.errors import ConfigError
from sharedserve.size.demand import Demand

__all__ = ["Packing", "PlacedReplica", "PlannedGpu", "pack"]

_EPS = 1e-9  # float sums of shares that are exactly full must still fit
_RETIRE_EVERY = 128  # replicas placed between two sweeps for GPUs nothing fits any more


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


class _Open:
    """The GPUs that may still take a replica, as arrays in GPU order (so that the lowest
    position is the lowest index), grown by doubling: ``PlannedGpu``'s figures, vectorised."""

    def __init__(self) -> None:
        self.size = 0
        self.index = np.empty(64, np.int64)
        self.memory = np.empty(64)
        self.busy = np.empty(64)
        self.count = np.empty(64, np.int64)
        self.densest = np.empty(64, np.int64)

    def append(self, index: int) -> int:
        """Open GPU ``index``, empty; its position."""
        if self.size == len(self.index):
            for name in ("index", "memory", "busy", "count", "densest"):
                old = getattr(self, name)
                setattr(self, name, np.concatenate([old, np.empty_like(old)]))
        at = self.size
        self.index[at], self.memory[at], self.busy[at] = index, 0.0, 0.0
        self.count[at], self.densest[at] = 0, 1 << 30
        self.size += 1
        return at

    def keep(self, kept: npt.NDArray[np.bool_]) -> None:
        """Only the GPUs ``kept`` (over the first ``size``) stay open, in the same order."""
        size = int(kept.sum())
        for name in ("index", "memory", "busy", "count", "densest"):
            values = getattr(self, name)
            values[:size] = values[: self.size][kept]
        self.size = size


class _Marks:
    """Which GPUs, by index, hold a replica of the model being placed. A model's replicas are
    placed one after another, so one array serves every model in turn, without a lookup per
    GPU."""

    def __init__(self) -> None:
        self.model: str | None = None
        self.gpu = np.zeros(64, np.bool_)

    def reach(self, index: int) -> None:
        while index >= len(self.gpu):
            self.gpu = np.concatenate([self.gpu, np.zeros_like(self.gpu)])

    def focus(self, model: str, held: list[int]) -> None:
        """Mark ``held``, the GPUs holding ``model``, unless it is the model marked already."""
        if model != self.model:
            self.model = model
            self.gpu[:] = False
            self.gpu[held] = True

    def mark(self, index: int) -> None:
        self.gpu[index] = True


class _Packer:
    def __init__(self, memory_mib: float, reserve_mib: float, target: float) -> None:
        self.memory, self.reserve, self.target = memory_mib, reserve_mib, target
        self.gpus: list[PlannedGpu] = []
        self.open = _Open()
        self.held: dict[str, list[int]] = {}
        """The GPUs holding a replica of each model, by index (open or not)."""
        self.marks = _Marks()

    def fits_alone(self, d: Demand) -> bool:
        return (
            d.memory_mib + self.reserve <= self.memory + _EPS
            and d.busy_share <= self.target + _EPS
            and d.max_density >= 1
        )

    def choose(self, d: Demand, apart: bool) -> int | None:
        """The open position of the GPU ``d`` fits best; with ``apart``, only among those
        without a replica of its model. The rule is a lexicographic key, lowest first, over the
        GPUs it fits: a GPU without its model (spread over GPUs first), then a GPU whose replica
        limit it does not lower (models measured only at low densities fill GPUs together,
        rather than cap many GPUs each), then the least slack (best fit), then the lowest
        index."""
        self.marks.focus(d.model, self.held.get(d.model, []))
        o, n = self.open, self.open.size
        memory, busy = o.memory[:n], o.busy[:n]
        # The same float expressions as a sum over one GPU, so that exactly full still fits.
        fit = memory + d.memory_mib + self.reserve <= self.memory + _EPS
        fit &= busy + d.busy_share <= self.target + _EPS
        fit &= o.count[:n] < np.minimum(o.densest[:n], d.max_density)
        at = np.flatnonzero(fit)
        index = o.index[at]
        on_gpu = self.marks.gpu[index]
        if apart:
            at, index, on_gpu = at[~on_gpu], index[~on_gpu], on_gpu[~on_gpu]
        if not at.size:
            return None
        flags = 2 * on_gpu + (d.max_density < o.densest[at])
        at = at[flags == flags.min()]
        slack = np.minimum(
            (self.memory - memory[at] - d.memory_mib - self.reserve) / self.memory,
            (self.target - busy[at] - d.busy_share) / self.target,
        )
        return int(at[np.argmin(slack)])  # argmin: the first, so the lowest index, on a tie

    def place(self, d: Demand, at: int) -> None:
        o = self.open
        gpu = self.gpus[int(o.index[at])]
        gpu.replicas.append(PlacedReplica(d.model, d.memory_mib, d.busy_share))
        gpu.memory_mib += d.memory_mib + self.reserve
        gpu.busy_share += d.busy_share
        gpu.densest = min(gpu.densest, d.max_density)
        if not gpu.models[d.model]:
            self.held.setdefault(d.model, []).append(gpu.index)
            self.marks.mark(gpu.index)  # ``choose`` marked this model's GPUs so far
        gpu.models[d.model] += 1
        o.memory[at], o.busy[at] = gpu.memory_mib, gpu.busy_share
        o.count[at], o.densest[at] = len(gpu.replicas), gpu.densest

    def new_gpu(self) -> int:
        index = len(self.gpus)
        self.gpus.append(PlannedGpu(index, -1))  # its node: dealt out after packing
        self.marks.reach(index)
        return self.open.append(index)

    def retire(self, least_memory_mib: float, least_busy: float) -> None:
        """Close the GPUs that no replica still to come fits: full to their replica limit, or
        with less room than the least memory or the least busy share still to place. No choice
        could fall on them, so the plan is the same, and each choice scans only the GPUs still
        filling."""
        o, n = self.open, self.open.size
        full = o.count[:n] >= o.densest[:n]
        full |= o.memory[:n] + least_memory_mib + self.reserve > self.memory + _EPS
        full |= o.busy[:n] + least_busy > self.target + _EPS
        o.keep(~full)


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
    packer = _Packer(gpu_memory_mib, reserve_mib, target)
    for d in demands:
        if not packer.fits_alone(d):
            raise ConfigError(
                f"model {d.model}: one replica needs {d.memory_mib + reserve_mib:,.0f} MiB "
                f"(with its reserve) and {d.busy_share:.0%} of a GPU's time; a GPU has "
                f"{gpu_memory_mib:,.0f} MiB and a {target:.0%} target"
            )

    # Largest first, in the three resources a replica takes: memory, time and a slot of the
    # GPU's replica limit (a model measured at most 4 to a GPU takes a quarter of one, as the
    # lower bound counts it). Sorting by density first instead left the busy replicas of dense
    # models last, with nothing to fill round them: ~1.25x the bound on large synthetic fleets,
    # where this gives ~1.1x (benchmarks/sizing_scale.py). Of equal size (many replicas are
    # sized by their slot alone), the most spread first: it needs the widest choice of GPUs.
    # A model's replicas one after another, to spread from their siblings.
    def size(d: Demand) -> float:
        memory = (d.memory_mib + reserve_mib) / gpu_memory_mib
        return max(memory, d.busy_share / target, 1 / d.max_density)

    order = sorted(demands, key=lambda d: (-size(d), -d.spread, d.model))
    items = [d for d in order for _ in range(d.replicas)]
    # What the replicas from each one on need at the least, for ``retire``.
    least_memory = np.minimum.accumulate([d.memory_mib for d in reversed(items)])[::-1]
    least_busy = np.minimum.accumulate([d.busy_share for d in reversed(items)])[::-1]
    placed: Counter[str] = Counter()
    for i, d in enumerate(items):
        if i and i % _RETIRE_EVERY == 0:
            packer.retire(float(least_memory[i]), float(least_busy[i]))
        at = packer.choose(d, apart=placed[d.model] < d.spread)
        packer.place(d, packer.new_gpu() if at is None else at)
        placed[d.model] += 1
    if max_gpus is not None and len(packer.gpus) > max_gpus:
        raise ConfigError(
            f"the fleet needs {len(packer.gpus)} GPUs and gpu.max_gpus allows {max_gpus}"
        )
    nodes = -(-len(packer.gpus) // gpus_per_node)
    for gpu in packer.gpus:  # dealt out: at most gpus_per_node each
        gpu.node = gpu.index % nodes
    unspread = sorted(
        d.model
        for d in demands
        if len({g % nodes for g in packer.held.get(d.model, [])}) < min(d.spread, nodes)
    )
    return Packing(packer.gpus, unspread)

"""The placement routine's state: the GPUs opened so far, as numpy arrays. Pure.

A fleet has thousands of GPUs and tens of thousands of replicas, so a replica's choice is a few
numpy operations over the GPUs that may still take one (``_Open``), not a loop in Python; a GPU
that no replica still to come fits is dropped from them (``Packer.retire``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sharedserve.contract import mib_of
from sharedserve.enums import PlacementPolicy
from sharedserve.gpu.info import GpuInfo
from sharedserve.placement.policy import preference
from sharedserve.placement.types import NO_LIMIT, PlacedReplica, PlannedGpu, Replicas

__all__ = ["EPS", "Packer"]

EPS = 1e-9  # float sums of shares that are exactly full must still fit
_FIELDS = ("slot", "capacity", "memory", "busy", "used", "count", "densest")


class _Open:
    """The GPUs that may still take a replica, as arrays in the order they were opened (index
    order, but for a host's under ``bundle``, opened as they fit best), so that on a tie the
    first opened wins: ``PlannedGpu``'s figures, vectorised. ``slot`` is the GPU's position in
    ``Packer.gpus``."""

    def __init__(self) -> None:
        self.size = 0
        self.slot = np.empty(64, np.int64)
        self.capacity = np.empty(64)
        self.memory = np.empty(64)
        self.busy = np.empty(64)
        self.used = np.empty(64)
        """The share taken, in the GPU's fuller resource (memory or time): the policies'."""
        self.count = np.empty(64, np.int64)
        self.densest = np.empty(64, np.int64)

    def append(self, slot: int, capacity: float) -> int:
        """Open GPU ``slot``, empty; its position."""
        if self.size == len(self.slot):
            for name in _FIELDS:
                old = getattr(self, name)
                setattr(self, name, np.concatenate([old, np.empty_like(old)]))
        at = self.size
        self.slot[at], self.capacity[at] = slot, capacity
        self.memory[at], self.busy[at], self.used[at] = 0.0, 0.0, 0.0
        self.count[at], self.densest[at] = 0, NO_LIMIT
        self.size += 1
        return at

    def keep(self, kept: npt.NDArray[np.bool_]) -> None:
        """Only the GPUs ``kept`` (over the first ``size``) stay open, in the same order."""
        size = int(kept.sum())
        for name in _FIELDS:
            values = getattr(self, name)
            values[:size] = values[: self.size][kept]
        self.size = size


class _Marks:
    """Which GPUs, by slot, hold a replica of the model being placed. A model's replicas are
    placed one after another, so one array serves every model in turn, without a lookup per
    GPU."""

    def __init__(self) -> None:
        self.model: str | None = None
        self.gpu = np.zeros(64, np.bool_)

    def reach(self, slot: int) -> None:
        while slot >= len(self.gpu):
            self.gpu = np.concatenate([self.gpu, np.zeros_like(self.gpu)])

    def focus(self, model: str, held: list[int]) -> None:
        """Mark ``held``, the GPUs holding ``model``, unless it is the model marked already."""
        if model != self.model:
            self.model = model
            self.gpu[:] = False
            self.gpu[held] = True

    def mark(self, slot: int) -> None:
        self.gpu[slot] = True


class Packer:
    """Replicas onto GPUs, one at a time: ``choose`` an open GPU, ``place`` it there, ``open``
    another when none fits."""

    def __init__(self, reserve_mib: float, target: float, policy: PlacementPolicy) -> None:
        self.reserve, self.target, self.policy = reserve_mib, target, policy
        self.gpus: list[PlannedGpu] = []
        self.open = _Open()
        self.held: dict[str, list[int]] = {}
        """The GPUs holding a replica of each model, by slot (open or not)."""
        self.marks = _Marks()
        self.capacity: float | None = None
        """The memory of every GPU opened so far, while they are all of one size."""
        self._sizes: set[float] = set()

    def need(self, r: Replicas, capacity: float) -> float:
        """One replica's memory on a GPU of ``capacity`` MiB, without its reserve."""
        if not r.memory_fraction:
            return r.memory_mib
        return r.memory_mib + mib_of(r.memory_fraction, int(capacity))

    def fits_alone(self, r: Replicas, capacity: float) -> bool:
        return (
            self.need(r, capacity) + self.reserve <= capacity + EPS
            and r.busy_share <= self.target + EPS
            and r.max_density >= 1
        )

    def choose(self, r: Replicas, apart: bool) -> int | None:
        """The open position of the GPU ``r`` fits best; with ``apart``, only among those
        without a replica of its model. The rule is a lexicographic key, lowest first, over the
        GPUs it fits: a GPU without its model (spread over GPUs first), then a GPU whose replica
        limit it does not lower (models measured only at low densities fill GPUs together,
        rather than cap many GPUs each), then the policy's preference (``policy.preference``:
        room is the share of its tighter resource, memory or time, that the GPU would have
        left; used, the share it has taken), then the first opened (on a fleet, the lowest
        index)."""
        self.marks.focus(r.model, self.held.get(r.model, []))
        o, n = self.open, self.open.size
        memory, busy = o.memory[:n], o.busy[:n]
        # GPUs of one size (a fleet's) are figured with a number: a choice is made tens of
        # thousands of times, and an array of the same size costs a third more.
        capacity = self.capacity if self.capacity is not None else o.capacity[:n]
        need: float | npt.NDArray[np.float64] = r.memory_mib
        if r.memory_fraction:  # its MiB differ from one GPU to the next
            need = np.array([self.need(r, c) for c in o.capacity[:n]])
        # What a GPU may hold already to take it, one bound each: EPS keeps exactly full in
        # (it is thousands of times the rounding of reordering the sum).
        fit = memory <= capacity + EPS - need - self.reserve
        fit &= busy <= self.target + EPS - r.busy_share
        fit &= o.count[:n] < np.minimum(o.densest[:n], r.max_density)
        at = fit.nonzero()[0]  # flatnonzero's wrapping costs as much again
        on_gpu = self.marks.gpu[o.slot[at]]
        if apart:
            at, on_gpu = at[~on_gpu], on_gpu[~on_gpu]
        if not at.size:
            return None
        flags = 2 * on_gpu + (r.max_density < o.densest[at])
        at = at[flags == flags.min()]
        memory_at, busy_at = memory[at], busy[at]
        capacity_at = capacity if isinstance(capacity, float) else capacity[at]
        need_at = need[at] if isinstance(need, np.ndarray) else need
        room = np.minimum(
            (capacity_at - memory_at - need_at - self.reserve) / capacity_at,
            (self.target - busy_at - r.busy_share) / self.target,
        )
        first, second = preference(self.policy, room=room, used=o.used[at])
        best = int(first.argmin())  # on a tie, the first opened
        ties = (first == first[best]).nonzero()[0]
        if len(ties) > 1:  # the second figure decides (GPUs alike tie on both: the first)
            best = int(ties[second[ties].argmin()])
        return int(at[best])

    def place(self, r: Replicas, at: int) -> None:
        o = self.open
        slot = int(o.slot[at])
        gpu = self.gpus[slot]
        memory = self.need(r, o.capacity[at])
        gpu.replicas.append(PlacedReplica(r.model, memory, r.busy_share))
        gpu.memory_mib += memory + self.reserve
        gpu.busy_share += r.busy_share
        gpu.densest = min(gpu.densest, r.max_density)
        if not gpu.models[r.model]:
            self.held.setdefault(r.model, []).append(slot)
            self.marks.mark(slot)  # ``choose`` marked this model's GPUs so far
        gpu.models[r.model] += 1
        o.memory[at], o.busy[at] = gpu.memory_mib, gpu.busy_share
        o.used[at] = max(gpu.memory_mib / o.capacity[at], gpu.busy_share / self.target)
        o.count[at], o.densest[at] = len(gpu.replicas), gpu.densest

    def open_gpu(self, index: int, capacity: float, info: GpuInfo | None = None) -> int:
        """A new GPU, empty; its open position."""
        slot = len(self.gpus)
        self._sizes.add(float(capacity))
        self.capacity = float(capacity) if len(self._sizes) == 1 else None
        self.gpus.append(PlannedGpu(index, 0, info=info))
        self.marks.reach(slot)
        return self.open.append(slot, capacity)

    def retire(self, least_memory_mib: float, least_busy: float) -> None:
        """Close the GPUs that no replica still to come fits: full to their replica limit, or
        with less room than the least memory or the least busy share still to place. No choice
        could fall on them, so the plan is the same, and each choice scans only the GPUs still
        filling."""
        o, n = self.open, self.open.size
        full = o.count[:n] >= o.densest[:n]
        full |= o.memory[:n] > o.capacity[:n] + EPS - least_memory_mib - self.reserve
        full |= o.busy[:n] > self.target + EPS - least_busy  # as ``choose`` bounds them
        o.keep(~full)

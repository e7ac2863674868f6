"""Each Deployment's share of a GPU, in whole units, from the plan's GPUs. Pure.

A unit is a vGPU (the allocator's cut, ``N`` a GPU) or, with the DRA driver, a percent of a
GPU's compute. Every pod of a Deployment asks for the same number of units (one pod template),
so the count is one per Deployment, chosen so that the plan's packing holds in the cluster:

- **At least its planned share**: the larger of its memory (with its context reserve) and its
  busy share over the utilisation target, as units. Memory is a floor no rounding goes under
  (a vGPU pod's memory cap is its vGPUs), busy share the figure the rest is apportioned by.
- **Each planned GPU's pods fit its units**: the counts of the processes the plan put on one
  GPU sum to at most ``N``, so a cluster of the plan's GPUs holds every pod.
- **The room a plan leaves on a GPU goes to the pods on it.** A plan is above its lower bound
  because its GPUs keep room no replica could use (the densest its models were measured at,
  spread, packing); pods asking only their shares would add up to fewer GPUs than the plan
  needs, and a scheduler filling GPUs by units would crowd them past what was measured.

Apportioned as highest averages (D'Hondt's rule) under one capacity per GPU: from a start every
GPU holds, the Deployment furthest under its share (units over share, least first) takes one
more unit a pod while every GPU it is on has room for it. Where a GPU is full to its units,
rounding can leave a pod under its busy share by less than one unit; ``under`` says by how
much at most, and a finer cut makes it smaller.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Apportioned", "Need", "apportion"]


@dataclass(frozen=True)
class Need:
    """What one Deployment's pod needs of a GPU, in units."""

    share: float
    """Its planned share: the larger of its memory and its busy share over the target, as
    units (at most a GPU's)."""
    least: int
    """Units it may never go under: its memory, rounded up; at least 1."""


@dataclass(frozen=True)
class Apportioned:
    units: dict[str, int]
    """Units each Deployment's pods ask for, by name."""
    full: list[int]
    """The plan's GPUs (their index in ``gpus``) whose pods' least units overflow its units:
    the cluster needs more GPUs than the plan there."""
    under: float
    """The most any pod asks under its planned share, in units (0: none)."""


def apportion(
    gpus: Sequence[Mapping[str, int]], needs: Mapping[str, Need], per_gpu: int
) -> Apportioned:
    """Units per Deployment: ``gpus``, each planned GPU's pods by Deployment (name -> pods);
    ``needs``, each Deployment's; ``per_gpu``, the units a GPU has."""
    where: dict[str, dict[int, int]] = {name: {} for name in needs}
    for index, pods in enumerate(gpus):
        for name, count in pods.items():
            where[name][index] = count
    fill = [sum(needs[name].share * n for name, n in pods.items()) for pods in gpus]
    # A start every GPU holds and little is left to add to: each share scaled by its fullest
    # GPU (scaled so, that GPU's shares sum to per_gpu, and every other's to less), rounded
    # down; the least units where they are more.
    units = {}
    for name, need in needs.items():
        fullest = max((fill[g] for g in where[name]), default=0.0)
        scaled = need.share * per_gpu / fullest if fullest > 0 else need.share
        units[name] = min(per_gpu, max(need.least, math.floor(scaled + 1e-9)))
    room = [per_gpu - sum(units[name] * n for name, n in pods.items()) for pods in gpus]
    full = [index for index, left in enumerate(room) if left < 0]
    heap = [(_ratio(units[name], need), name) for name, need in needs.items() if where[name]]
    heapq.heapify(heap)
    while heap:
        _, name = heapq.heappop(heap)
        if units[name] < per_gpu and all(room[g] >= n for g, n in where[name].items()):
            units[name] += 1
            for g, n in where[name].items():
                room[g] -= n
            heapq.heappush(heap, (_ratio(units[name], needs[name]), name))
    under = max((need.share - units[name] for name, need in needs.items()), default=0.0)
    return Apportioned(units, full, max(0.0, round(under, 6)))


def _ratio(units: int, need: Need) -> float:
    return units / max(need.share, 1e-9)

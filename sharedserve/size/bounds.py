"""The fewest GPUs any plan could use, and what a number of GPUs costs. Pure.

The lower bound is the largest of five: the processes' memory (each with its context reserve)
over one GPU's memory, their busy shares over the utilisation target, the replicas over the
densest a GPU may hold, counted per model (a replica of a model measured at most 4 to a GPU
takes a quarter of one, whatever its neighbours), the most GPUs one model's replicas must be
spread over (its ``min_replicas``), and the replicas no two of which can share a GPU: those of
models measured only alone, and those over half a GPU's memory or over half its target in time
(whichever of the two is more). A plan is judged by how far above it it lands. The baseline is
the fleet without sharing: one replica per GPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sharedserve.placement import Replicas
from sharedserve.size.demand import Demand

__all__ = ["HOURS_PER_MONTH", "Bound", "Cost", "cost", "lower_bound"]

HOURS_PER_MONTH = 730
"""Hours in an average month (8,760 / 12), as cloud price sheets count them."""


@dataclass(frozen=True)
class Bound:
    gpus: int
    """The largest of the five below."""
    by_memory: int
    by_compute: int
    by_density: int
    by_spread: int
    """A model whose ``min_replicas`` must be on different GPUs needs that many GPUs."""
    by_large: int
    """Replicas no two of which fit one GPU: measured only alone, or past half a resource."""


@dataclass(frozen=True)
class Cost:
    gpus: int
    gpu_hours_per_month: float
    per_month: float


def lower_bound(
    demands: Sequence[Demand] | Sequence[Replicas],
    gpu_memory_mib: float,
    reserve_mib: float,
    target: float,
) -> Bound:
    """No plan of ``demands`` fits on fewer GPUs than ``gpus``. Given what the placement routine
    places (a shared server's replica one of them), it counts one context reserve a process."""
    memory = sum(d.replicas * (d.memory_mib + reserve_mib) for d in demands)
    busy = sum(d.replicas * d.busy_share for d in demands)
    # A GPU holding a replica holds at most its model's densest measured replicas, so each
    # replica takes at least 1/densest of a GPU: with one densest for all, replicas / densest.
    slots = sum(d.replicas / d.max_density for d in demands)
    # A tolerance keeps float sums a hair over a whole number from costing a GPU.
    by_memory = math.ceil(memory / gpu_memory_mib - 1e-9)
    by_compute = math.ceil(busy / target - 1e-9)
    by_density = math.ceil(slots - 1e-9)
    by_spread = max((d.spread for d in demands), default=0)
    # A replica measured only alone shares with nothing; two replicas over half a GPU's memory
    # (or over half its target in time) never share with each other.
    shared = [d for d in demands if d.max_density > 1]
    alone = sum(d.replicas for d in demands if d.max_density == 1)
    big_memory = sum(
        d.replicas for d in shared if 2 * (d.memory_mib + reserve_mib) > gpu_memory_mib
    )
    big_time = sum(d.replicas for d in shared if 2 * d.busy_share > target)
    by_large = alone + max(big_memory, big_time)
    parts = (by_memory, by_compute, by_density, by_spread, by_large)
    return Bound(max(*parts, 0), *parts)


def cost(gpus: int, price_per_hour: float) -> Cost:
    """What ``gpus`` GPUs cost a month at ``price_per_hour`` each."""
    hours = gpus * HOURS_PER_MONTH
    return Cost(gpus, float(hours), hours * price_per_hour)

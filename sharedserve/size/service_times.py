"""A model call's measured time as sizing reads it, and the queueing figures built on it: the
service-time distribution a profile's row gives (``ServiceTimes``), a process's requests in
flight (``in_flight``), the model-call slots a CPU profile's limit gives (``cpu_slots``) and an
M/G/1 queue's mean wait. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["ServiceTimes", "cpu_slots", "in_flight", "mean_wait_ms"]


@dataclass(frozen=True)
class ServiceTimes:
    """An empirical distribution of one model call's time: (value_ms, count) pairs."""

    values_ms: tuple[float, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.values_ms or len(self.values_ms) != len(self.counts):
            raise ValueError("service times need one count per value, and at least one value")
        if any(not v >= 0 for v in self.values_ms) or any(c < 1 for c in self.counts):
            raise ValueError("service times must be >= 0 ms with counts >= 1")

    @classmethod
    def of(cls, pairs: Sequence[tuple[float, int]]) -> ServiceTimes:
        return cls(tuple(float(v) for v, _ in pairs), tuple(int(c) for _, c in pairs))

    @classmethod
    def from_histogram(cls, data: Mapping[str, int]) -> ServiceTimes:
        """From ``bench.histogram.LatencyHistogram.to_dict()``'s form (keys: a bucket's lowest
        value in microseconds; its width is under 0.1% of it, so the lowest value stands in)."""
        pairs = [(int(k) / 1000, n) for k, n in data.items() if k.isdigit()]
        return cls.of(sorted(pairs))

    @cached_property  # read for every neighbour of every replica a plan predicts
    def mean_ms(self) -> float:
        values, counts = np.asarray(self.values_ms), np.asarray(self.counts)
        return float(values @ counts / counts.sum())

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        counts = np.asarray(self.counts, dtype=float)
        return rng.choice(np.asarray(self.values_ms), size=n, p=counts / counts.sum())


def in_flight(qps: float, mean_ms: float) -> float:
    """A process's busy share as throughput gives it: its requests in flight on average (QPS x
    mean latency, Little's law). What ``size.predict.interference`` compares neighbourhoods by,
    measured and planned alike: a CPU host has no utilisation per process, and a GPU's
    utilisation in a row of several processes cannot be split between them."""
    return qps * mean_ms / 1000


def cpu_slots(cpu_limit: float | None, default_cores: float) -> int:
    """A CPU profile's model-call slots: the whole cores of its CPU limit (``default_cores``
    without one), at least 1. Calls beyond the whole cores share the framework's thread pool,
    sized to them, so such a call waits its turn as it would for a slot."""
    return max(1, math.floor(cpu_limit or default_cores))


def mean_wait_ms(calls: ServiceTimes, rate: float, cpu_limit: float | None) -> float:
    """An M/G/1 queue's mean wait at ``rate`` per slot (Pollaczek-Khinchine: lambda E[S^2] /
    2(1 - rho)); 0 at or past saturation, where the row would not be trusted anyway."""
    slots = cpu_slots(cpu_limit, 1)  # no limit on the row: one slot, the most wait
    per_slot = rate / slots / 1000.0  # requests a millisecond
    total = sum(calls.counts)
    second = sum(v * v * n for v, n in zip(calls.values_ms, calls.counts, strict=True)) / total
    rho = per_slot * calls.mean_ms
    return 0.0 if rho >= 1 else per_slot * second / (2 * (1 - rho))

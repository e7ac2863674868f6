"""How long a sweep will take, said before it starts: arithmetic on the settings. Pure.

Every step (a density, or a scale of a mix) takes its warm-up and its measured ``--duration``
(each ``repeat`` times), an allowance for the load generator and the report, and the start and
stop of its replicas. That last part is most of a sweep on a small machine, and it grows with
the replicas: each ``serve`` imports its framework and loads its model, mostly on one thread, so
a step's replicas start about as many at a time as they have CPUs (at most one each, less
under a ``cpu_limit`` quota), and 28 replicas on one CPU take 28 starts in a row.

The allowances were measured on a 2-core machine without a GPU, where ``bench`` gives the
servers one CPU and the load generator the other: the example mix (tiny, mobilenet_v2, a torch
resnet50) at 7, 14 and 28 replicas spent 50, 95 and 155 s a step beyond warm-up and measurement,
5.4 to 6.4 s a replica; a run of it on a quiet machine 4.7 s. ``REPLICA_S`` is the middle of
these, ``REPLICA_MAX_S`` half as much again above the slowest, so that the upper bound holds on a
busy machine too. A step whose windows do not agree measures on, up to ``--max-duration``: the
upper bound counts that as well, so neither figure is a promise, and the bound is the one to
plan by.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sharedserve.config import BenchSettings

__all__ = [
    "REPLICA_MAX_S",
    "REPLICA_S",
    "STEP_MAX_S",
    "STEP_S",
    "Estimate",
    "estimate",
    "span",
]

STEP_S = 5.0
"""Seconds a step takes besides its measurement and its replicas: the load generator started
(Python, Locust, each model's metadata) and stopped, the servers' limits read, the report
rewritten. About 4 to 5 s measured, ``--targets`` runs included."""
STEP_MAX_S = 12.0
"""The most that part has been seen to take on a busy machine, with room to spare."""
REPLICA_S = 5.5
"""Seconds one replica takes to start and stop on a CPU of its own (measured: 4.7 to 6.4 s)."""
REPLICA_MAX_S = 9.0
"""The upper bound's figure for the same."""


def span(seconds: float) -> str:
    """A duration as people read it: ``45 s``, ``3 min 20 s``, ``1 h 5 min``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        minutes, rest = divmod(s, 60)
        return f"{minutes} min" + (f" {rest} s" if rest else "")
    hours, rest = divmod(s, 3600)
    return f"{hours} h" + (f" {rest // 60} min" if rest // 60 else "")


@dataclass(frozen=True)
class Estimate:
    """A sweep's expected length, step by step: measurement, an allowance, replicas started."""

    replicas: tuple[int, ...]
    """Replicas each step starts and stops, in order; 0 for running endpoints (``--targets``)."""
    warmup_s: float
    duration_s: float
    """Seconds measured per step when its windows agree at once."""
    max_duration_s: float
    """Seconds measured per step at most (``--max-duration``)."""
    repeat: int = 1
    """Measurements per step, each with its warm-up."""
    server_cpus: int = 1
    """CPUs the replicas start on."""
    replica_cpu: float = 1.0
    """The most of a CPU one replica's start can use: 1, or its quota below that."""
    pace: float = 1.0
    """The steps done took this many times what the estimate gave them (``paced``); 1 before."""

    @property
    def steps(self) -> int:
        return len(self.replicas)

    def starts_in_a_row(self, step: int) -> float:
        """How many single replica starts the step's take, one after another: its replicas
        start together, as many at a time as their CPUs allow."""
        n = self.replicas[step]
        if n == 0:
            return 0.0
        return n / min(float(self.server_cpus), n * self.replica_cpu)

    def _step(self, step: int, measured_s: float, allowance_s: float, replica_s: float) -> float:
        measuring = self.repeat * (self.warmup_s + measured_s)
        return measuring + allowance_s + replica_s * self.starts_in_a_row(step)

    def step_s(self, step: int) -> float:
        """The expected seconds of step ``step`` (from 0), at the pace so far."""
        return self.pace * self._step(step, self.duration_s, STEP_S, REPLICA_S)

    def longest_step_s(self, step: int) -> float:
        """The most step ``step`` should take: windows measuring on to --max-duration, slow
        starts."""
        return self._step(step, self.max_duration_s, STEP_MAX_S, REPLICA_MAX_S)

    @property
    def total_s(self) -> float:
        return sum(self.step_s(i) for i in range(self.steps))

    @property
    def longest_s(self) -> float:
        return sum(self.longest_step_s(i) for i in range(self.steps))

    def left_s(self, done: int, into_step_s: float = 0.0) -> float:
        """Seconds left after ``done`` steps and ``into_step_s`` of the one running."""
        current = max(0.0, self.step_s(done) - into_step_s) if done < self.steps else 0.0
        return current + sum(self.step_s(i) for i in range(done + 1, self.steps))

    def paced(self, first: int, done: int, took_s: float) -> Estimate:
        """This estimate with its remaining steps scaled by how steps ``first`` to ``done - 1``
        went: they took ``took_s`` in all. What a machine's start-up and measurement cost is
        known once a step has run; the time left is then that, not the allowance."""
        planned = sum(replace(self, pace=1.0).step_s(i) for i in range(first, done))
        if planned <= 0 or took_s <= 0:
            return self
        return replace(self, pace=took_s / planned)

    def describe(self, what: str) -> str:
        """One line: the expected total, what it is made of, and the longest it may take."""
        measured = f"{self.warmup_s:g} s warm-up + {self.duration_s:g} s measured"
        if self.repeat > 1:
            measured = f"{self.repeat} x ({measured})"
        parts = f"{measured} + ~{STEP_S:g} s for the load generator and the report"
        started = sum(self.replicas)
        slow = []
        if started:
            cpus = f"{self.server_cpus} CPU{'' if self.server_cpus == 1 else 's'}"
            parts += (
                f"; ~{REPLICA_S:g} s to start and stop each replica, {started} in all on {cpus}"
            )
            slow.append("replicas start slowly")
        if self.max_duration_s > self.duration_s:
            windows = "every step's windows" if self.steps > 1 else "its windows"
            slow.append(f"{windows} take until --max-duration ({self.max_duration_s:g} s) to agree")
        if not slow:
            slow.append("the load generator starts slowly")
        each = "each " if self.steps > 1 else ""
        return (
            f"estimate: about {span(self.total_s)} for {what} ({each}{parts}); up to "
            f"{span(self.longest_s)} if {' or '.join(slow)}"
        )


def estimate(settings: BenchSettings, sweeps: int = 1, *, then: Sequence[int] = ()) -> Estimate:
    """The estimate of ``sweeps`` sweeps of ``settings`` (profile runs two: two patterns), then
    steps of ``then`` replicas each (profile's open-loop rows) measured the same way."""
    if settings.pack is None:
        replicas: tuple[int, ...] = (0,)
        limits: list[float] = []
    else:
        entries = settings.pack.entries
        per_scale = sum(e.replicas for e in entries)
        replicas = tuple(s * per_scale for s in settings.scales) * sweeps + tuple(then)
        limits = [e.cpu_limit_cores for e in entries if e.cpu_limit_cores is not None]
    cpus = len(settings.server_cpus) if settings.server_cpus else os.cpu_count() or 1
    return Estimate(
        replicas=replicas,
        warmup_s=settings.warmup_s,
        duration_s=settings.duration_s,
        max_duration_s=(
            settings.max_measured_s if settings.stability_windows > 1 else settings.duration_s
        ),
        repeat=settings.repeat,
        server_cpus=cpus,
        replica_cpu=min([1.0, *limits]),
    )

"""Each model's CPU seconds in a shared process, by phase: who burns the CPU.

A phase's work is timed on the thread that does it, with that thread's CPU clock
(``time.thread_time``, a fraction of a microsecond to read): a request's decoding on the event
loop or in a worker thread, its model call in a scheduler thread, a page-in in a worker thread.
A thread's clock counts nothing another thread spends meanwhile, so each figure is the work of
the model it is charged to, however many models run at once; what it cannot see is the threads
a framework starts of its own (intra-op pools), whose time inside a model call is not counted.

Charging is on every request's path, from many threads: each thread adds to a tally of its own
(no lock, no lost update between two threads), and a reading sums the tallies. A thread that
has ended leaves its tally to the process's total, so threads that come and go (worker pools
shrink when idle) do not pile up.

Work a thread hands to another process and waits for (a large JSON body parsed in a worker
process) is reported by that thread (``spent_elsewhere``) and charged with its own time: the
phase's timer adds what ``taken_elsewhere`` gives back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from enum import IntEnum
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

__all__ = ["CpuPhase", "CpuSeconds", "spent_elsewhere", "taken_elsewhere"]

_ELSEWHERE = threading.local()


def spent_elsewhere(seconds: float) -> None:
    """``seconds`` of another process's CPU, spent for the work this thread is timing."""
    _ELSEWHERE.seconds = getattr(_ELSEWHERE, "seconds", 0.0) + seconds


def taken_elsewhere() -> float:
    """The seconds ``spent_elsewhere`` reported on this thread since the last call."""
    seconds = getattr(_ELSEWHERE, "seconds", 0.0)
    _ELSEWHERE.seconds = 0.0
    return seconds


class CpuPhase(IntEnum):
    """Where a model's CPU time goes."""

    DECODE = 0
    """Its requests' decoding and validation (JSON or protobuf to arrays)."""
    CALL = 1
    """Its model calls as the calling thread sees them, batches merged and split included."""
    ENCODE = 2
    """Its answers' encoding."""
    PAGING = 3
    """Loading it, paging it in, and paging others out to make room for it."""

    @property
    def label(self) -> str:
        return self.name.lower()


_Tally = dict[str, list[float]]
"""Model -> seconds by phase (indexed by ``CpuPhase``)."""


class CpuSeconds(Collector):
    """``sharedserve_model_cpu_seconds_total{model, phase}``, and the figures for ``/limits``."""

    def __init__(self) -> None:
        self._mine = threading.local()
        self._lock = threading.Lock()  # a thread's first charge, and readings; never a charge
        self._threads: list[tuple[threading.Thread, _Tally]] = []
        self._ended: _Tally = {}

    def charge(self, model: str, phase: CpuPhase, seconds: float) -> None:
        """``seconds`` of this thread's CPU time to ``model``'s ``phase``."""
        tally: _Tally | None = getattr(self._mine, "tally", None)
        if tally is None:
            tally = self._join()
        row = tally.get(model)
        if row is None:
            row = tally[model] = [0.0] * len(CpuPhase)
        row[phase] += seconds

    def _join(self) -> _Tally:
        tally: _Tally = {}
        self._mine.tally = tally
        with self._lock:
            self._threads.append((threading.current_thread(), tally))
        return tally

    def totals(self, models: Iterable[str] = ()) -> dict[str, dict[str, float]]:
        """Each model's seconds so far, by phase label (every phase, 0 where none), those of
        ``models`` included where they have spent none yet."""
        summed: _Tally = {model: [0.0] * len(CpuPhase) for model in models}
        with self._lock:
            live: list[tuple[threading.Thread, _Tally]] = []
            for thread, tally in self._threads:
                if thread.is_alive():
                    live.append((thread, tally))
                else:  # it charges no more: its figures join the ended threads' for good
                    _add(self._ended, tally)
            self._threads = live
            _add(summed, self._ended)
            for _, tally in live:
                # A copy taken in one step: the thread may add a model to its tally meanwhile.
                _add(summed, tally.copy())
        return {
            model: {phase.label: row[phase] for phase in CpuPhase}
            for model, row in sorted(summed.items())
        }

    def of(self, model: str) -> dict[str, float]:
        """``model``'s seconds by phase label; zeros where it has spent none yet."""
        return self.totals([model])[model]

    def collect(self) -> Iterator[Any]:
        family = CounterMetricFamily(
            "sharedserve_model_cpu_seconds",
            "CPU time spent for each model, by phase (decode, call, encode, paging), on the "
            "threads that did the work; a framework's own intra-op threads are not counted",
            labels=["model", "phase"],
        )
        for model, phases in self.totals().items():
            for phase, seconds in phases.items():
                family.add_metric([model, phase], seconds)
        yield family


def _add(into: _Tally, tally: _Tally) -> None:
    for model, row in tally.items():
        total = into.setdefault(model, [0.0] * len(CpuPhase))
        for phase, seconds in enumerate(row):
            total[phase] += seconds

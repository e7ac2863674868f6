"""Prometheus series of each model's memory and paging (``paging.py``), in its server's registry.

Per model, so a dashboard shows which models are cold and what their cold starts cost: loads
from disk (at start, by the repository API, a TensorFlow page-in), page-ins by how (a device copy
or a reload) and how long they took, page-outs, how long requests waited for their model to be
resident, and the bytes each model is allowed and holds. ``/sharedserve/v1/limits`` also shows
the exact p50/p99 of the process's last loads and page-ins by how (``timings``), which a
histogram's buckets cannot give.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sharedserve.server.metrics.cpu import CpuPhase, CpuSeconds

__all__ = ["PagingMetrics"]

# From a device copy (milliseconds) to a large model's reload from disk (tens of seconds).
_PAGING_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
TIMINGS_KEPT = 1024
"""Loads and page-ins of each kind whose times ``timings`` reports (the last ones)."""


class PagingMetrics:
    def __init__(self, registry: CollectorRegistry, cpu: CpuSeconds | None = None) -> None:
        self._cpu = cpu
        self._times: dict[str, deque[float]] = {}  # by kind: load, device_copy, reload
        self._cold = Counter(
            "sharedserve_model_cold_starts",
            "Model versions loaded from disk: at start, by the repository API, or reloaded by "
            "a page-in (TensorFlow)",
            ["model"],
            registry=registry,
        )
        self._page_ins = Counter(
            "sharedserve_model_page_ins",
            "Page-ins of a paged-out model version: device_copy (torch, from host memory) or "
            "reload (TensorFlow, from disk)",
            ["model", "how"],
            registry=registry,
        )
        self._page_in_seconds = Histogram(
            "sharedserve_model_page_in_seconds",
            "Time one page-in took, room made included",
            ["model"],
            buckets=_PAGING_BUCKETS,
            registry=registry,
        )
        self._page_outs = Counter(
            "sharedserve_model_page_outs",
            "Model versions moved out to make room for another (--paging lru)",
            ["model"],
            registry=registry,
        )
        self._wait = Histogram(
            "sharedserve_model_residency_wait_seconds",
            "Time a request waited for its model to be resident (paged in), time-outs included",
            ["model"],
            buckets=_PAGING_BUCKETS,
            registry=registry,
        )
        self._memory = Gauge(
            "sharedserve_model_memory_bytes",
            "Memory of a model's versions: budget (gpu_memory_mib, else the measured peak) and "
            "held (reserved now: resident or being paged in)",
            ["model", "kind"],
            registry=registry,
        )

    def cold_start(self, model: str) -> None:
        self._cold.labels(model).inc()

    def loaded(self, model: str, seconds: float) -> None:
        """A version of ``model`` loaded from disk (not a page-in) in ``seconds``."""
        self.cold_start(model)
        self._timed("load", seconds)

    def page_in(self, model: str, how: str, seconds: float) -> None:
        self._page_ins.labels(model, how).inc()
        self._page_in_seconds.labels(model).observe(seconds)
        self._timed(how, seconds)

    def _timed(self, kind: str, seconds: float) -> None:
        # deque.append is atomic: worker threads and the loop record without a lock.
        self._times.setdefault(kind, deque(maxlen=TIMINGS_KEPT)).append(seconds)

    def timings(self) -> dict[str, Any]:
        """By kind (``load`` from disk; page-ins by how), over the last ``TIMINGS_KEPT``: how
        many, and their exact p50 and p99 in seconds."""
        report: dict[str, Any] = {}
        for kind, times in sorted(self._times.items()):
            seconds = np.asarray(list(times))
            p50, p99 = np.percentile(seconds, [50, 99])
            report[kind] = {
                "count": seconds.size,
                "p50_s": round(float(p50), 4),
                "p99_s": round(float(p99), 4),
            }
        return report

    def page_out(self, model: str) -> None:
        self._page_outs.labels(model).inc()

    def cpu_spent(self, model: str, seconds: float) -> None:
        """``seconds`` of a thread's CPU time spent loading or paging for ``model``."""
        if self._cpu is not None:
            self._cpu.charge(model, CpuPhase.PAGING, seconds)

    def waited(self, model: str, seconds: float) -> None:
        self._wait.labels(model).observe(seconds)

    def track_memory(
        self, model: str, budget: Callable[[], float], held: Callable[[], float]
    ) -> None:
        """The model's gauges read its versions' figures at scrape time."""
        self._memory.labels(model, "budget").set_function(budget)
        self._memory.labels(model, "held").set_function(held)

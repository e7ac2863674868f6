"""Prometheus metrics of one model server (prometheus-client, one registry per server).

A registry per server instead of the library's global one: tests run servers in-process. A
process may serve many models: the per-model series (requests, latency, batch size, queue depth
and wait, whether its last load failed, CPU seconds by phase: ``cpu.py``) take each model's
name (``for_model``); the process-wide ones (connections refused, arriving bytes, GPU memory),
and requests never routed to a model (an unknown name, a message refused before it is parsed),
take the process's label: the model's name when it serves one, as before. GPU memory is read
from NVML at scrape time, only when NVML sees a real GPU: a simulated inventory has no memory
use to report.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sharedserve.server.metrics.cpu import CpuSeconds
from sharedserve.server.metrics.paging import PagingMetrics

__all__ = [
    "GpuMemoryReading",
    "Metrics",
    "ModelMetrics",
    "ModelSeries",
    "RequestCounter",
    "RequestTally",
]

EVERY_MODEL = "*"
"""The process label of a server with several models: its process-wide series are all of
theirs."""

# Latency buckets from 1 ms to 10 s: model servers live between the two.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


GpuMemoryReading = tuple[float | None, float | None, float | None]
"""(bytes this process uses per NVML, its cap, bytes its framework's allocator holds)."""

_GPU_MEMORY = (
    ("sharedserve_gpu_memory_used_bytes", "GPU memory used by this process, from NVML"),
    ("sharedserve_gpu_memory_cap_bytes", "GPU memory cap of this process"),
    (
        "sharedserve_gpu_memory_allocator_bytes",
        "GPU memory the framework's allocator holds (what the cap governs); the rest of the "
        "used figure is CUDA context and library workspaces",
    ),
)


class _GpuMemory(Collector):
    def __init__(self, model: str, read: Callable[[], GpuMemoryReading]) -> None:
        self._model, self._read = model, read

    def collect(self) -> Iterator[Any]:
        for (name, documentation), value in zip(_GPU_MEMORY, self._read(), strict=True):
            if value is not None:
                family = GaugeMetricFamily(name, documentation, labels=["model"])
                family.add_metric([self._model], value)
                yield family


class RequestCounter(Protocol):
    """Where a transport counts a request's status and latency."""

    def observe_request(self, protocol: str, code: str | int, seconds: float) -> None: ...


class ModelSeries(RequestCounter, Protocol):
    """What a model's inference path records: ``Metrics`` (under the process label) or one
    model's ``ModelMetrics``."""

    def observe_batch(self, rows: int) -> None: ...

    def track_queue_depth(self, depth: Callable[[], float]) -> None: ...

    def forget_queue_depth(self, depth: Callable[[], float]) -> None: ...

    def observe_queue_wait(self, seconds: float) -> None: ...


class Metrics:
    def __init__(self, model: str) -> None:
        self.model = model  # the process label
        self._models: dict[str, ModelMetrics] = {}
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "sharedserve_requests",
            "Predict requests by protocol and status code",
            ["model", "protocol", "code"],
            registry=self.registry,
        )
        self._duration = Histogram(
            "sharedserve_request_duration_seconds",
            "Predict request latency inside the server",
            ["model", "protocol"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._batch = Histogram(
            "sharedserve_batch_size",
            "Rows per model call (1 per request without batching)",
            ["model"],
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        self._queue = Gauge(
            "sharedserve_queue_depth",
            "Model calls waiting for their turn in the shared scheduler, plus requests waiting "
            "for their batch",
            ["model"],
            registry=self.registry,
        )
        self._depths: list[Callable[[], float]] = []
        self._wait = Histogram(
            "sharedserve_queue_wait_seconds",
            "Time a model call waited in the shared scheduler's queue for a thread",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        # The queue is a model's: its series is made per model (for_model), not for "*".
        if model != EVERY_MODEL:
            self._queue.labels(model).set(0)
        self._arriving = Gauge(
            "sharedserve_request_body_arriving_bytes",
            "Bytes held by REST request bodies still arriving or waiting to be decoded "
            "(at most --max-arriving-bytes)",
            ["model"],
            registry=self.registry,
        )
        self._arriving.labels(model).set(0)
        self.cpu = CpuSeconds()
        """Each model's CPU seconds by phase, charged where the work runs (``cpu.py``)."""
        self.registry.register(self.cpu)
        self.paging = PagingMetrics(self.registry, self.cpu)
        self._load_failed = Gauge(
            "sharedserve_model_load_failed",
            "1 while a model's last load failed (at start, a reload, a poll or the repository "
            "API; the repository index says why), 0 once it loaded",
            ["model"],
            registry=self.registry,
        )
        self._refused = Counter(
            "sharedserve_connections_refused",
            "REST connections closed before a request was served: over --max-connections "
            "(over_capacity), headers not received in time (header_timeout), over "
            "--max-header-bytes (header_too_large), or a TLS handshake that failed or timed "
            "out (tls_handshake)",
            ["model", "reason"],
            registry=self.registry,
        )

    def observe_request(self, protocol: str, code: str | int, seconds: float) -> None:
        self._requests.labels(self.model, protocol, str(code)).inc()
        self._duration.labels(self.model, protocol).observe(seconds)

    def refuse_connection(self, reason: str) -> None:
        self._refused.labels(self.model, reason).inc()

    def observe_batch(self, rows: int) -> None:
        self._batch.labels(self.model).observe(rows)

    def track_queue_depth(self, depth: Callable[[], float]) -> None:
        self._depths.append(depth)
        _sum_into(self._queue.labels(self.model), self._depths)

    def observe_queue_wait(self, seconds: float) -> None:
        self._wait.labels(self.model).observe(seconds)

    def forget_queue_depth(self, depth: Callable[[], float]) -> None:
        self._depths = [d for d in self._depths if d is not depth]
        _sum_into(self._queue.labels(self.model), self._depths)

    def for_model(self, name: str) -> ModelMetrics:
        """The per-model series of model ``name`` (one object per name, its versions share it)."""
        if name not in self._models:
            self._queue.labels(name).set(0)
            self._models[name] = ModelMetrics(self, name)
        return self._models[name]

    def model_load(self, name: str, *, failed: bool) -> None:
        """Model ``name``'s last load failed, or loaded."""
        self._load_failed.labels(name).set(1 if failed else 0)

    def forget_model_load(self, name: str) -> None:
        """Model ``name`` is no longer named by the server's config: no series."""
        with contextlib.suppress(KeyError):  # none yet
            self._load_failed.remove(name)

    def track_arriving_bytes(self, held: Callable[[], float]) -> None:
        self._arriving.labels(self.model).set_function(held)

    def track_gpu_memory(self, read: Callable[[], GpuMemoryReading]) -> None:
        """``read`` returns the three figures of ``GpuMemoryReading``, each None if unknown."""
        self.registry.register(_GpuMemory(self.model, read))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class ModelMetrics:
    """One model's per-model series in its process's registry."""

    def __init__(self, metrics: Metrics, model: str) -> None:
        self._metrics, self.model = metrics, model
        self._depths: list[Callable[[], float]] = []

    def observe_request(self, protocol: str, code: str | int, seconds: float) -> None:
        self._metrics._requests.labels(self.model, protocol, str(code)).inc()
        self._metrics._duration.labels(self.model, protocol).observe(seconds)

    def observe_batch(self, rows: int) -> None:
        self._metrics._batch.labels(self.model).observe(rows)

    def track_queue_depth(self, depth: Callable[[], float]) -> None:
        # The scheduler's queue and each version's batcher: the model's queue is all of theirs.
        self._depths.append(depth)
        _sum_into(self._metrics._queue.labels(self.model), self._depths)

    def forget_queue_depth(self, depth: Callable[[], float]) -> None:
        """An unloaded version's batcher no longer counts."""
        self._depths = [d for d in self._depths if d is not depth]
        _sum_into(self._metrics._queue.labels(self.model), self._depths)

    def observe_queue_wait(self, seconds: float) -> None:
        self._metrics._wait.labels(self.model).observe(seconds)


def _sum_into(gauge: Gauge, depths: list[Callable[[], float]]) -> None:
    frozen = tuple(depths)
    gauge.set_function(lambda: sum(d() for d in frozen))


class RequestTally:
    """Counts one request under the model it was routed to once that is known (``routed``),
    else under the process label: a client's made-up names never become series."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._model: ModelSeries | None = None

    def routed(self, series: ModelSeries) -> None:
        self._model = series

    def observe_request(self, protocol: str, code: str | int, seconds: float) -> None:
        (self._model or self._metrics).observe_request(protocol, code, seconds)

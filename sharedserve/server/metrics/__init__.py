"""The server's Prometheus series (prometheus-client, one registry per server): requests,
batches, queues, connections, GPU memory (``prometheus.py``), each model's memory and
paging (``paging.py``), and each model's CPU seconds by phase (``cpu.py``)."""

from sharedserve.server.metrics.cpu import CpuPhase, CpuSeconds, spent_elsewhere, taken_elsewhere
from sharedserve.server.metrics.paging import PagingMetrics
from sharedserve.server.metrics.prometheus import (
    EVERY_MODEL,
    GpuMemoryReading,
    Metrics,
    ModelMetrics,
    ModelSeries,
    RequestCounter,
    RequestTally,
)

__all__ = [
    "EVERY_MODEL",
    "CpuPhase",
    "CpuSeconds",
    "GpuMemoryReading",
    "Metrics",
    "ModelMetrics",
    "ModelSeries",
    "PagingMetrics",
    "RequestCounter",
    "RequestTally",
    "spent_elsewhere",
    "taken_elsewhere",
]

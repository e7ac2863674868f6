"""Prometheus gauges of the allocator: per GPU (memory, utilization, health) and per vGPU.

Everything is read at scrape time, in the metrics server's thread: health and allocation from
snapshots the event loop replaces (never mutates), memory used and utilization from NVML. A
simulated backend answers None for those two and they are left out, never made up; the
``sharedserve_allocator_gpu_info`` series says ``simulated="true"`` for a fake inventory, whose
memory totals are the configured ones.

``sharedserve_allocator_vgpu_allocated`` is as the kubelet last told us: 1 after Allocate, 0
when the kubelet offered the vGPU as available (GetPreferredAllocation). The device plugin API
has no call for a pod's end, so a released vGPU reads 1 until it is offered again, and vGPUs
the kubelet has not mentioned since this process started have no series at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sharedserve.allocator.health_state import Health
from sharedserve.allocator.inventory import Inventory
from sharedserve.errors import SharedServeError
from sharedserve.gpu.backend import GpuBackend

__all__ = ["AllocatorCollector", "MetricsServer", "UsageView"]

log = logging.getLogger(__name__)

_MIB = 1 << 20
_GPU_LABELS = ["uuid", "index"]


class UsageView:
    """Which vGPUs the kubelet last said were allocated (Allocate) or free (offered as
    available). For metrics only; decisions never depend on it. The dict is replaced, never
    changed in place, so the metrics thread can read it without a lock."""

    def __init__(self) -> None:
        self.allocated: Mapping[str, bool] = {}

    def mark(self, device_ids: Iterable[str], allocated: bool) -> None:
        self.allocated = {**self.allocated, **dict.fromkeys(device_ids, allocated)}


class AllocatorCollector(Collector):
    def __init__(
        self,
        inventory: Inventory,
        backend: GpuBackend,
        health: Callable[[], Mapping[str, Health]],
        usage: UsageView,
    ) -> None:
        self._inventory = inventory
        self._backend = backend
        self._health = health
        self._usage = usage

    def _read(self, what: str, read: Callable[[str], int | None], uuid: str) -> int | None:
        try:
            return read(uuid)
        except SharedServeError as e:
            log.debug("no %s for GPU %s: %s", what, uuid, e.message)
            return None

    def collect(self) -> Iterator[Any]:
        simulated = "true" if self._backend.simulated else "false"
        info = GaugeMetricFamily(
            "sharedserve_allocator_gpu_info",
            "GPUs the allocator shares (simulated=true: a fake inventory, no figure is measured)",
            labels=[*_GPU_LABELS, "name", "simulated"],
        )
        total = _gauge("gpu_memory_total_bytes", "GPU memory in bytes, as discovered")
        used = _gauge("gpu_memory_used_bytes", "GPU memory in use by all processes, from NVML")
        util = _gauge("gpu_utilization_ratio", "Share of time a kernel ran on the GPU (NVML)")
        healthy = _gauge("gpu_healthy", "1 when the GPU (and so its vGPUs) is Healthy")
        vgpus = _gauge("gpu_vgpus", "vGPUs the GPU advertises")
        health = self._health()
        for gpu in self._inventory.gpus:
            labels = [gpu.uuid, str(gpu.index)]
            info.add_metric([*labels, gpu.name, simulated], 1)
            total.add_metric(labels, gpu.memory_mib * _MIB)
            healthy.add_metric(labels, health.get(gpu.uuid) is Health.HEALTHY)
            vgpus.add_metric(labels, gpu.replicas)
            used_mib = self._read("memory used", self._backend.memory_used_mib, gpu.uuid)
            if used_mib is not None:
                used.add_metric(labels, used_mib * _MIB)
            percent = self._read("utilization", self._backend.utilization_percent, gpu.uuid)
            if percent is not None:
                util.add_metric(labels, percent / 100)
        allocated = GaugeMetricFamily(
            "sharedserve_allocator_vgpu_allocated",
            "1 when the kubelet last reported the vGPU allocated, 0 when it last offered it free",
            labels=["vgpu", "uuid"],
        )
        for vgpu_id, is_allocated in self._usage.allocated.items():
            vgpu = self._inventory.get(vgpu_id)
            if vgpu is not None:
                allocated.add_metric([vgpu_id, vgpu.gpu.uuid], is_allocated)
        yield from (info, total, used, util, healthy, vgpus, allocated)


def _gauge(name: str, documentation: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"sharedserve_allocator_{name}", documentation, labels=_GPU_LABELS)


class MetricsServer:
    """``/metrics`` over HTTP in a daemon thread (prometheus-client's own server)."""

    def __init__(self, collector: AllocatorCollector, host: str, port: int) -> None:
        registry = CollectorRegistry()
        registry.register(collector)
        try:
            self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as e:
            raise SharedServeError(f"cannot serve metrics on {host}:{port}: {e.strerror}") from e
        log.info("metrics on http://%s:%d/metrics", host, port)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

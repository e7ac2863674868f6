"""``sharedserve allocator --api dra``: publish the slice, serve the kubelet, until SIGTERM.

The same inventory, health monitor and metrics as the device plugin; what differs is the
transport: the scheduler learns of the GPUs from our ResourceSlice, and a pod's share reaches
it through a CDI spec per claim rather than through Allocate.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from sharedserve.allocator.dra.checkpoint import Checkpoint
from sharedserve.allocator.dra.kube import KubeApi
from sharedserve.allocator.dra.kubelet import DraKubeletSession
from sharedserve.allocator.dra.preparer import Preparer
from sharedserve.allocator.dra.publisher import SlicePublisher
from sharedserve.allocator.dra.slices import semver
from sharedserve.allocator.health import HealthMonitor
from sharedserve.allocator.health_state import HealthBook
from sharedserve.allocator.inventory import Inventory
from sharedserve.allocator.metrics import AllocatorCollector, MetricsServer, UsageView
from sharedserve.allocator.settings import AllocatorSettings
from sharedserve.gpu.backend import GpuBackend

__all__ = ["serve"]

log = logging.getLogger(__name__)


async def serve(settings: AllocatorSettings, backend: GpuBackend, inventory: Inventory) -> None:
    dra = settings.dra
    assert dra.node_name is not None  # validate() said so
    dra.slices.check_fits(len(inventory.gpus))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    api = KubeApi(dra.kubeconfig, dra.api_timeout_s)
    log.info("API server %s, node %s", api.server, dra.node_name)
    version = backend.driver_version()
    publisher = SlicePublisher(
        api,
        dra.node_name,
        inventory.gpus,
        options=dra.slices,
        driver_version=None if version is None else semver(version),
        backoff_s=dra.publish_backoff_s,
    )
    uuids = [gpu.uuid for gpu in inventory.gpus]
    book = HealthBook(uuids, settings.ignored_xids, settings.xid_recovery_probes)
    health_view = book.snapshot()

    def publish() -> None:
        nonlocal health_view
        health_view = book.snapshot()
        publisher.update(health_view)

    monitor = HealthMonitor(backend, book, uuids, settings.health_interval_s, publish)
    preparer = Preparer(
        api.read_claim,
        inventory.gpus,
        dra.node_name,
        dra.cdi_dir,
        Checkpoint(dra.checkpoint),
        slots=dra.slices.slots,
        gpu_cdi_kind=settings.grant.cdi_kind,
    )
    log.info("%d claim(s) prepared before this start (checkpoint)", len(preparer.prepared))
    session = DraKubeletSession(dra, preparer, publisher.republish)
    metrics = None
    tasks: list[asyncio.Task[None]] = []
    try:
        if settings.metrics_port:
            # No vGPUs in this mode: the per-vGPU series stay empty, the per-GPU ones are as
            # with the device plugin.
            collector = AllocatorCollector(inventory, backend, lambda: health_view, UsageView())
            metrics = MetricsServer(collector, settings.metrics_host, settings.metrics_port)
        # The first probe before anything is published: a broken GPU is never offered.
        await monitor.probe_round()
        publish()
        monitor.start_xid_watch(loop)
        tasks = [
            asyncio.create_task(monitor.probe_forever(), name="health-probe"),
            asyncio.create_task(publisher.run(), name="slice-publisher"),
            asyncio.create_task(session.run(), name="kubelet-session"),
        ]
        stopped = asyncio.create_task(stop.wait(), name="stop-signal")
        done, _ = await asyncio.wait([*tasks, stopped], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        for task in done:
            if task is not stopped:
                task.result()  # the other tasks end early only by raising; let that surface
        # The slice stays: the kubelet removes it if we do not come back, and a driver that
        # is only being updated keeps its GPUs schedulable meanwhile.
        log.info("stopping: removing our sockets")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await monitor.stop()
        if metrics is not None:
            metrics.close()
        api.close()

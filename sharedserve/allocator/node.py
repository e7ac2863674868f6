"""What both transports run on a node: GPU health, metrics and the wait for SIGTERM.

The device plugin and the DRA driver differ only in how the kubelet hears of the GPUs; this
runs the rest, the same for both. Each transport gives ``publish`` (told every health change,
and the first probe's result before anything else starts, so a GPU already broken is never
offered) and the coroutines of its own long-running tasks.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from sharedserve.allocator.health import HealthMonitor
from sharedserve.allocator.health_state import Health, HealthBook
from sharedserve.allocator.inventory import Inventory
from sharedserve.allocator.metrics import AllocatorCollector, MetricsServer, UsageView
from sharedserve.allocator.settings import AllocatorSettings
from sharedserve.gpu.backend import GpuBackend

__all__ = ["serve_node"]

log = logging.getLogger(__name__)

Runner = Callable[[], Coroutine[Any, Any, None]]


async def serve_node(
    settings: AllocatorSettings,
    backend: GpuBackend,
    inventory: Inventory,
    *,
    publish: Callable[[Mapping[str, Health]], None],
    runners: Mapping[str, Runner],
    usage: UsageView,
    node_check: Callable[[], str | None] | None = None,
    stopping: str = "stopping",
) -> None:
    """Probe, publish, run ``runners`` (by task name) until SIGTERM or SIGINT, or until one of
    them raises, which is then raised here."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    uuids = [gpu.uuid for gpu in inventory.gpus]
    book = HealthBook(uuids, settings.ignored_xids, settings.xid_recovery_probes)
    # Read by the metrics thread: replaced on every change, never mutated.
    health_view = book.snapshot()

    def changed() -> None:
        nonlocal health_view
        health_view = book.snapshot()
        publish(health_view)

    monitor = HealthMonitor(
        backend, book, uuids, settings.health_interval_s, changed, node_check=node_check
    )
    metrics = None
    tasks: list[asyncio.Task[None]] = []
    try:
        if settings.metrics_port:
            collector = AllocatorCollector(inventory, backend, lambda: health_view, usage)
            metrics = MetricsServer(collector, settings.metrics_host, settings.metrics_port)
        await monitor.probe_round()
        changed()
        monitor.start_xid_watch(loop)
        tasks = [asyncio.create_task(monitor.probe_forever(), name="health-probe")]
        tasks += [asyncio.create_task(run(), name=name) for name, run in runners.items()]
        stopped = asyncio.create_task(stop.wait(), name="stop-signal")
        done, _ = await asyncio.wait([*tasks, stopped], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        for task in done:
            if task is not stopped:
                task.result()  # the other tasks end early only by raising; let that surface
        log.info("%s", stopping)
    finally:
        for task in tasks:
            task.cancel()
        # Each runner's own finally closes what it opened (servers, sockets); exceptions of
        # tasks that failed were raised above already.
        await asyncio.gather(*tasks, return_exceptions=True)
        await monitor.stop()
        if metrics is not None:
            metrics.close()

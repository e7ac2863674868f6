"""Start the allocator: discover GPUs, cut them into vGPUs, serve the kubelet until SIGTERM.

With ``--api dra`` the same discovery feeds the DRA driver (``allocator/dra/run.py``) instead.

Discovery happens once: the inventory (and so every vGPU ID) is fixed for the life of the
process, as the kubelet expects. A GPU that later disappears or fails is reported Unhealthy,
not removed. Failing to discover any GPU at start-up is an error (exit 1), as in NVIDIA's
plugin; once running, no NVML failure stops the process.
"""

from __future__ import annotations

import asyncio
import gc
import logging

from sharedserve.allocator.deviceplugin.kubelet import KubeletSession
from sharedserve.allocator.deviceplugin.plugin import DeviceBoard, DevicePluginServicer
from sharedserve.allocator.health import mps_daemon_check
from sharedserve.allocator.inventory import Inventory, build_inventory
from sharedserve.allocator.metrics import UsageView
from sharedserve.allocator.node import serve_node
from sharedserve.allocator.settings import AllocatorSettings, Api
from sharedserve.errors import NvmlUnavailable
from sharedserve.gpu.backend import GpuBackend, open_gpu_backend

__all__ = ["run"]

log = logging.getLogger(__name__)


def _discover(settings: AllocatorSettings, backend: GpuBackend) -> Inventory:
    inventory = build_inventory(backend.list_gpus(), settings.sizing)
    if settings.api is Api.DRA:
        for gpu in inventory.gpus:
            log.info("GPU %d %s (%s, %d MiB)", gpu.index, gpu.uuid, gpu.name, gpu.memory_mib)
        if not inventory.gpus:
            log.warning("no GPUs found: publishing no ResourceSlice")
        return inventory
    for gpu in inventory.gpus:
        log.info(
            "GPU %d %s (%s, %d MiB, NUMA %s): %d vGPUs of %d MiB",
            gpu.index,
            gpu.uuid,
            gpu.name,
            gpu.memory_mib,
            "unknown" if gpu.numa_node is None else gpu.numa_node,
            gpu.replicas,
            gpu.vgpu_memory_mib,
        )
        if gpu.replicas == 0:
            log.warning("GPU %s is smaller than one vGPU and is not advertised", gpu.uuid)
    if not inventory.gpus:
        log.warning("no GPUs found: registering %s with no devices", settings.resource_name)
    return inventory


async def _serve(settings: AllocatorSettings, backend: GpuBackend, inventory: Inventory) -> None:
    board = DeviceBoard(inventory, {})  # every vGPU Unhealthy until the first probe says
    usage = UsageView()
    pipe_dir = settings.grant.mps_pipe_dir
    session = KubeletSession(
        settings,
        lambda: DevicePluginServicer(inventory, board, usage, settings.policy, settings.grant),
    )
    await serve_node(
        settings,
        backend,
        inventory,
        publish=board.publish,
        runners={"kubelet-session": session.run},
        usage=usage,
        node_check=None if pipe_dir is None else mps_daemon_check(pipe_dir),
        stopping="stopping: closing ListAndWatch streams and removing our socket",
    )


def run(settings: AllocatorSettings) -> int:
    """Serve the kubelet until SIGTERM or SIGINT; returns the process exit code."""
    settings.validate()
    backend = open_gpu_backend(settings.fake_gpus)
    if backend is None:
        raise NvmlUnavailable(
            "no NVIDIA driver (NVML) on this node: nothing to allocate "
            "(use --fake-gpus FILE to simulate GPUs for tests)"
        )
    try:
        inventory = _discover(settings, backend)
        # A full garbage collection walks every object the imports left (~40,000, >10 ms on a
        # busy node) and would stall whichever kubelet call triggered it; none of them is
        # garbage, so they are moved out of the collector's sight.
        gc.freeze()
        if settings.api is Api.DRA:
            from sharedserve.allocator.dra.run import serve  # the kubernetes client: DRA only

            asyncio.run(serve(settings, backend, inventory))
        else:
            asyncio.run(_serve(settings, backend, inventory))
    finally:
        backend.close()
    log.info("stopped")
    return 0

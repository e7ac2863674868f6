"""``sharedserve allocator --api dra``: publish the slice, serve the kubelet, until SIGTERM.

The same inventory, health monitor and metrics as the device plugin; what differs is the
transport: the scheduler learns of the GPUs from our ResourceSlice, and a pod's share reaches
it through a CDI spec per claim rather than through Allocate.
"""

from __future__ import annotations

import logging

from sharedserve.allocator.dra.checkpoint import Checkpoint
from sharedserve.allocator.dra.kube import KubeApi
from sharedserve.allocator.dra.kubelet import DraKubeletSession
from sharedserve.allocator.dra.preparer import Preparer
from sharedserve.allocator.dra.publisher import SlicePublisher
from sharedserve.allocator.dra.slices import semver
from sharedserve.allocator.inventory import Inventory
from sharedserve.allocator.metrics import UsageView
from sharedserve.allocator.node import serve_node
from sharedserve.allocator.settings import AllocatorSettings
from sharedserve.gpu.backend import GpuBackend

__all__ = ["serve"]

log = logging.getLogger(__name__)


async def serve(settings: AllocatorSettings, backend: GpuBackend, inventory: Inventory) -> None:
    dra = settings.dra
    assert dra.node_name is not None  # validate() said so
    dra.slices.check_fits(len(inventory.gpus))
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
    try:
        await serve_node(
            settings,
            backend,
            inventory,
            publish=publisher.update,
            runners={"slice-publisher": publisher.run, "kubelet-session": session.run},
            # No vGPUs in this mode: the per-vGPU series stay empty, the per-GPU ones are as
            # with the device plugin.
            usage=UsageView(),
            # The slice stays: the kubelet removes it if we do not come back, and a driver
            # that is only being updated keeps its GPUs schedulable meanwhile.
            stopping="stopping: removing our sockets (the ResourceSlice stays)",
        )
    finally:
        api.close()

"""The DevicePlugin gRPC service: converts messages and calls the pure modules, nothing more.

One servicer serves one gRPC server instance; when the kubelet restarts, ``kubelet.py`` closes
it (ending its ListAndWatch streams cleanly) and serves a fresh one. What outlives both is the
``DeviceBoard`` (the device list, rebuilt when health changes) and the ``UsageView`` (metrics
only). Nothing either holds is needed to answer correctly after a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping

import grpc

from sharedserve import rpc
from sharedserve.allocator.allocation import GrantOptions, container_grant, grants_by_gpu
from sharedserve.allocator.deviceplugin.api import deviceplugin_pb2 as pb
from sharedserve.allocator.health_state import Health
from sharedserve.allocator.inventory import Inventory
from sharedserve.allocator.metrics import UsageView
from sharedserve.allocator.placement import preferred_allocation
from sharedserve.contract import GPU_MEMORY_MIB, NVIDIA_VISIBLE_DEVICES, VGPU_IDS
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import SharedServeError

__all__ = ["OPTIONS", "DeviceBoard", "DevicePluginServicer", "add_to_server"]

log = logging.getLogger(__name__)

SERVICE = "v1beta1.DevicePlugin"
OPTIONS = pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


class DeviceBoard:
    """The ListAndWatch device list, and a wake-up for every stream when it changes."""

    def __init__(self, inventory: Inventory, health: Mapping[str, Health]) -> None:
        self._inventory = inventory
        self._changed = asyncio.Event()
        self.response = self._build(health)

    def _build(self, health: Mapping[str, Health]) -> pb.ListAndWatchResponse:
        devices = []
        for gpu in self._inventory.gpus:
            state = health.get(gpu.uuid, Health.UNHEALTHY).value
            topology = None
            if gpu.numa_node is not None:
                topology = pb.TopologyInfo(nodes=[pb.NUMANode(ID=gpu.numa_node)])
            devices += [pb.Device(ID=i, health=state, topology=topology) for i in gpu.vgpu_ids]
        return pb.ListAndWatchResponse(devices=devices)

    def publish(self, health: Mapping[str, Health]) -> None:
        """Rebuild the list and wake every stream (call on the event loop)."""
        self.response = self._build(health)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def updates(self, closed: asyncio.Event) -> AsyncIterator[pb.ListAndWatchResponse]:
        """The current list, then each new one, until ``closed`` is set."""
        while not closed.is_set():
            changed = self._changed  # taken before yielding: a publish meanwhile is not missed
            yield self.response
            waiters = [asyncio.ensure_future(e.wait()) for e in (changed, closed)]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()


class DevicePluginServicer:
    """``v1beta1.DevicePlugin`` for one gRPC server instance."""

    def __init__(
        self,
        inventory: Inventory,
        board: DeviceBoard,
        usage: UsageView,
        policy: PlacementPolicy,
        grant: GrantOptions,
    ) -> None:
        self._inventory = inventory
        self._board = board
        self._usage = usage
        self._policy = policy
        self._grant = grant
        self._closed = asyncio.Event()

    def close(self) -> None:
        """End this instance's ListAndWatch streams (they return, so the client sees OK)."""
        self._closed.set()

    async def GetDevicePluginOptions(  # noqa: N802 (gRPC method names)
        self, request: pb.Empty, context: grpc.aio.ServicerContext
    ) -> pb.DevicePluginOptions:
        return OPTIONS

    async def ListAndWatch(  # noqa: N802
        self, request: pb.Empty, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        log.info("kubelet opened ListAndWatch (%d vGPUs)", len(self._inventory))
        async for response in self._board.updates(self._closed):
            yield response

    async def GetPreferredAllocation(  # noqa: N802
        self, request: pb.PreferredAllocationRequest, context: grpc.aio.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        answers = []
        try:
            for container in request.container_requests:
                available = list(container.available_deviceIDs)
                self._usage.mark(available, allocated=False)
                chosen = preferred_allocation(
                    self._inventory,
                    available,
                    list(container.must_include_deviceIDs),
                    container.allocation_size,
                    self._policy,
                    allow_multi_gpu=self._grant.allow_multi_gpu,
                )
                answers.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        except SharedServeError as e:
            log.warning("GetPreferredAllocation refused: %s", e.message)
            await rpc.abort(context, e)
        return pb.PreferredAllocationResponse(container_responses=answers)

    async def Allocate(  # noqa: N802
        self, request: pb.AllocateRequest, context: grpc.aio.ServicerContext
    ) -> pb.AllocateResponse:
        answers = []
        try:
            for container in request.container_requests:
                ids = list(container.devices_ids)
                grants = grants_by_gpu(
                    self._inventory, ids, allow_multi_gpu=self._grant.allow_multi_gpu
                )
                grant = container_grant(grants, self._grant)
                answers.append(
                    pb.ContainerAllocateResponse(
                        envs=grant.envs,
                        mounts=[
                            pb.Mount(
                                container_path=m.container_path,
                                host_path=m.host_path,
                                read_only=m.read_only,
                            )
                            for m in grant.mounts
                        ],
                        cdi_devices=[pb.CDIDevice(name=name) for name in grant.cdi_devices],
                    )
                )
                log.info(
                    "Allocate %s -> GPU(s) %s, memory %s MiB",
                    grant.envs[VGPU_IDS],
                    grant.envs[NVIDIA_VISIBLE_DEVICES],
                    grant.envs[GPU_MEMORY_MIB],
                )
        except SharedServeError as e:
            log.warning("Allocate refused: %s", e.message)
            await rpc.abort(context, e)
        for container in request.container_requests:
            self._usage.mark(container.devices_ids, allocated=True)
        return pb.AllocateResponse(container_responses=answers)

    async def PreStartContainer(  # noqa: N802
        self, request: pb.PreStartContainerRequest, context: grpc.aio.ServicerContext
    ) -> pb.PreStartContainerResponse:
        # Registered with pre_start_required=False: there is nothing to reset between pods.
        return pb.PreStartContainerResponse()


def add_to_server(servicer: DevicePluginServicer, server: grpc.aio.Server) -> None:
    """``v1beta1.DevicePlugin`` on ``server``, each request parsed by ``rpc`` (a request that
    does not parse is INVALID_ARGUMENT, not a traceback and UNKNOWN)."""

    methods: dict[str, tuple[Callable[..., grpc.RpcMethodHandler], type, type]] = {
        "GetDevicePluginOptions": (rpc.unary_unary, pb.Empty, pb.DevicePluginOptions),
        "ListAndWatch": (rpc.unary_stream, pb.Empty, pb.ListAndWatchResponse),
        "GetPreferredAllocation": (
            rpc.unary_unary,
            pb.PreferredAllocationRequest,
            pb.PreferredAllocationResponse,
        ),
        "Allocate": (rpc.unary_unary, pb.AllocateRequest, pb.AllocateResponse),
        "PreStartContainer": (
            rpc.unary_unary,
            pb.PreStartContainerRequest,
            pb.PreStartContainerResponse,
        ),
    }
    handlers = {
        name: kind(name, request, response, getattr(servicer, name), rpc.abort)
        for name, (kind, request, response) in methods.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))

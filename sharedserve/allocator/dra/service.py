"""The kubelet-facing gRPC services: plugin registration and DRAPlugin (v1 and v1beta1).

Converts messages and calls the preparer, nothing more. The two DRA versions have the same
messages (v1 adds ``Device.share_id``), so one servicer serves both, given the module of each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from sharedserve import rpc
from sharedserve.allocator.dra.api import dra_v1_pb2, dra_v1beta1_pb2
from sharedserve.allocator.dra.api import pluginregistration_pb2 as reg
from sharedserve.allocator.dra.claims import ClaimRef, PreparedClaim
from sharedserve.allocator.dra.preparer import Preparer
from sharedserve.contract import DRA_DRIVER

__all__ = ["PLUGIN_TYPE", "SUPPORTED_VERSIONS", "add_services"]

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
#: gRPC service name -> (the name it is registered as, its messages), newest first.
_VERSIONS: dict[str, tuple[str, ModuleType]] = {
    "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin": ("v1.DRAPlugin", dra_v1_pb2),
    "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin": ("v1beta1.DRAPlugin", dra_v1beta1_pb2),
}
SUPPORTED_VERSIONS = tuple(version for version, _ in _VERSIONS.values())


def _refs(request: Any) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]


def _prepared(pb: ModuleType, result: PreparedClaim | str) -> Any:
    if isinstance(result, str):
        return pb.NodePrepareResourceResponse(error=result)
    has_share = "share_id" in pb.Device.DESCRIPTOR.fields_by_name
    devices = []
    for d in result.devices:
        device = pb.Device(
            request_names=[d.request],
            pool_name=d.pool,
            device_name=d.device,
            cdi_device_ids=list(d.cdi_ids),
        )
        if has_share and d.share_id is not None:
            device.share_id = d.share_id
        devices.append(device)
    return pb.NodePrepareResourceResponse(devices=devices)


class _Registration:
    def __init__(self, endpoint: Path, on_registered: Callable[[], None]) -> None:
        self._info = reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRA_DRIVER,
            endpoint=str(endpoint),
            supported_versions=list(SUPPORTED_VERSIONS),
        )
        self._on_registered = on_registered

    async def GetInfo(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return self._info

    async def NotifyRegistrationStatus(  # noqa: N802
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> Any:
        if request.plugin_registered:
            self._on_registered()
        else:
            log.error("the kubelet refused our registration: %s", request.error)
        return reg.RegistrationStatusResponse()


def add_services(
    server: grpc.aio.Server,
    preparer: Preparer,
    endpoint: Path,
    on_registered: Callable[[], None],
) -> None:
    """Registration and both DRAPlugin versions on ``server``."""
    registration = _Registration(endpoint, on_registered)
    generic = [
        grpc.method_handlers_generic_handler(
            "pluginregistration.Registration",
            {
                "GetInfo": rpc.unary_unary(
                    "GetInfo", reg.InfoRequest, reg.PluginInfo, registration.GetInfo, rpc.abort
                ),
                "NotifyRegistrationStatus": rpc.unary_unary(
                    "NotifyRegistrationStatus",
                    reg.RegistrationStatus,
                    reg.RegistrationStatusResponse,
                    registration.NotifyRegistrationStatus,
                    rpc.abort,
                ),
            },
        )
    ]
    for service, (_, pb) in _VERSIONS.items():
        generic.append(grpc.method_handlers_generic_handler(service, _dra_handlers(pb, preparer)))
    server.add_generic_rpc_handlers(generic)


def _dra_handlers(pb: ModuleType, preparer: Preparer) -> dict[str, grpc.RpcMethodHandler]:
    async def prepare(request: Any, context: grpc.aio.ServicerContext) -> Any:
        answers = await preparer.prepare(_refs(request))
        return pb.NodePrepareResourcesResponse(
            claims={uid: _prepared(pb, result) for uid, result in answers.items()}
        )

    async def unprepare(request: Any, context: grpc.aio.ServicerContext) -> Any:
        answers = await preparer.unprepare(_refs(request))
        return pb.NodeUnprepareResourcesResponse(
            claims={
                uid: pb.NodeUnprepareResourceResponse(error=error or "")
                for uid, error in answers.items()
            }
        )

    return {
        "NodePrepareResources": rpc.unary_unary(
            "NodePrepareResources",
            pb.NodePrepareResourcesRequest,
            pb.NodePrepareResourcesResponse,
            prepare,
            rpc.abort,
        ),
        "NodeUnprepareResources": rpc.unary_unary(
            "NodeUnprepareResources",
            pb.NodeUnprepareResourcesRequest,
            pb.NodeUnprepareResourcesResponse,
            unprepare,
            rpc.abort,
        ),
    }

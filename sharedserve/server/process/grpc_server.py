"""The one gRPC server of a model server: TF Serving's services and the Open Inference
Protocol's on one port, over the process's models (``registry.py``), and the standard health
service."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from sharedserve.server.inference import InferencePath
from sharedserve.server.process.admin import AdminCheck, AdminInterceptor
from sharedserve.server.repository import ModelManager, ModelRegistry
from sharedserve.server.settings import AdminSettings, ConnectionSettings
from sharedserve.server.wire import DecodingBytes
from sharedserve.server.wire.oip import grpc_api as oip_grpc
from sharedserve.server.wire.tfserving import grpc_api as tfserving_grpc

__all__ = ["GrpcHealth", "create_grpc_server"]


class GrpcHealth:
    """The standard gRPC health service (``grpc.health.v1.Health``), which Kubernetes' gRPC probe
    and gRPC-aware proxies ask, for the server (service "") and for each model's name: a model
    NOT_SERVING until it is AVAILABLE, SERVING then, NOT_SERVING again once it is unloaded or
    while it is failed or loading anew; the server as ``/v2/health/ready`` says (``ready``),
    NOT_SERVING until the loads at start settle, then asked again at each model's change; and
    all NOT_SERVING for good once a shutdown begins (``server/shutdown.py``). Its methods run on
    the gRPC server's event loop."""

    def __init__(self, model_names: Sequence[str], ready: Callable[[], bool]) -> None:
        self.servicer = health.aio.HealthServicer()
        self._services = ("", *dict.fromkeys(model_names))
        self._ready = ready
        self._settled = False

    async def not_yet(self) -> None:
        for service in self._services:
            await self.servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)

    async def model_serving(self, name: str) -> None:
        """Model ``name`` is AVAILABLE."""
        await self.servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        await self._server()

    async def model_not_serving(self, name: str) -> None:
        """Model ``name`` was unloaded, failed to load or is loading with nothing serving."""
        await self.servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self._server()

    async def settled(self) -> None:
        """The loads at start are over: the server's status as readiness says from now on."""
        self._settled = True
        await self._server()

    async def stopping(self) -> None:
        await self.servicer.enter_graceful_shutdown()  # later set()s are ignored

    async def _server(self) -> None:
        if self._settled:
            serving = self._ready()
            status = health_pb2.HealthCheckResponse
            await self.servicer.set("", status.SERVING if serving else status.NOT_SERVING)


def create_grpc_server(
    registry: ModelRegistry,
    path: InferencePath,
    manager: ModelManager,
    *,
    max_message_bytes: int,
    connections: ConnectionSettings,
    decoding: DecodingBytes,
    health_service: GrpcHealth,
    admin: AdminSettings | None = None,
) -> grpc.aio.Server:
    """A grpc.aio server with every service; the caller binds ports and starts it. ``decoding``
    is the REST app's decoding limit: a message's bytes count against it as a body's do; every
    model's requests are bounded by the path's element limit (one limit per process);
    ``admin``'s key, where it has one, guards management (``admin.py``)."""
    options = [
        # The REST listener's connection limits, in gRPC core's terms: a connection that sends
        # no HTTP/2 preface in time is closed, one idle with no call open gets GOAWAY, and
        # connections past the cap are closed as they are accepted.
        ("grpc.server_handshake_timeout_ms", int(connections.header_timeout_s * 1000)),
        ("grpc.max_connection_idle_ms", int(connections.keep_alive_timeout_s * 1000)),
        ("grpc.max_allowed_incoming_connections", connections.max_connections),
        # gRPC sets SO_REUSEPORT by default, which lets a second server bind a port that is in use
        # and silently split its traffic; a port conflict must be an error instead.
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]
    guarded = admin is not None and admin.key is not None
    interceptors = [AdminInterceptor(AdminCheck(admin))] if guarded else []  # type: ignore[arg-type]
    server = grpc.aio.server(options=options, interceptors=interceptors)
    server.add_generic_rpc_handlers(tfserving_grpc.handlers(registry, path, decoding, manager))
    server.add_generic_rpc_handlers(oip_grpc.handlers(registry, path, decoding, manager))
    health_pb2_grpc.add_HealthServicer_to_server(health_service.servicer, server)
    return server

"""A registry's REST app and gRPC server on loopback, in a thread of their own, in this process:
for tests that reach into the server (a gated backend, the scheduler's records) while real
clients call it. As run.py does, minus flags, signals and the loader thread (the caller loads)."""

from __future__ import annotations

import asyncio
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from sharedserve.server.process.grpc_server import GrpcHealth, create_grpc_server
from sharedserve.server.process.http import create_app
from sharedserve.server.repository.registry import ModelRegistry
from sharedserve.server.settings import ConnectionSettings, RestSettings
from sharedserve.server.wire.body_bytes import DECODE_WAIT_S, ByteBudget
from tests.support.servers import free_port

__all__ = ["serving_in_process"]


@contextmanager
def serving_in_process(
    registry: ModelRegistry, limits: Callable[[], dict[str, Any]] = dict
) -> Iterator[tuple[str, str]]:
    """-> (the REST base URL, the gRPC target), once the REST listener accepts connections
    (it starts after gRPC and the batchers, which takes a while on a loaded machine)."""
    rest, connections = RestSettings(max_body_bytes=1 << 20), ConnectionSettings()
    decoding = ByteBudget(rest.decoding_limit, DECODE_WAIT_S)
    app = create_app(registry, limits, rest, connections, decoding)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    grpc_ports: queue.Queue[int] = queue.Queue()

    async def serve() -> None:
        health = GrpcHealth(list(registry.served()))
        await health.not_yet()
        grpc_server = create_grpc_server(
            registry, 4 << 20, connections, decoding, health_service=health
        )
        grpc_ports.put(grpc_server.add_insecure_port("127.0.0.1:0"))
        await grpc_server.start()
        await registry.start()
        try:
            await server.serve()
        finally:
            await grpc_server.stop(0)
            await registry.stop()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    thread.start()
    try:
        grpc_target = f"127.0.0.1:{grpc_ports.get(timeout=60)}"
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "REST listener not up"
            time.sleep(0.05)
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        yield f"http://127.0.0.1:{port}", grpc_target
    finally:
        server.should_exit = True
        thread.join(30)

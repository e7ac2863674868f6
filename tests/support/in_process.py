"""A ``ModelServer`` on loopback in a thread of its own, in this process: for tests that reach
into the server (a gated backend, the scheduler's records) while real clients call it. The same
object ``serve`` runs; only the backends may be the test's."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from sharedserve.server.process.model_server import ModelServer
from sharedserve.server.process.start_up import bind
from sharedserve.server.repository import Catalog, FixedCatalog, VersionToServe
from sharedserve.server.settings import (
    GrpcSettings,
    RestSettings,
    ServerSettings,
    ShutdownSettings,
)
from sharedserve.server.version import BackendFactory, make_backend

__all__ = ["InProcess", "loopback_settings", "serving_in_process"]


def loopback_settings(**given: object) -> ServerSettings:
    """Settings for a server on loopback, free ports, a short stop; ``given`` replaces any."""
    settings = ServerSettings(
        rest=RestSettings(host="127.0.0.1", port=0, max_body_bytes=1 << 20),
        grpc=GrpcSettings(port=0, max_message_bytes=4 << 20),
        shutdown=ShutdownSettings(drain_delay_s=0, grace_s=10),
    )
    return replace(settings, **given)  # type: ignore[arg-type]


@dataclass(frozen=True)
class InProcess:
    server: ModelServer
    base: str
    """The REST base URL."""
    grpc_target: str


@contextmanager
def serving_in_process(
    models: Catalog | Sequence[VersionToServe],
    settings: ServerSettings | None = None,
    *,
    backends: BackendFactory = make_backend,
    wait_loaded: bool = True,
) -> Iterator[InProcess]:
    """-> the server once its listeners answer (and, ``wait_loaded``, its models named at start
    have loaded or failed); stopped as a SIGTERM would at the end of the block."""
    catalog = models if not isinstance(models, Sequence) else FixedCatalog(models)
    server = ModelServer(settings or loopback_settings(), catalog, backends=backends)
    sock: socket.socket = bind("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, args=(sock,), daemon=True)
    thread.start()
    try:
        assert server.started.wait(60), "the listeners did not come up"
        if wait_loaded:
            assert server.loaded.wait(120), "the models named at start did not load"
        assert server.rest_address is not None
        host, port = server.rest_address
        yield InProcess(server, f"http://{host}:{port}", f"127.0.0.1:{server.grpc_port}")
    finally:
        server.stop()
        thread.join(30)
        sock.close()

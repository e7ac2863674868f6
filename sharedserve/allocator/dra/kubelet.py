"""Life with the kubelet, DRA side: serve our sockets, and serve afresh when one goes.

The kubelet's plugin watcher finds our registration socket in its plugin registry directory,
asks ``GetInfo`` and answers with ``NotifyRegistrationStatus``; from then on it calls the DRA
service at the endpoint we named. Unlike the device manager, a restarting kubelet does not wipe
the registry: it walks the directory again and registers every socket it finds, so the
registration is repeated without our doing anything. What we must do is keep both sockets
there: if either is removed (a cleanup, a rolling update's old pod exiting late), we stop the
server and serve both again, which the watcher sees as a new plugin.

Both sockets are served by one gRPC server: the registration socket only ever gets
Registration calls, the DRA socket only DRAPlugin ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

import grpc

from sharedserve.allocator.dra.preparer import Preparer
from sharedserve.allocator.dra.service import add_services
from sharedserve.allocator.dra.settings import DraSettings
from sharedserve.allocator.sockets import FileId, file_id, wait_for_kubelet
from sharedserve.errors import SharedServeError

__all__ = ["DraKubeletSession"]

log = logging.getLogger(__name__)


class DraKubeletSession:
    """Serves registration and DRA until cancelled; then removes our sockets."""

    def __init__(
        self, settings: DraSettings, preparer: Preparer, on_registered: Callable[[], None]
    ) -> None:
        self._settings = settings
        self._preparer = preparer
        self._on_registered = on_registered
        self._server: grpc.aio.Server | None = None
        self._ids: dict[Path, FileId | None] = {}
        self.registrations = 0
        """Registrations the kubelet confirmed so far."""

    @property
    def _sockets(self) -> tuple[Path, Path]:
        return (self._settings.dra_socket, self._settings.registration_socket)

    def _registered(self) -> None:
        self.registrations += 1
        log.info("registered with the kubelet (registration %d)", self.registrations)
        self._on_registered()

    async def run(self) -> None:
        try:
            while True:
                # The registry is the kubelet's to make; our own plugin directory is ours.
                await wait_for_kubelet(
                    self._settings.registry_dir,
                    "its plugin registry",
                    self._settings.socket_poll_interval_s,
                    flag="--plugin-registry-dir",
                    routine=self.registrations > 0,
                )
                await self._serve()
                reason = await self._watch()
                log.warning("%s; serving afresh", reason)
                await self._stop()
        finally:
            await self._stop()

    async def _serve(self) -> None:
        server = grpc.aio.server()
        add_services(server, self._preparer, self._settings.dra_socket, self._registered)
        self._settings.dra_socket.parent.mkdir(parents=True, exist_ok=True)
        for path in self._sockets:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a stale socket from an earlier run would make the bind fail
            try:
                server.add_insecure_port(f"unix://{path}")
            except RuntimeError as e:  # grpc raises RuntimeError("Failed to bind ...")
                raise SharedServeError(f"cannot listen on {path}: {e}") from e
        await server.start()
        self._server = server
        self._ids = {path: file_id(path) for path in self._sockets}
        log.info(
            "DRA driver listening on %s (registration on %s)",
            self._settings.dra_socket,
            self._settings.registration_socket,
        )

    async def _stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=1.0)
        # Remove a socket only if it is still the one we bound: a newer driver may own it.
        for path, bound in self._ids.items():
            if bound is not None and file_id(path) == bound:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        self._ids = {}

    async def _watch(self) -> str:
        """Return (with the reason) once we must serve again."""
        while True:
            await asyncio.sleep(self._settings.socket_poll_interval_s)
            for path, bound in self._ids.items():
                if file_id(path) != bound:
                    return f"our socket {path} was removed or replaced"

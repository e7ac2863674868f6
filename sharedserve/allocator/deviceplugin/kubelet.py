"""Life with the kubelet: serve on our socket, register, and start over when either side goes.

The device manager's contract: a plugin listens on a unix socket in the device plugin
directory, then calls ``Registration.Register`` on ``kubelet.sock`` there; the kubelet dials
back and opens ListAndWatch. A restarting kubelet deletes every socket in that directory and
creates a new ``kubelet.sock``, and forgets its plugins. So we watch both files: when
``kubelet.sock`` is replaced, or our socket vanishes, we stop our server, serve a fresh one and
register again, with exponential backoff while the kubelet is not answering. Running pods are
never touched: their devices were decided by the kubelet and live in its checkpoint.

The watch polls ``stat`` (a few syscalls per interval) instead of inotify, which the standard
library lacks; the interval bounds how late a kubelet restart is noticed.

Nothing is served before ``kubelet.sock`` exists, and its directory is never created here
(``sockets.wait_for_kubelet`` says why, and says what it waits for).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import grpc

from sharedserve.allocator.deviceplugin.api import deviceplugin_pb2 as pb
from sharedserve.allocator.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc
from sharedserve.allocator.deviceplugin.plugin import OPTIONS, DevicePluginServicer, add_to_server
from sharedserve.allocator.settings import API_VERSION, AllocatorSettings
from sharedserve.allocator.sockets import FileId, file_id, wait_for_kubelet
from sharedserve.errors import SharedServeError

__all__ = ["KubeletSession"]

log = logging.getLogger(__name__)


class KubeletSession:
    """Serves the plugin and keeps it registered until cancelled; then removes our socket."""

    def __init__(
        self, settings: AllocatorSettings, make_servicer: Callable[[], DevicePluginServicer]
    ) -> None:
        self._settings = settings
        self._make_servicer = make_servicer
        self._server: grpc.aio.Server | None = None
        self._servicer: DevicePluginServicer | None = None
        self._socket_id: FileId | None = None
        self.registrations = 0
        """Successful registrations so far."""

    async def run(self) -> None:
        try:
            while True:
                await self._wait_for_kubelet()
                await self._serve()
                kubelet_id = await self._register()
                reason = await self._watch(kubelet_id)
                log.warning("%s; serving afresh and registering again", reason)
                await self._stop_server()
        finally:
            await self._stop_server()

    async def _serve(self) -> None:
        path = self._settings.plugin_socket
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a stale socket from an earlier run would make the bind fail
        servicer = self._make_servicer()
        server = grpc.aio.server()
        add_to_server(servicer, server)
        try:
            server.add_insecure_port(f"unix://{path}")
        except RuntimeError as e:  # grpc raises RuntimeError("Failed to bind ...")
            raise SharedServeError(f"cannot listen on {path}: {e}") from e
        await server.start()
        self._server, self._servicer = server, servicer
        self._socket_id = file_id(path)
        log.info("device plugin listening on %s", path)

    async def _stop_server(self) -> None:
        server, servicer = self._server, self._servicer
        self._server = self._servicer = None
        if servicer is not None:
            servicer.close()  # ListAndWatch streams return: the kubelet sees them end cleanly
        if server is not None:
            await server.stop(grace=1.0)
        # Remove the socket only if it is still the one we bound: a newer plugin may own it.
        if self._socket_id is not None and file_id(self._settings.plugin_socket) == (
            self._socket_id
        ):
            with contextlib.suppress(FileNotFoundError):
                self._settings.plugin_socket.unlink()
        self._socket_id = None

    async def _wait_for_kubelet(self) -> None:
        await wait_for_kubelet(
            self._settings.kubelet_socket,
            "its registration socket",
            self._settings.socket_poll_interval_s,
            flag="--device-plugin-dir",
            routine=self.registrations > 0,
        )

    async def _register(self) -> FileId:
        """Register, retrying with backoff; returns the identity of the kubelet.sock used."""
        settings = self._settings
        first, longest = settings.register_backoff_s
        delay = first
        tried: FileId | None = None
        while True:
            kubelet_id = file_id(settings.kubelet_socket)
            if kubelet_id != tried:
                delay = first  # a new kubelet.sock: a new kubelet, try it promptly
                tried = kubelet_id
            if kubelet_id is None:  # gone since we served: a kubelet restarting
                await self._wait_for_kubelet()
                continue
            try:
                await self._register_once()
            except grpc.aio.AioRpcError as e:
                log.warning(
                    "registration failed (%s: %s); retrying in %.1f s",
                    e.code().name,
                    e.details(),
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, longest)
                continue
            self.registrations += 1
            log.info(
                "registered %s with the kubelet (registration %d)",
                settings.resource_name,
                self.registrations,
            )
            return kubelet_id

    async def _register_once(self) -> None:
        settings = self._settings
        request = pb.RegisterRequest(
            version=API_VERSION,
            endpoint=settings.socket_name,
            resource_name=settings.resource_name,
            options=OPTIONS,
        )
        async with grpc.aio.insecure_channel(f"unix://{settings.kubelet_socket}") as channel:
            stub = pb_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            await stub.Register(request, timeout=settings.register_timeout_s)

    async def _watch(self, kubelet_id: FileId) -> str:
        """Return (with the reason) once we must serve and register again."""
        settings = self._settings
        while True:
            await asyncio.sleep(settings.socket_poll_interval_s)
            if file_id(settings.plugin_socket) != self._socket_id:
                return f"our socket {settings.plugin_socket} was removed or replaced"
            current = file_id(settings.kubelet_socket)
            # A missing kubelet.sock means the kubelet is down: wait for the new one, which
            # (or the deletion of our socket) is what says it is back.
            if current is not None and current != kubelet_id:
                return f"{settings.kubelet_socket} was re-created (kubelet restart)"

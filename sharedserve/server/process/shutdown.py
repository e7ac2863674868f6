"""How a model server stops on SIGTERM so that a rolling update loses no request.

Kubernetes takes a terminating pod out of its Service's endpoints while it sends SIGTERM, and
the two race: proxies and load balancers may send new requests for a few seconds more. So, from
the first SIGTERM or SIGINT:

1. at once, readiness answers not-ready (every model turns UNLOADING, which every REST and gRPC
   readiness answer reads; the gRPC health service NOT_SERVING), liveness stays up, and each
   REST answer says ``connection: close``, so a keep-alive client reconnects to a ready pod;
2. requests are served as usual for ``drain_delay_s``;
3. then both listeners close: uvicorn closes idle keep-alive connections at once and lets
   in-flight requests finish on theirs; gRPC refuses new calls and lets running ones finish;
4. what still runs at the cut, just before ``grace_s`` from the signal, is cut: REST connections
   are aborted (a body still trickling in included: it never holds the stop past the grace),
   gRPC calls are cancelled; should anything still hold the process at ``grace_s``, it exits
   there. Exit code 0 throughout: a SIGTERM stop is a model server's normal end of life.

A second signal skips what is left of the drain delay; a third cuts what is left at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import grpc
import uvicorn

from sharedserve.server.process.grpc_server import GrpcHealth
from sharedserve.server.repository.registry import ModelRegistry
from sharedserve.server.settings import ShutdownSettings

if TYPE_CHECKING:
    from uvicorn._types import ASGI3Application, ASGIReceiveCallable, ASGISendCallable, Scope

__all__ = ["GracefulServer"]

log = logging.getLogger(__name__)

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# How long before the grace the cut comes, at most: time for the cut connections and calls to
# unwind and the process to exit on its own, before the last resort of os._exit.
_CUT_MARGIN_S = 1.0


class GracefulServer(uvicorn.Server):
    """uvicorn's server with the stop above, for the REST listener and the gRPC server both."""

    def __init__(
        self,
        config: uvicorn.Config,
        settings: ShutdownSettings,
        models: ModelRegistry,
        grpc_server: grpc.aio.Server,
        health: GrpcHealth,
    ) -> None:
        # run.py's config holds the app itself, not an import string.
        config.app = self._closing_while_stopping(cast("ASGI3Application", config.app))
        super().__init__(config)
        self._settings, self._models = settings, models
        self._grpc_server, self._health = grpc_server, health
        self._began: float | None = None  # the loop's time at the first signal
        self._grpc_stop: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()

    @property
    def stopping(self) -> bool:
        return self._began is not None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The loop's own handlers, not uvicorn's signal.signal: the stop runs on the loop. Unlike
        # uvicorn, the signal is not re-raised once stopped, so a SIGTERM stop exits 0.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, self.begin_stop, sig)
        try:
            yield
        finally:
            for sig in _STOP_SIGNALS:
                loop.remove_signal_handler(sig)

    def begin_stop(self, sig: int = signal.SIGTERM, *, last_resort: bool = True) -> None:
        """Step 1 now, steps 3 and 4 scheduled; on the event loop. ``last_resort``: exit the
        process at the grace should anything still hold it (not for a stop asked by the
        program that embeds the server, which owns its process)."""
        loop = asyncio.get_running_loop()
        if self._began is not None:  # a second signal: a person at a terminal who will not wait
            if self.should_exit:
                self._cut()
            self._close_listeners()
            return
        self._began = loop.time()
        drain, grace = self._settings.drain_delay_s, self._settings.grace_s
        log.info(
            "%s: not ready from now on; serving %g s more, then stopping within %g s of it",
            signal.Signals(sig).name,
            drain,
            grace,
        )
        self._models.begin_shutdown()
        self._background_task(self._health.stopping())
        loop.call_later(drain, self._close_listeners)
        loop.call_later(self._cut_after(), self._cut)
        if last_resort:  # in a thread: it must fire even if the loop is held
            timer = threading.Timer(grace, _exit_now, (grace,))
            timer.daemon = True
            timer.start()

    async def stop_grpc(self) -> None:
        """Once the REST server has stopped: the gRPC server's stop begun by the signal, or, when
        the server stopped for another reason (a model that failed to load), one now."""
        if self._grpc_stop is None:
            await self._grpc_server.stop(grace=0)
        else:
            await self._grpc_stop

    def _cut_after(self) -> float:
        drain, grace = self._settings.drain_delay_s, self._settings.grace_s
        return grace - min(_CUT_MARGIN_S, (grace - drain) / 2)

    def _close_listeners(self) -> None:
        if self.should_exit:
            return
        assert self._began is not None
        self.should_exit = True  # uvicorn: listener closed, idle connections closed, wait
        left = self._began + self._cut_after() - asyncio.get_running_loop().time()
        self._grpc_stop = asyncio.get_running_loop().create_task(
            self._grpc_server.stop(grace=max(left, 0.0))
        )
        log.info("listeners closed; waiting for requests in flight")

    def _cut(self) -> None:
        connections = list(self.server_state.connections)
        if connections:
            log.warning(
                "shutdown grace of %g s nearly spent: closing %d REST connection(s) still open",
                self._settings.grace_s,
                len(connections),
            )
        self.force_exit = True  # uvicorn stops waiting for connections and tasks
        for connection in connections:
            connection.transport.abort()

    def _background_task(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _closing_while_stopping(self, app: ASGI3Application) -> ASGI3Application:
        async def closing(
            scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
        ) -> None:
            if self._began is None or scope["type"] != "http":
                await app(scope, receive, send)
                return

            async def send_saying_close(message: Any) -> None:
                if message["type"] == "http.response.start":
                    headers = [*message.get("headers", ()), (b"connection", b"close")]
                    message = {**message, "headers": headers}
                await send(message)

            await app(scope, receive, send_saying_close)

        return closing


def _exit_now(grace: float) -> None:
    log.warning("still running %g s after the stop signal: exiting now", grace)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(0)

"""Management for the platform alone: with a management key (``--admin-key-file``), the calls
that change what the process serves need it, in a header (REST) or in metadata (gRPC), as
Triton's ``--http-restricted-api`` / ``--grpc-restricted-protocol`` do.

What is management is decided here, by path and by method name, in front of every route and
RPC, so a route added later under a management prefix is covered without doing anything:
- REST: the model repository API (``/v2/repository...``) and any change (not GET or HEAD)
  under ``/sharedserve/v1/``;
- gRPC: TF Serving's ``ModelService/HandleReloadConfigRequest`` and the OIP service's
  ``Repository*`` calls.
Inference, health, status, metadata, metrics and the OpenAPI document stay open.

A refusal answers 401 / UNAUTHENTICATED before the body is read, and is logged with the
client's address and the reason (no key, or a wrong one), never the value sent; at most one
line a second, with a count of the rest, so a flood of refusals cannot flood the log.
"""

from __future__ import annotations

import hmac
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import orjson

from sharedserve.server.settings import AdminSettings

__all__ = [
    "MANAGEMENT_RPCS",
    "AdminCheck",
    "AdminGate",
    "AdminInterceptor",
    "is_management_route",
]

log = logging.getLogger(__name__)

MANAGEMENT_RPCS = frozenset(
    {
        "/tensorflow.serving.ModelService/HandleReloadConfigRequest",
        "/inference.GRPCInferenceService/RepositoryIndex",
        "/inference.GRPCInferenceService/RepositoryModelLoad",
        "/inference.GRPCInferenceService/RepositoryModelUnload",
    }
)
"""Every RPC that changes or lists what the process serves (full method names)."""

_READS = frozenset({"GET", "HEAD"})
_LOG_EVERY_S = 1.0


def is_management_route(method: str, path: str) -> bool:
    """Whether the REST request ``method path`` is management (``path`` as routed: decoded)."""
    if path.startswith("/v2/repository"):
        return True
    return path.startswith("/sharedserve/v1/") and method not in _READS


class AdminCheck:
    """The management key and the logging of refusals, for both listeners."""

    def __init__(self, settings: AdminSettings) -> None:
        assert settings.key is not None
        self.header = settings.header
        self._key = settings.key.encode()
        self._last_log = -math.inf  # the first refusal is always logged
        self._unlogged = 0

    def refusal(self, sent: bytes | str | None, carrier: str) -> str | None:
        """Why a management call carrying ``sent`` in its ``carrier`` ("header",
        "metadata") is refused; None: it carries the key."""
        if sent is None:
            return f"this API needs the management key in the {self.header} {carrier}"
        value = sent.encode("latin-1", "replace") if isinstance(sent, str) else sent
        if hmac.compare_digest(value, self._key):
            return None
        return f"the {self.header} {carrier} is not the server's management key"

    def log(self, api: str, peer: str, why: str) -> None:
        """A refusal, in the log (throttled)."""
        now = time.monotonic()
        if now - self._last_log < _LOG_EVERY_S:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more refused since the last line)" if self._unlogged else ""
        self._last_log, self._unlogged = now, 0
        log.warning("management call %s from %s refused: %s%s", api, peer, why, more)


_Receive = Callable[[], Awaitable[Any]]
_Send = Callable[[Any], Awaitable[None]]
_Asgi = Callable[[dict[str, Any], _Receive, _Send], Awaitable[None]]


class AdminGate:
    """ASGI middleware: management routes answer 401 without the key; the rest pass through
    at the cost of a prefix test."""

    def __init__(self, app: _Asgi, check: AdminCheck) -> None:
        self.app, self.check = app, check
        self._header = check.header.encode()

    async def __call__(self, scope: dict[str, Any], receive: _Receive, send: _Send) -> None:
        if scope["type"] == "http" and is_management_route(scope["method"], scope["path"]):
            sent = next((v for k, v in scope["headers"] if k == self._header), None)
            client = scope.get("client")
            peer = f"{client[0]}:{client[1]}" if client else "?"
            why = self.check.refusal(sent, "header")
            if why is not None:
                self.check.log(f"{scope['method']} {scope['path']}", peer, why)
                await _unauthorized(send, why, self.check.header)
                return
        await self.app(scope, receive, send)


async def _unauthorized(send: _Send, why: str, header: str) -> None:
    body = orjson.dumps({"error": why})
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),  # its body is not read
                # RFC 9110 asks a 401 to name its scheme: the key, in this header.
                (b"www-authenticate", f'ApiKey header="{header}"'.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class AdminInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The gRPC side: a management RPC without the key answers UNAUTHENTICATED, its request
    never parsed; every other RPC goes to its handler."""

    def __init__(self, check: AdminCheck) -> None:
        self.check = check

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method
        if method in MANAGEMENT_RPCS:
            metadata = handler_call_details.invocation_metadata or ()
            sent = next((v for k, v in metadata if k == self.check.header), None)
            why = self.check.refusal(sent, "metadata")
            if why is not None:
                return self._deny(method, why)
        return await continuation(handler_call_details)

    def _deny(self, method: str, why: str) -> grpc.RpcMethodHandler:
        async def deny(_request: bytes, context: grpc.aio.ServicerContext) -> None:
            self.check.log(method, context.peer(), why)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

        # No deserializer: the request's bytes are never parsed.
        return grpc.unary_unary_rpc_method_handler(deny)

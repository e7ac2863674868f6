"""Triton's model repository extension on the REST port: ``POST /v2/repository/index``,
``POST /v2/repository/models/{name}/load`` and ``.../unload``, as Triton's own HTTP client calls
them, over the process's ``ModelManager`` (the gRPC calls are in ``grpc_api.py``).

A load or an unload answers once it is done: the model is serving (or gone, its requests in
flight finished). Triton's load parameters that replace the repository's files or config are
refused (400), never ignored.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from sharedserve.errors import InvalidInput, quoted
from sharedserve.server.repository import ModelManager, ModelRegistry
from sharedserve.server.settings import ConnectionSettings, RestSettings
from sharedserve.server.wire.body_bytes import ArrivingBytes, DecodingBytes
from sharedserve.server.wire.http_io import json_response, read_body
from sharedserve.server.wire.json_values import json_type
from sharedserve.server.wire.oip.metadata import index_rows

__all__ = ["add_repository_routes"]

# A repository request is a few flags: a body past this is not one (the infer limit is not it).
_MAX_BODY_BYTES = 64 * 1024


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} must be a JSON object, got {json_type(value)}")
    return value


def _parsed(body: bytes | bytearray) -> dict[str, Any]:
    """The request's JSON object; {} for an empty body (Triton's client may send none)."""
    if not body.strip():
        return {}
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise InvalidInput(f"the request body is not JSON: {e}") from None
    return _object(value, "the request")


def _check_parameters(request: dict[str, Any], allowed: frozenset[str]) -> None:
    parameters = _object(request.get("parameters", {}), "'parameters'")
    for key in parameters:
        if key not in allowed:
            raise InvalidInput(
                f"parameter {quoted(key)} is not supported: models load as the model config "
                "or repository has them"
            )


def add_repository_routes(
    app: FastAPI,
    registry: ModelRegistry,
    manager: ModelManager,
    *,
    rest: RestSettings,
    connections: ConnectionSettings,
    decoding: DecodingBytes,
    arriving: ArrivingBytes,
) -> None:
    limit = min(rest.max_body_bytes, _MAX_BODY_BYTES)

    async def body_of(request: Request) -> dict[str, Any]:
        async with read_body(request, limit, connections.body_timeout_s, arriving, decoding) as b:
            return _parsed(b)

    @app.post("/v2/repository/index")
    async def index(request: Request) -> Response:
        asked = await body_of(request)
        ready = asked.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidInput(f"'ready' must be true or false, got {json_type(ready)}")
        # One repository: any name lists it (Triton: the named one's models).
        named = asked.get("repository_name", "")
        if not isinstance(named, str):
            raise InvalidInput(f"'repository_name' must be a string, got {json_type(named)}")
        rows = index_rows(await manager.index(), registry.stopping, ready_only=ready)
        return json_response(rows)

    @app.post("/v2/repository/models/{name}/load")
    async def load(request: Request, name: str) -> Response:
        _check_parameters(await body_of(request), frozenset())
        await manager.load(name)
        return Response(status_code=200)

    @app.post("/v2/repository/models/{name}/unload")
    async def unload(request: Request, name: str) -> Response:
        _check_parameters(await body_of(request), frozenset({"unload_dependents"}))
        await manager.unload(name)
        return Response(status_code=200)

"""The model server's one HTTP app: TF Serving's REST API and the Open Inference Protocol's on
one port, plus ``/metrics``, ``/sharedserve/v1/limits`` and ``/openapi.json``.

Each wire format adds its own routes over the same predictor; the error handlers here are the
only place an exception becomes a response, so every failure on every path is an
``{"error": ...}`` body with the status ``errors.py`` gives it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from sharedserve.errors import (
    ArrivingBytesExhausted,
    NotResident,
    RequestTimeout,
    SharedServeError,
)
from sharedserve.server.inference import InferencePath
from sharedserve.server.process.admin import AdminCheck, AdminGate
from sharedserve.server.repository import ModelManager, ModelRegistry
from sharedserve.server.settings import AdminSettings, ConnectionSettings, RestSettings
from sharedserve.server.wire import ArrivingBytes, DecodePool, DecodingBytes
from sharedserve.server.wire.http_io import JSON, error, json_response
from sharedserve.server.wire.oip import rest as oip_rest
from sharedserve.server.wire.oip.repository import add_repository_routes
from sharedserve.server.wire.tfserving import rest as tfserving_rest
from sharedserve.server.wire.tfserving.openapi import build_openapi_for

__all__ = ["create_app"]

log = logging.getLogger(__name__)


def create_app(
    registry: ModelRegistry,
    path: InferencePath,
    manager: ModelManager,
    *,
    limits: Callable[[], dict[str, Any]],
    rest: RestSettings,
    connections: ConnectionSettings,
    decoding: DecodingBytes,
    pool: DecodePool,
    admin: AdminSettings | None = None,
) -> FastAPI:
    """The HTTP app for the process's models (``registry``, run on ``path``); ``manager``
    loads and unloads them for the repository API; ``limits`` builds the
    ``/sharedserve/v1/limits`` body, and ``decoding`` (shared with the gRPC server) bounds the
    bytes being decoded at once; ``admin``'s key, where it has one, guards management
    (``admin.py``); ``pool`` parses large JSON bodies in worker processes."""
    metrics = registry.metrics
    # REST bodies only: a gRPC message arrives whole inside grpcio, under its own limit.
    arriving = ArrivingBytes(rest.arriving_limit)
    metrics.track_arriving_bytes(lambda: arriving.held)
    app = FastAPI(title="sharedserve", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(SharedServeError)
    async def _ours(_: Request, exc: SharedServeError) -> Response:
        response = error(exc.http_status, exc.message)
        if isinstance(exc, RequestTimeout | ArrivingBytesExhausted):
            response.headers["connection"] = "close"  # the rest of its body is not read
        if isinstance(exc, NotResident):
            response.headers["retry-after"] = str(max(1, math.ceil(exc.retry_after_s)))
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _routing(_: Request, exc: StarletteHTTPException) -> Response:
        response = error(exc.status_code, str(exc.detail))
        response.headers.update(exc.headers or {})  # a 405's Allow (RFC 9110 requires it)
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error serving %s %s", request.method, request.url.path)
        return error(500, f"internal error: {type(exc).__name__}: {exc}")

    for wire in (tfserving_rest, oip_rest):
        wire.add_routes(
            app,
            registry,
            path,
            rest=rest,
            connections=connections,
            decoding=decoding,
            arriving=arriving,
            parse=pool.parse,
        )
    add_repository_routes(
        app,
        registry,
        manager,
        rest=rest,
        connections=connections,
        decoding=decoding,
        arriving=arriving,
    )

    @app.get("/metrics")
    async def get_metrics() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/sharedserve/v1/limits")
    async def get_limits() -> Response:
        return json_response(limits())

    # It describes the served models' names and versions: built again only when they change.
    built: dict[str, Any] = {}

    @app.get("/openapi.json")
    async def get_openapi() -> Response:
        served = registry.served()
        if built.get("served") != served:
            document = build_openapi_for(served, rest.max_body_bytes)
            built.update(served=served, body=orjson.dumps(document))
        return Response(built["body"], media_type=JSON)

    if admin is not None and admin.key is not None:
        app.add_middleware(AdminGate, check=AdminCheck(admin))
    return app

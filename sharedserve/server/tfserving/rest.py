"""TensorFlow Serving's REST API on FastAPI, plus sharedserve's ``/sharedserve/v1/limits``.

TF Serving's paths put a verb after a colon (``/v1/models/NAME/versions/1:predict``), which no
router parameter expresses, so one catch-all route per method parses the path with a regex.
Bodies are read as raw bytes (never through pydantic) and decoded by ``codec``; decoding,
the model call and encoding run in a worker thread so a 3 MB JSON body or a slow model never
blocks the event loop that answers health probes. Every failure is a ``{"error": ...}`` body
with the status from ``errors.py``; nothing a client sends can stop the process.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from sharedserve.config import ConnectionSettings, RestSettings
from sharedserve.errors import (
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    SharedServeError,
    Unimplemented,
    quoted,
)
from sharedserve.server.budget import ByteBudget
from sharedserve.server.model import ServedModel
from sharedserve.server.predictor import Predictor
from sharedserve.server.signature import Signature
from sharedserve.server.tfserving import codec
from sharedserve.server.tfserving.openapi import build_openapi

__all__ = ["create_app"]

log = logging.getLogger(__name__)

_PATH = re.compile(
    r"^(?P<name>[^/:]+)"
    r"(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
    r"(?:(?P<metadata>/metadata)|:(?P<verb>[A-Za-z]+))?$"
)
_VERSION = re.compile(r"0*(?P<digits>[0-9]{1,19})")  # ASCII digits, no more than int64 has
_INT64_MAX = 2**63 - 1
_JSON = "application/json"
_CLIENT_CLOSED = 499
# How long a body waits for room in the decoding budget before 503: several decodes of a large
# body, so a burst of big requests queues rather than fails, but not so long that a client's
# own timeout fires first.
_DECODE_WAIT_S = 10.0


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=_JSON)


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


def _parse(path: str) -> tuple[str, int | None, bool, str | None]:
    """-> (model name, version or None for latest, is metadata, verb or None)."""
    match = _PATH.match(path)
    if match is None:
        raise NotFound(f"Malformed request: no such path /v1/models/{quoted(path)}")
    if match["label"] is not None:
        # sharedserve serves one version per process; labels would always be unassigned.
        raise NotFound(f"Unrecognized servable version label: {quoted(match['label'])}")
    version = None
    if match["version"] is not None:
        # Not int() alone: it takes any Unicode digit, and raises ValueError (a 500) from 4,301
        # digits on. TF Serving's versions are int64s; past that it answers 400 too.
        number = _VERSION.fullmatch(match["version"])
        if number is None or int(number["digits"]) > _INT64_MAX:
            raise InvalidInput(
                f"Malformed request: version {quoted(match['version'])} is not an integer (int64)"
            )
        version = int(number["digits"])
    return match["name"], version, match["metadata"] is not None, match["verb"]


async def _read_body(request: Request, limit: int, pause_s: float) -> bytes | bytearray:
    """The whole body, within ``limit`` bytes and with no pause over ``pause_s``. A declared
    length is read into one buffer of that size: large bodies wait their turn to be decoded
    (``budget``) holding one copy of their bytes, not a list of chunks and their join."""
    declared = request.headers.get("content-length")
    size = int(declared) if declared is not None and declared.isdigit() else None
    if size is not None and size > limit:
        raise PayloadTooLarge(f"request body of {size} bytes exceeds the limit of {limit}")
    body, chunks, received = bytearray(size or 0), list[bytes](), 0
    stream = request.stream()
    while True:
        try:
            with anyio.fail_after(pause_s):
                chunk = await anext(stream)
        except StopAsyncIteration:
            return body if size is not None else b"".join(chunks)
        except TimeoutError:
            raise RequestTimeout(
                f"no part of the request body arrived for {pause_s:g} s (--body-timeout)"
            ) from None
        if received + len(chunk) > (limit if size is None else size):
            # Chunked uploads declare no length: counted as they arrive. (The HTTP parser never
            # gives more than a declared length; the check costs nothing and keeps it so.)
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        if size is None:
            chunks.append(chunk)
        else:
            body[received : received + len(chunk)] = chunk
        received += len(chunk)


class _JsonPredict:
    """A REST predict for the predictor: JSON is heavy to decode and encode, so off the loop."""

    heavy = True

    def __init__(self, model: ServedModel, body: bytes | bytearray) -> None:
        self._model, self._body = model, body
        self._format = codec.RequestFormat.ROW

    def decode(self) -> tuple[Signature, dict[str, np.ndarray]]:
        payload = codec.parse_json_body(self._body)
        signature = self._model.signature(codec.read_signature_name(payload))
        request = codec.decode_predict_request(payload, signature)
        self._format = request.format  # the response mirrors the request's layout
        return signature, request.inputs

    def encode(self, outputs: dict[str, np.ndarray]) -> bytes:
        return codec.encode_predict_response(outputs, self._format)


def create_app(
    predictor: Predictor,
    limits: Callable[[], dict[str, Any]],
    rest: RestSettings,
    connections: ConnectionSettings,
) -> FastAPI:
    """The REST app for one model; ``limits`` builds the ``/sharedserve/v1/limits`` body."""
    model, metrics = predictor.model, predictor.metrics
    decoding = ByteBudget(rest.decoding_limit, _DECODE_WAIT_S)
    app = FastAPI(title="sharedserve", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(SharedServeError)
    async def _ours(_: Request, exc: SharedServeError) -> Response:
        response = _error(exc.http_status, exc.message)
        if isinstance(exc, RequestTimeout):
            response.headers["connection"] = "close"  # the rest of its body is not read
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _routing(_: Request, exc: StarletteHTTPException) -> Response:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error serving %s %s", request.method, request.url.path)
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    @app.get("/v1/models/{path:path}")
    async def get_model(path: str) -> Response:
        name, version, metadata, verb = _parse(path)
        if verb is not None:
            raise InvalidInput(f"Malformed request: GET with verb {quoted(verb)}; use POST")
        model.check(name, version)
        return _json(model.metadata_json() if metadata else model.status_json())

    @app.post("/v1/models/{path:path}")
    async def post_model(path: str, request: Request) -> Response:
        name, version, metadata, verb = _parse(path)
        if metadata or verb is None:
            raise InvalidInput(f"Malformed request: POST /v1/models/{quoted(path)} names no verb")
        if verb in ("classify", "regress"):
            raise Unimplemented(f":{verb} is not supported by sharedserve; use :predict")
        if verb != "predict":
            raise InvalidInput(f"Malformed request: unknown verb {quoted(verb)}")
        started, code = time.perf_counter(), 200
        try:
            model.check(name, version)
            body = await _read_body(request, rest.max_body_bytes, connections.body_timeout_s)
            async with decoding.hold(len(body)):
                answer = await predictor.predict(_JsonPredict(model, body))
            return Response(answer, media_type=_JSON)
        except SharedServeError as e:
            code = e.http_status
            raise
        except ClientDisconnect:
            # The client went away mid-upload: its doing, not a server error. Counted as nginx
            # does ("499 client closed request"), not logged, and nothing is sent back.
            code = _CLIENT_CLOSED
            return Response(status_code=_CLIENT_CLOSED)
        except Exception:
            code = 500
            raise
        finally:
            metrics.observe_request("rest", code, time.perf_counter() - started)

    @app.get("/metrics")
    async def get_metrics() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/sharedserve/v1/limits")
    async def get_limits() -> Response:
        return _json(limits())

    # Built once: it describes the served model's name and version, which never change.
    openapi = orjson.dumps(build_openapi(model.name, model.version, rest.max_body_bytes))

    @app.get("/openapi.json")
    async def get_openapi() -> Response:
        return Response(openapi, media_type=_JSON)

    return app

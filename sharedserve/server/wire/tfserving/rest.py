"""TensorFlow Serving's REST API: routes on the model server's one HTTP app (``server/http.py``).

TF Serving's paths put a verb after a colon (``/v1/models/NAME/versions/1:predict``), which no
router parameter expresses, so one catch-all route per method parses the path with a regex.
Bodies are read as raw bytes (never through pydantic) and decoded by ``codec``; decoding,
the model call and encoding run in a worker thread so a 3 MB JSON body or a slow model never
blocks the event loop that answers health probes. Every failure is a ``{"error": ...}`` body
with the status from ``errors.py``; nothing a client sends can stop the process.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from sharedserve.errors import InvalidInput, NotFound, Unimplemented, quoted
from sharedserve.server.inference import InferencePath, SignatureOf
from sharedserve.server.metrics import RequestTally
from sharedserve.server.repository import ModelRegistry
from sharedserve.server.settings import ConnectionSettings, RestSettings
from sharedserve.server.version import Signature, parse_version
from sharedserve.server.wire import json_arrays
from sharedserve.server.wire.body_bytes import ArrivingBytes, DecodingBytes
from sharedserve.server.wire.decode_pool import Parse
from sharedserve.server.wire.http_io import JSON, counted, json_response, read_body
from sharedserve.server.wire.tfserving import codec
from sharedserve.server.wire.tfserving.status import metadata_json, status_json

__all__ = ["add_routes"]

_PATH = re.compile(
    r"^(?P<name>[^/:]+)"
    r"(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
    r"(?:(?P<metadata>/metadata)|:(?P<verb>[A-Za-z]+))?$"
)


class _Target(NamedTuple):
    name: str
    version: int | None  # None: the latest, or the label's
    label: str | None
    metadata: bool
    verb: str | None


def _parse(path: str, method: str) -> _Target:
    match = _PATH.match(path)
    if match is None:
        raise NotFound(f"Malformed request: no such path /v1/models/{quoted(path)}")
    # 405 with Allow, as HTTP wants and the OpenAPI document says (TF Serving answers 400): a
    # path with a verb takes POST alone, any other GET alone; before the label's 404, as the
    # method is wrong whatever the label.
    allowed = "GET" if match["verb"] is None else "POST"
    if method != allowed:
        raise StarletteHTTPException(
            405,
            f"Malformed request: {method} /v1/models/{quoted(path)}; use {allowed}",
            headers={"Allow": allowed},
        )
    return _Target(
        match["name"],
        parse_version(match["version"]),
        match["label"],
        match["metadata"] is not None,
        match["verb"],
    )


class _JsonPredict:
    """A REST predict for the inference path: JSON is heavy to decode and encode, so off the
    loop."""

    heavy = True

    def __init__(self, body: bytes | bytearray, parse: Parse) -> None:
        self._body, self._parse = body, parse
        self._format = codec.RequestFormat.ROW

    def decode(self, signature_of: SignatureOf) -> tuple[Signature, dict[str, np.ndarray]]:
        payload = codec.parse_predict_body(self._body, self._parse)
        signature = signature_of(codec.read_signature_name(payload))
        request = codec.decode_predict_request(payload, signature)
        self._format = request.format  # the response mirrors the request's layout
        return signature, request.inputs

    def encode(self, outputs: dict[str, np.ndarray]) -> bytes:
        return codec.encode_predict_response(outputs, self._format)


def add_routes(
    app: FastAPI,
    registry: ModelRegistry,
    inference: InferencePath,
    *,
    rest: RestSettings,
    connections: ConnectionSettings,
    decoding: DecodingBytes,
    arriving: ArrivingBytes,
    parse: Parse = json_arrays.parse,
) -> None:
    """TF Serving's ``/v1/models/...`` routes; ``arriving`` and ``decoding`` bound the bytes of
    bodies being read and being decoded, ``parse`` parses a body's JSON (``decode_pool.py``)."""

    @app.get("/v1/models/{path:path}")
    async def get_model(path: str) -> Response:
        target = _parse(path, "GET")
        if target.metadata:
            model = registry.lookup(target.name, target.version, target.label)
            return json_response(metadata_json(model))
        # Without a version or label: every version's state, as TF Serving lists them.
        versions = registry.statuses(target.name, target.version, target.label)
        return json_response(status_json(versions, registry.stopping))

    # Every other method reaches _parse too, for the 405's Allow: Starlette's own would name
    # the GET route's method, the first route that matched the path.
    @app.api_route("/v1/models/{path:path}", methods=["DELETE", "OPTIONS", "PATCH", "PUT", "TRACE"])
    async def other_method(path: str, request: Request) -> Response:
        _parse(path, request.method)
        raise AssertionError("unreachable: _parse refuses every method but GET and POST")

    @app.post("/v1/models/{path:path}")
    async def post_model(path: str, request: Request) -> Response:
        target = _parse(path, "POST")
        if target.label:  # an unknown label is 404 whatever the verb (the OpenAPI says so)
            registry.lookup(target.name, label=target.label)
        verb = target.verb
        if verb in ("classify", "regress"):
            raise Unimplemented(f":{verb} is not supported by sharedserve; use :predict")
        if verb != "predict":
            raise InvalidInput(f"Malformed request: unknown verb {quoted(verb)}")

        tally = RequestTally(registry.metrics)

        async def answer() -> Response:
            model = registry.lookup(target.name, target.version, target.label)
            tally.routed(registry.metrics.for_model(model.name))
            limit, pause_s = rest.max_body_bytes, connections.body_timeout_s
            async with read_body(request, limit, pause_s, arriving, decoding) as body:
                answer = await inference.infer(model, _JsonPredict(body, parse))
                return Response(answer, media_type=JSON)

        return await counted(tally, "rest", answer)

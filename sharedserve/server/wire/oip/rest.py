"""The Open Inference Protocol's REST API (KServe "V2"), with the binary tensor data extension:
routes on the model server's one HTTP app (``server/http.py``), beside TF Serving's.

A request may put its JSON header first and raw tensor bytes after it, saying where the header
ends in ``Inference-Header-Content-Length``; an input with ``parameters.binary_data_size`` takes
that many of those bytes, in the order of the inputs. Outputs are sent the same way when asked
(``binary_data`` on a requested output, ``binary_data_output`` on the request), so an image
tensor needs no JSON at all. Decoding, the model call and encoding run in one worker-thread hop,
as for TF Serving's JSON, and go through the same predictor, validator, batcher and metrics
(protocol ``oip-rest``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from sharedserve.errors import InvalidInput, quoted
from sharedserve.server.inference import InferencePath, SignatureOf
from sharedserve.server.metrics import RequestTally
from sharedserve.server.repository import ModelRegistry
from sharedserve.server.settings import ConnectionSettings, RestSettings
from sharedserve.server.version import ModelVersion, Signature, parse_version
from sharedserve.server.wire import json_arrays
from sharedserve.server.wire.body_bytes import ArrivingBytes, DecodingBytes
from sharedserve.server.wire.decode_pool import Parse
from sharedserve.server.wire.http_io import JSON, counted, json_response, read_body
from sharedserve.server.wire.json_values import json_type
from sharedserve.server.wire.oip import HEADER_LENGTH, tensors
from sharedserve.server.wire.oip.metadata import model_metadata, server_metadata

__all__ = ["add_routes"]

_OCTETS = "application/octet-stream"


class _Infer:
    """An OIP REST infer for the inference path: JSON is heavy, so decoded off the loop."""

    heavy = True

    def __init__(
        self,
        model: ModelVersion,
        body: bytes | bytearray,
        header_length: int | None,
        parse: Parse,
    ):
        self._name, self._version, self._parse = model.name, model.version, parse
        self._body, self._header_length = body, header_length
        self._id: Any = None
        # Requested outputs -> binary (None: as the request's binary_data_output says).
        self._wanted: dict[str, bool | None] | None = None
        self._all_binary = False

    def decode(self, signature_of: SignatureOf) -> tuple[Signature, dict[str, np.ndarray]]:
        body, split = memoryview(self._body), self._header_length
        if split is not None and split > len(body):
            raise InvalidInput(
                f"{HEADER_LENGTH} is {split}, but the body has only {len(body)} bytes"
            )
        header = _object(tensors.parse_json(self._body, split, self._parse), "the request")
        raw = body[split:] if split is not None else body[:0]
        self._id = header.get("id")
        if self._id is not None and not isinstance(self._id, str):
            raise InvalidInput(f"'id' must be a string, got {json_type(self._id)}")
        parameters = _object(header.get("parameters", {}), "'parameters'")
        signature = signature_of(_optional_str(parameters, "signature_name"))
        self._all_binary = _flag(parameters, "binary_data_output")
        self._wanted = _requested_outputs(header.get("outputs"), signature)
        return signature, _inputs(header.get("inputs"), signature, raw)

    def encode(self, outputs: dict[str, np.ndarray]) -> tuple[bytes, int | None]:
        """-> (body, length of its JSON header when binary outputs follow it, else None)."""
        wanted = self._wanted if self._wanted is not None else dict.fromkeys(outputs)
        described, blobs = [], []
        for name, binary in wanted.items():
            array = outputs[name]
            entry: dict[str, Any] = {
                "name": name,
                "datatype": tensors.datatype_of(array),
                "shape": list(array.shape),
            }
            if binary if binary is not None else self._all_binary:  # an output's own wins
                blob = tensors.to_raw(array)
                entry["parameters"] = {"binary_data_size": len(blob)}
                blobs.append(blob)
            else:
                entry["data"] = tensors.to_json_data(name, array)
            described.append(entry)
        answer: dict[str, Any] = {
            "model_name": self._name,
            "model_version": str(self._version),
            "outputs": described,
        }
        if self._id is not None:
            answer["id"] = self._id
        header = orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY)
        if not blobs:
            return header, None
        return b"".join([header, *blobs]), len(header)


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} must be a JSON object, got {json_type(value)}")
    return value


def _optional_str(parameters: dict[str, Any], key: str) -> str | None:
    value = parameters.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"parameter {key!r} must be a string, got {json_type(value)}")
    return value


def _flag(parameters: dict[str, Any], key: str, default: bool | None = False) -> Any:
    """A true/false parameter; ``default`` when not given."""
    value = parameters.get(key, default)
    if value is not default and not isinstance(value, bool):
        raise InvalidInput(f"parameter {key!r} must be true or false, got {json_type(value)}")
    return value


def _requested_outputs(requested: Any, signature: Signature) -> dict[str, bool | None] | None:
    """Requested output name -> sent as binary (None: not said); None: every output."""
    if requested is None:
        return None
    if not isinstance(requested, list):
        raise InvalidInput(f"'outputs' must be a list, got {json_type(requested)}")
    wanted: dict[str, bool | None] = {}
    for i, item in enumerate(requested):
        entry = _object(item, f"outputs[{i}]")
        name = entry.get("name")
        if not isinstance(name, str):  # a list or object is no dict key: was a TypeError, 500
            raise InvalidInput(f"outputs[{i}] has no 'name' string (got {json_type(name)})")
        if name not in signature.outputs:
            raise InvalidInput(
                f"outputs[{i}] names unknown output {quoted(name)}; the model's outputs are "
                f"{', '.join(sorted(signature.outputs))}"
            )
        parameters = _object(entry.get("parameters", {}), f"outputs[{i}].parameters")
        wanted[name] = _flag(parameters, "binary_data", default=None)
    return wanted


def _inputs(given: Any, signature: Signature, raw: memoryview) -> dict[str, np.ndarray]:
    if not isinstance(given, list):
        raise InvalidInput(f"'inputs' must be a list of tensors, got {json_type(given)}")
    arrays: dict[str, np.ndarray] = {}
    at = 0
    for i, item in enumerate(given):
        entry = _object(item, f"inputs[{i}]")
        name, datatype, shape = tensors.declared_input(
            signature, arrays, entry.get("name"), entry.get("datatype"), entry.get("shape")
        )
        parameters = _object(entry.get("parameters", {}), f"input {name!r} parameters")
        size = parameters.get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise InvalidInput(f"input {name!r}: binary_data_size must be a whole number")
            if at + size > len(raw):
                raise InvalidInput(
                    f"input {name!r}: binary_data_size {size} runs past the binary data "
                    f"({len(raw) - at} bytes left)"
                )
            arrays[name] = tensors.from_raw(name, datatype, shape, raw[at : at + size])
            at += size
        elif "data" in entry:
            arrays[name] = tensors.from_json(name, datatype, shape, entry["data"])
        else:
            raise InvalidInput(f"input {name!r} has neither 'data' nor binary_data_size")
    if at != len(raw):
        raise InvalidInput(
            f"{len(raw) - at} bytes of binary data after the request's header are claimed by "
            "no input's binary_data_size"
        )
    return arrays


def _header_length(request: Request) -> int | None:
    value = request.headers.get(HEADER_LENGTH)
    if value is None:
        return None
    if not value.isascii() or not value.isdigit():
        raise InvalidInput(f"{HEADER_LENGTH} must be a byte count, got {quoted(value)}")
    return int(value)


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
    """The OIP's ``/v2`` routes; ``arriving`` and ``decoding`` bound the bytes of bodies being
    read and being decoded (shared with TF Serving's API), ``parse`` parses a body's JSON
    (``decode_pool.py``)."""

    @app.get("/v2")
    async def get_server() -> Response:
        return json_response(server_metadata())

    @app.get("/v2/health/live")
    async def live() -> Response:
        return json_response({"live": True})

    @app.get("/v2/health/ready")
    async def ready() -> Response:
        # The OIP: ready when "all the models are ready for inferencing" (else 503).
        registry.require_ready()
        return json_response({"ready": True})

    async def model_ready(name: str, version: str | None = None) -> Response:
        model = registry.lookup(name, parse_version(version))
        registry.require_ready(model)
        return json_response({"name": model.name, "ready": True})

    async def metadata(name: str, version: str | None = None) -> Response:
        model = registry.lookup(name, parse_version(version))
        return json_response(model_metadata(model, registry.served().get(name, [])))

    async def infer(request: Request, name: str, version: str | None = None) -> Response:
        tally = RequestTally(registry.metrics)

        async def answer() -> Response:
            model = registry.lookup(name, parse_version(version))
            tally.routed(registry.metrics.for_model(model.name))
            header_length = _header_length(request)
            limit, pause_s = rest.max_body_bytes, connections.body_timeout_s
            async with read_body(request, limit, pause_s, arriving, decoding) as body:
                infer = _Infer(model, body, header_length, parse)
                content, split = await inference.infer(model, infer)
            if split is None:
                return Response(content, media_type=JSON)
            return Response(content, media_type=_OCTETS, headers={HEADER_LENGTH: str(split)})

        return await counted(tally, "oip-rest", answer)

    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        app.add_api_route(prefix, metadata, methods=["GET"])
        app.add_api_route(f"{prefix}/ready", model_ready, methods=["GET"])
        app.add_api_route(f"{prefix}/infer", infer, methods=["POST"])

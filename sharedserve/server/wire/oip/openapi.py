"""The Open Inference Protocol's part of the OpenAPI document (``/openapi.json``): its ``/v2``
paths and their schemas, which ``tfserving/openapi.py`` puts beside TF Serving's.

As for TF Serving's part, the served names and versions are ``enum`` values so that a fuzzer
reaches the model, and each operation lists exactly the statuses the server can answer
(``oip/rest.py``). The binary tensor extension is described, not modelled: a request's raw
bytes after its JSON header cannot be a JSON Schema, so the request body is documented as JSON
only, and an answer that carries binary outputs is an ``application/octet-stream``
alternative whose JSON header length is in ``Inference-Header-Content-Length``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sharedserve.server.wire.oip import HEADER_LENGTH
from sharedserve.server.wire.oip.metadata import PLATFORM
from sharedserve.server.wire.oip.tensors import DATATYPE_OF_DT
from sharedserve.server.wire.openapi_parts import (
    BAD,
    JSON,
    MISSING,
    Schema,
    body_errors,
    json_body,
    map_of,
    model_params,
    object_of,
    operation,
    path_param,
    ref,
    string,
)

__all__ = ["oip_paths", "oip_schemas"]

_TAG = "Open Inference Protocol"
_NOT_READY = (503, "Too many open connections, or the model is not AVAILABLE; retry later.")


def oip_schemas() -> dict[str, Schema]:
    datatype = {"enum": sorted(set(DATATYPE_OF_DT.values()))}
    shape = {"type": "array", "items": {"type": "integer"}}
    tensor_metadata = object_of({"name": string(), "datatype": datatype, "shape": shape})
    # Parameters are free-form in the protocol; the ones sharedserve reads are named here.
    parameters = map_of({}, description="Free-form; unknown keys are ignored.")
    return {
        "OipServerMetadata": object_of(
            {
                "name": string(),
                "version": string(),
                "extensions": {"type": "array", "items": string()},
            }
        ),
        "OipLive": object_of({"live": {"const": True}}),
        "OipReady": object_of({"ready": {"const": True}}),
        "OipModelReady": object_of({"name": string(), "ready": {"const": True}}),
        "OipTensorMetadata": tensor_metadata,
        "OipModelMetadata": object_of(
            {
                "name": string(),
                "versions": {"type": "array", "items": string()},
                "platform": {"enum": sorted(PLATFORM.values())},
                "inputs": {"type": "array", "items": ref("OipTensorMetadata")},
                "outputs": {"type": "array", "items": ref("OipTensorMetadata")},
            }
        ),
        "OipInferRequest": {
            "type": "object",
            "description": (
                "The model's inputs, each with its datatype and shape (see the model's "
                "metadata); 'data' is the tensor flat or nested. With the binary tensor "
                f"extension, the JSON is followed by raw bytes, {HEADER_LENGTH} says where it "
                "ends, and an input's parameters.binary_data_size takes its share of them."
            ),
            "properties": {
                "id": string(),
                "parameters": parameters
                | {
                    "properties": {
                        "signature_name": string(),
                        "binary_data_output": {"type": "boolean"},
                    }
                },
                "inputs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": string(),
                            "datatype": datatype,
                            "shape": shape,
                            "parameters": parameters,
                            "data": ref("Tensor"),
                        },
                        "required": ["name", "datatype", "shape"],
                    },
                },
                "outputs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": string(), "parameters": parameters},
                        "required": ["name"],
                    },
                },
            },
            "required": ["inputs"],
        },
        "OipRepositoryIndexRequest": {
            "type": "object",
            "description": "May be left out: every model. Other keys are ignored.",
            "properties": {
                "repository_name": string(),
                "ready": {"type": "boolean", "description": "Only the models READY."},
            },
        },
        "OipRepositoryIndex": {
            "type": "array",
            "items": object_of(
                {
                    "name": string(),
                    "version": string(),
                    "state": {"enum": ["READY", "LOADING", "UNAVAILABLE"]},
                    "reason": string(),
                },
                required=["name", "version", "state", "reason"],
            ),
        },
        "OipRepositoryModelRequest": {
            "type": "object",
            "description": (
                "May be left out. Load takes no parameters (Triton's 'config' and file "
                "overrides are refused with 400); unload takes 'unload_dependents'. Other keys "
                "are ignored."
            ),
            "properties": {"parameters": parameters},
        },
        "OipInferResponse": {
            "type": "object",
            "properties": {
                "id": string(),
                "model_name": string(),
                "model_version": string(),
                "outputs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": string(),
                            "datatype": datatype,
                            "shape": shape,
                            "data": ref("OutputTensor"),
                            "parameters": object_of({"binary_data_size": {"type": "integer"}}),
                        },
                        "required": ["name", "datatype", "shape"],
                        "additionalProperties": False,
                    },
                },
            },
            "required": ["model_name", "model_version", "outputs"],
            "additionalProperties": False,
        },
    }


def oip_paths(served: Mapping[str, Sequence[int]], max_body_bytes: int) -> dict[str, Any]:
    """The ``/v2`` paths for the models served (name -> versions)."""
    versions = sorted({str(v) for vs in served.values() for v in vs})
    params = model_params(list(served), {"type": "string", "enum": versions})
    infer_ok = json_body("The model's outputs.", "OipInferResponse")
    infer_ok["content"]["application/octet-stream"] = {
        "schema": {
            "type": "string",
            "format": "binary",
            "description": (
                f"Binary outputs were asked for: the JSON header, as long as {HEADER_LENGTH} "
                "says, then each binary output's bytes in order."
            ),
        }
    }
    infer = operation(
        "",
        _TAG,
        infer_ok,
        BAD,
        (404, "No such model, version, signature, output or path."),
        *body_errors(max_body_bytes),
        requestBody={"required": True, "content": {JSON: {"schema": ref("OipInferRequest")}}},
    )
    per_model = {
        "": ("get", "Metadata", json_body("The model's tensors.", "OipModelMetadata")),
        "/ready": ("get", "Ready", json_body("The model answers.", "OipModelReady")),
    }
    paths: dict[str, Any] = {
        "/v2": {
            "get": operation("getOipServer", _TAG, json_body("The server.", "OipServerMetadata"))
        },
        "/v2/health/live": {"get": operation("getOipLive", _TAG, json_body("Alive.", "OipLive"))},
        "/v2/health/ready": {
            "get": operation("getOipReady", _TAG, json_body("Ready.", "OipReady"), _NOT_READY)
        },
    }
    paths |= _repository_paths(served, max_body_bytes)
    for kind, prefix in [
        ("Latest", "/v2/models/{name}"),
        ("Version", "/v2/models/{name}/versions/{version}"),
    ]:
        in_path = [params[p] for p in params if "{" + p + "}" in prefix]
        for suffix, (method, what, ok) in per_model.items():
            paths[prefix + suffix] = {
                "parameters": in_path,
                method: operation(f"getOipModel{what}{kind}", _TAG, ok, BAD, MISSING, _NOT_READY),
            }
        paths[prefix + "/infer"] = {
            "parameters": in_path,
            "post": infer | {"operationId": f"postOipInfer{kind}"},
        }
    return paths


def _repository_paths(served: Mapping[str, Sequence[int]], max_body_bytes: int) -> dict[str, Any]:
    """Triton's model repository extension (``oip/repository.py``)."""

    def body(schema: str) -> dict[str, Any]:
        return {"required": False, "content": {JSON: {"schema": ref(schema)}}}

    limits = body_errors(min(max_body_bytes, 64 * 1024))
    name = path_param(
        "name",
        {"type": "string", "enum": list(served)},
        "A model the model config or repository names; any other answers 404.",
    )
    changes = (
        400,
        "A malformed body, a parameter not offered, a model that failed to load (the reason "
        "says why), or a server of one --model, whose model is loaded at start.",
    )
    paths: dict[str, Any] = {
        "/v2/repository/index": {
            "post": operation(
                "postOipRepositoryIndex",
                _TAG,
                json_body(
                    "Every model the server knows of, a row per version.", "OipRepositoryIndex"
                ),
                BAD,
                *limits,
                requestBody=body("OipRepositoryIndexRequest"),
            )
        }
    }
    for verb, done in [
        ("load", "The model is loaded and serving."),
        ("unload", "The model is unloaded."),
    ]:
        paths[f"/v2/repository/models/{{name}}/{verb}"] = {
            "parameters": [name],
            "post": operation(
                f"postOipRepository{verb.capitalize()}",
                _TAG,
                {"description": done},
                changes,
                MISSING,
                *limits,
                requestBody=body("OipRepositoryModelRequest"),
            ),
        }
    return paths

"""The OpenAPI 3.1 document of the REST API, served at ``/openapi.json``: a dict, no I/O.

Why by hand: the routes are catch-alls whose paths ``rest.py`` parses with a regex, so FastAPI's
generated document would show one ``{path}`` parameter and no bodies. This one lists TF Serving's
real paths, built from data: each way of naming a version (latest, ``/versions/N``,
``/labels/L``) times each verb, with exactly the statuses the server can answer. Every error is
one ``Error`` body. 500 is never documented: it is a bug, and the fuzz test
(``tests/integration/server/test_openapi.py``) fails on it.

The predict body is TF Serving's generic shape, not the model's own tensors: the document is
built with the app, before the model has loaded, and TF Serving's way to learn the tensors is
the metadata endpoint. The served names and versions are ``enum`` values so that a fuzzer
reaches the models; the descriptions say what any other value gets.

The Open Inference Protocol's ``/v2`` part is ``oip/openapi.py``, and the building blocks both
share are ``server/openapi_parts.py``; this module assembles the whole document.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from sharedserve import __version__
from sharedserve.config import BatchingSettings, CapSource
from sharedserve.enums import Paging
from sharedserve.limits.cpu import CpuLimitSource
from sharedserve.server.metrics import CpuPhase
from sharedserve.server.version import MEMORY_STATES
from sharedserve.server.version.signature import DTYPE_TO_NUMPY
from sharedserve.server.wire.oip.openapi import oip_paths, oip_schemas
from sharedserve.server.wire.openapi_parts import (
    BAD,
    JSON,
    MISSING,
    Schema,
    Status,
    body_errors,
    content,
    json_body,
    map_of,
    model_params,
    object_of,
    operation,
    path_param,
    ref,
    string,
)
from sharedserve.server.wire.tfserving.status import STATES

__all__ = ["build_openapi", "build_openapi_for"]

_INT64 = {"type": "string", "pattern": "^-?[0-9]+$"}  # proto3 JSON writes int64 as a string


def _tensors(tensor: str) -> Schema:
    """A whole tensor, or an object of them by name (several inputs or outputs)."""
    return {"anyOf": [ref(tensor), map_of(ref(tensor), minProperties=1)]}


def _schemas() -> dict[str, Schema]:
    # A function, not a constant: each document is its own, for whoever mutates it.
    return {
        "Error": object_of({"error": string()}),
        "ModelStatus": object_of(
            {"model_version_status": {"type": "array", "items": ref("VersionStatus")}}
        ),
        "VersionStatus": object_of(
            {
                "version": _INT64,
                "state": {"enum": list(STATES)},
                # UNKNOWN, with the reason, once the model has failed to load.
                "status": object_of(
                    {"error_code": {"enum": ["OK", "UNKNOWN"]}, "error_message": string()}
                ),
            }
        ),
        "ModelMetadata": object_of(
            {
                "model_spec": object_of(
                    {"name": string(), "signature_name": string(), "version": _INT64}
                ),
                "metadata": object_of(
                    {"signature_def": object_of({"signature_def": map_of(ref("SignatureDef"))})}
                ),
            }
        ),
        "SignatureDef": object_of(
            {
                "inputs": map_of(ref("TensorInfo")),
                "outputs": map_of(ref("TensorInfo")),
                "method_name": string(),
                "defaults": {"type": "object"},
            }
        ),
        "TensorInfo": object_of(
            {
                "dtype": {"enum": sorted(DTYPE_TO_NUMPY)},
                "tensor_shape": object_of(
                    {
                        "dim": {
                            "type": "array",
                            "items": object_of({"size": _INT64, "name": string()}),
                        },
                        "unknown_rank": {"type": "boolean"},
                    }
                ),
                "name": string(),
            }
        ),
        "Binary": object_of(
            {"b64": {"type": "string", "contentEncoding": "base64"}},
            description="A DT_STRING value: binary in; non-UTF-8, or output *_bytes, out.",
        ),
        "Tensor": {
            "description": "A scalar or nested lists; the input's dtype and shape decide the rest.",
            "anyOf": [
                {"type": ["boolean", "number", "string"]},
                ref("Binary"),
                {"type": "array", "items": ref("Tensor")},
            ],
        },
        "PredictRequest": {
            "type": "object",
            "description": (
                "Row format ('instances', one element per batch row) or columnar format "
                "('inputs', whole tensors); a single-input signature may leave its input "
                "unnamed. The model's own tensors are in its metadata."
            ),
            "properties": {
                "signature_name": {"type": "string", "default": "serving_default"},
                "instances": {"type": "array", "minItems": 1, "items": _tensors("Tensor")},
                "inputs": _tensors("Tensor"),
            },
            "oneOf": [{"required": ["instances"]}, {"required": ["inputs"]}],
        },
        # null stands for a non-finite float, which JSON cannot carry.
        "OutputTensor": {
            "anyOf": [
                ref("Tensor"),
                {"type": "null"},
                {"type": "array", "items": ref("OutputTensor")},
            ]
        },
        "PredictResponse": {
            "type": "object",
            "description": (
                "The request's layout mirrored: 'predictions' for 'instances', 'outputs' for "
                "'inputs'. Unnamed when the signature has one output, else by output name."
            ),
            "properties": {
                "predictions": {"type": "array", "items": _tensors("OutputTensor")},
                "outputs": _tensors("OutputTensor"),
            },
            "additionalProperties": False,
            "oneOf": [{"required": ["predictions"]}, {"required": ["outputs"]}],
        },
        "Limits": object_of(
            {
                "device": {"type": "string", "description": "'cpu' unless a GPU cap is enforced."},
                "gpu_memory_fraction": {"type": ["number", "null"]},
                "gpu_memory_mib": {"type": ["integer", "null"]},
                "gpu_memory_total_mib": {"type": ["integer", "null"]},
                "gpu_memory_source": {"enum": [source.value for source in CapSource]},
                "gpu_memory_enforced": {"type": "boolean"},
                "cpu_limit": {"type": ["number", "null"]},
                "cpu_limit_source": {"enum": [source.value for source in CpuLimitSource]},
                "cpu_limit_cgroup": {"type": ["string", "null"]},
                "available_cpus": {"type": "integer"},
                "intra_op_threads": {"type": "integer"},
                "inter_op_threads": {"type": "integer"},
                # The BatchingSettings fields follow 'enabled' when batching is on.
                "batching": {
                    "type": "object",
                    "properties": {"enabled": {"type": "boolean"}}
                    | {field.name: {"type": "integer"} for field in fields(BatchingSettings)},
                    "required": ["enabled"],
                    "additionalProperties": False,
                },
                "model_call_slots": {
                    "type": "integer",
                    "description": "Model calls run at once by the shared scheduler.",
                },
                "memory": object_of(
                    {
                        "capacity_mib": {
                            "type": ["number", "null"],
                            "description": "What the models may hold together: the GPU cap.",
                        },
                        "held_mib": {"type": "number"},
                        "paging": {"enum": [paging.value for paging in Paging]},
                        "page_in_timeout_s": {"type": "number"},
                        "timings": {
                            "type": "object",
                            "description": "The process's last loads from disk ('load') and "
                            "page-ins by how ('device_copy', 'reload'): how many, and their "
                            "exact p50 and p99.",
                            "additionalProperties": object_of(
                                {
                                    "count": {"type": "integer"},
                                    "p50_s": {"type": "number"},
                                    "p99_s": {"type": "number"},
                                }
                            ),
                        },
                    }
                ),
                "models": {
                    "type": "object",
                    "description": "Each served model's share of the scheduler, its CPU "
                    "seconds by phase, and each of its versions' memory: budget, footprint "
                    "measured at load, state, last use.",
                    "additionalProperties": object_of(
                        {
                            "weight": {"type": "number"},
                            "max_inflight": {"type": "integer"},
                            "cpu_seconds": object_of(
                                {phase.label: {"type": "number"} for phase in CpuPhase},
                                description="CPU time spent for the model so far, by phase, "
                                "on the threads that did the work (as "
                                "sharedserve_model_cpu_seconds_total).",
                            ),
                            "versions": map_of(ref("ModelMemory")),
                        }
                    ),
                },
            }
        ),
        "ModelMemory": object_of(
            {
                "state": {"enum": list(MEMORY_STATES)},
                "error": {"type": ["string", "null"]},
                "pinned": {"type": "boolean"},
                "budget_mib": {"type": ["number", "null"]},
                "enforced": {
                    "type": "boolean",
                    "description": "The runtime itself holds it to its budget (an ONNX model "
                    "with one: its session's memory arena).",
                },
                "weights_mib": {"type": ["number", "null"]},
                "peak_mib": {"type": ["number", "null"]},
                "measured_on": {"enum": ["gpu", "host", None]},
                "held_mib": {"type": "number"},
                "page_in_from": {
                    "enum": ["host_memory", "file", "mapped_file", "none"],
                    "description": "Where a page-in takes it from: a device copy of what host "
                    "memory kept, a reload from its file, or a session made from the file's "
                    "bytes kept in host memory.",
                },
                "last_use": {
                    "type": ["number", "null"],
                    "description": "Unix time of its last request; null: none yet.",
                },
            }
        ),
    }


def _model_paths(served: Mapping[str, Sequence[int]], max_body_bytes: int) -> dict[str, Any]:
    versions = sorted({v for vs in served.values() for v in vs})
    params = model_params(list(served), {"type": "integer", "enum": versions}) | {
        "label": path_param(
            "label", string(), "A version label the model config assigns; any other is 404."
        ),
    }
    body = {"required": True, "content": {JSON: {"schema": ref("PredictRequest")}}}
    not_offered = [(501, "Not offered by sharedserve; use :predict.")]
    # path suffix -> (method, 200 response, errors besides 400 and 404, more fields)
    verbs: dict[str, tuple[str, dict[str, Any] | None, list[Status], dict[str, Any]]] = {
        "": ("get", json_body("The version's state.", "ModelStatus"), [], {}),
        "/metadata": (
            "get",
            json_body("The model's signatures.", "ModelMetadata"),
            [(503, "Too many connections, or the model is not AVAILABLE; retry later.")],
            {},
        ),
        ":predict": (
            "post",
            json_body("The model's outputs.", "PredictResponse"),
            [
                (404, "No such model, version, signature or path."),
                *body_errors(max_body_bytes),
            ],
            {"requestBody": body},
        ),
        ":classify": ("post", None, not_offered, {}),
        ":regress": ("post", None, not_offered, {}),
    }
    paths: dict[str, Any] = {}
    for kind, prefix in [
        ("Latest", "/v1/models/{name}"),
        ("Version", "/v1/models/{name}/versions/{version}"),
        ("Label", "/v1/models/{name}/labels/{label}"),
    ]:
        in_path = [params[p] for p in params if "{" + p + "}" in prefix]
        for suffix, (method, ok, errors, extra) in verbs.items():
            operation_id = f"{method}{suffix.strip('/:').capitalize() or 'Status'}{kind}"
            answers = operation(operation_id, "TF Serving", ok, BAD, MISSING, *errors, **extra)
            paths[prefix + suffix] = {"parameters": in_path, method: answers}
    return paths


def build_openapi(name: str, version: int, max_body_bytes: int) -> dict[str, Any]:
    """The document for one model served as ``name`` version ``version``."""
    return build_openapi_for({name: [version]}, max_body_bytes)


def build_openapi_for(served: Mapping[str, Sequence[int]], max_body_bytes: int) -> dict[str, Any]:
    """The document for the models served (name -> versions)."""
    names = ", ".join(f"{n!r} (version {', '.join(map(str, vs))})" for n, vs in served.items())
    own = {
        "/metrics": ("getMetrics", content("Prometheus text format.", "text/plain", string())),
        "/sharedserve/v1/limits": ("getLimits", json_body("The limits in force.", "Limits")),
        "/openapi.json": ("getOpenApi", content("This document.", JSON, {"type": "object"})),
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "sharedserve",
            "version": __version__,
            "description": (
                f"TensorFlow Serving's REST API and the Open Inference Protocol's (/v2) for "
                f"model {names}, and sharedserve's own endpoints. "
                "Every error is a JSON object {'error': message}."
            ),
        },
        "paths": _model_paths(served, max_body_bytes)
        | oip_paths(served, max_body_bytes)
        | {path: {"get": operation(op, "sharedserve", ok)} for path, (op, ok) in own.items()},
        "components": {"schemas": _schemas() | oip_schemas()},
    }

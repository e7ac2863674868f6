"""The building blocks of the OpenAPI document (``/openapi.json``) that both wire formats'
parts use: schema shorthands, path parameters and an operation with the listener's statuses.

A module of its own so that TF Serving's part (``tfserving/openapi.py``, which assembles the
whole document) and the Open Inference Protocol's (``oip/openapi.py``) share them without
importing each other both ways. Dicts only, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "ANY",
    "BAD",
    "JSON",
    "MISSING",
    "Schema",
    "Status",
    "body_errors",
    "content",
    "json_body",
    "map_of",
    "model_params",
    "object_of",
    "operation",
    "path_param",
    "ref",
    "string",
]

Schema = dict[str, Any]
Status = tuple[int, str]

JSON = "application/json"

# Answered by the listener to any request on any path, before the app sees it
# (server/connections.py): headers that do not arrive in time, too many open connections.
ANY: tuple[Status, ...] = (
    (408, "The request's headers did not arrive in time."),
    (503, "Too many open connections; retry later."),
)
BAD = (400, "Malformed path or version (not an int64), or a body that cannot be decoded.")
MISSING = (404, "No such model, version or path.")


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def object_of(properties: dict[str, Schema], **extra: Any) -> Schema:
    """An object with all of ``properties`` and nothing else: a body sharedserve writes."""
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return schema | {"additionalProperties": False} | extra


def map_of(values: Schema, **extra: Any) -> Schema:
    return {"type": "object", "additionalProperties": values} | extra


def string() -> Schema:
    return {"type": "string"}


def content(description: str, media_type: str, schema: Schema) -> dict[str, Any]:
    return {"description": description, "content": {media_type: {"schema": schema}}}


def json_body(description: str, schema: str) -> dict[str, Any]:
    return content(description, JSON, ref(schema))


def operation(
    operation_id: str, tag: str, ok: dict[str, Any] | None, *errors: Status, **extra: Any
) -> dict[str, Any]:
    """An operation: its 200 (if it has one) and its errors with the listener's; a status
    given in ``errors`` replaces the listener's description with one that covers both."""
    described = dict(ANY) | dict(errors)
    responses = {} if ok is None else {"200": ok}
    responses |= {str(code): json_body(text, "Error") for code, text in sorted(described.items())}
    return {"operationId": operation_id, "tags": [tag], **extra, "responses": responses}


def path_param(name: str, schema: Schema, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": schema,
        "description": description,
    }


def model_params(names: Sequence[str], version: Schema) -> dict[str, dict[str, Any]]:
    """The ``{name}`` and ``{version}`` path parameters of the served models; ``version`` is the
    versions' schema (an integer in TF Serving's paths, a string in the OIP's)."""
    return {
        "name": path_param(
            "name",
            {"type": "string", "enum": list(names)},
            "A served model; any other answers 404.",
        ),
        "version": path_param(
            "version",
            version,
            "A version the model serves; any other answers 404, one not an int64 400.",
        ),
    }


def body_errors(max_body_bytes: int) -> list[Status]:
    """The statuses of an operation that reads a tensor body (TF Serving's :predict, OIP's
    infer) besides 400 and 404."""
    return [
        (408, "The request's headers or body did not arrive in time."),
        (413, f"Body over {max_body_bytes} bytes, or tensors with too many elements."),
        (
            503,
            "Overloaded (connections, bodies being decoded, the batch queue, memory), "
            "or the model is not AVAILABLE; retry later.",
        ),
    ]

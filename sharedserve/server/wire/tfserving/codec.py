"""JSON <-> tensors for TF Serving's REST predict API (pure: no framework, no HTTP).

Why a module of its own: clients written for TensorFlow Serving must work unchanged, so the
request and response shapes (row ``instances`` / columnar ``inputs``, ``{"b64": ...}`` binary
values, the ``_bytes`` output-name rule) are reproduced here once, independent of the backend and
of the transport; and every way a body cannot be decoded becomes an ``InvalidInput`` (HTTP 400)
that names the input, what was expected and what came. Whether the decoded arrays fit the
signature (names, shapes) is ``validate.check_inputs``'s to say, for every protocol alike.
Numeric tensors are converted by numpy in C (``json_values.numeric_array``, shared with the
Open Inference Protocol): a 3 MB body of floats is never walked in Python. Only string
tensors are walked, to decode ``b64`` values.

Type rules (TF Serving parses with rapidjson and checks each JSON value's type; we check the
dtype numpy infers for the whole value, which gives the same answers except where noted):

* float targets accept JSON numbers, never strings or an all-boolean value. A value too large
  for the target (``1e39`` for ``DT_FLOAT``) is rejected rather than turned into ``inf``.
* integer targets accept JSON integers only: any float, even ``2.0``, is rejected, as rapidjson's
  ``IsInt()`` does in TF Serving. Values outside the target's range (``300`` for ``DT_UINT8``,
  ``-1`` for unsigned) are rejected.
* ``DT_BOOL`` accepts ``true``/``false`` only, not ``0``/``1`` (TF Serving's ``IsBool()``).
* Booleans mixed among numbers (``[true, 2]``) are coerced by numpy, where TF Serving would
  reject them: catching that needs the per-element walk this module avoids.
* Deviations: TF Serving also parses the non-standard ``NaN``/``Infinity`` literals and writes
  non-finite floats the same way; orjson rejects them in requests and writes them as ``null``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import orjson

from sharedserve.errors import InvalidInput, SharedServeError, quoted
from sharedserve.server.version.signature import Signature, TensorSpec
from sharedserve.server.wire import json_arrays
from sharedserve.server.wire.json_arrays import JsonArray
from sharedserve.server.wire.json_values import json_type, numeric_array

__all__ = [
    "PredictRequest",
    "RequestFormat",
    "decode_predict_request",
    "encode_predict_response",
    "parse_json_body",
    "parse_predict_body",
    "read_signature_name",
]


class RequestFormat(str, Enum):
    """Which of TF Serving's two request layouts a request used; the response mirrors it."""

    ROW = "row"  # {"instances": [...]} -> {"predictions": [...]}
    COLUMNAR = "columnar"  # {"inputs": ...} -> {"outputs": ...}


@dataclass(frozen=True)
class PredictRequest:
    """A decoded predict body.

    ``inputs`` holds one array per signature input, already of that input's numpy dtype
    (``DT_STRING`` is an ``object`` array of ``bytes``) and checked against its shape.
    """

    signature_name: str | None
    inputs: dict[str, np.ndarray]
    format: RequestFormat


def parse_json_body(body: bytes | bytearray) -> dict[str, Any]:
    """Parse a request body that must be a JSON object."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise InvalidInput(f"request body is not valid JSON: {e}") from e
    if not isinstance(payload, dict):
        raise InvalidInput(f"request body must be a JSON object, got {json_type(payload)}")
    return payload


def parse_predict_body(
    body: bytes | bytearray, parse: Callable[..., Any] = json_arrays.parse
) -> dict[str, Any]:
    """``parse_json_body``, with a numeric ``instances`` / ``inputs`` array decoded straight into
    numpy (a ``JsonArray`` in its place) when it is one, by ``parse`` (``json_arrays.parse``'s
    signature); same answers and errors as the general path, which every other body takes."""
    payload = parse(body, (b"instances", b"inputs"), _array_places)
    if isinstance(payload, dict):
        return payload
    return parse_json_body(body)


def _array_places(payload: Any) -> list[tuple[Any, str]]:
    """Where a numeric array cut out of a predict body may stand: the tensor of the only input."""
    return [(payload, "instances"), (payload, "inputs")]


def read_signature_name(payload: dict[str, Any]) -> str | None:
    """The body's ``signature_name``, or ``None`` when it names none."""
    if "signature_name" not in payload:
        return None
    name = payload["signature_name"]
    if not isinstance(name, str):
        raise InvalidInput(f"'signature_name' must be a string, got {json_type(name)}")
    return name


def decode_predict_request(payload: dict[str, Any], signature: Signature) -> PredictRequest:
    """Turn a parsed predict body into arrays, each of its input's dtype where ``signature``
    has that input. Names and shapes are not judged here: ``validate.check_inputs`` does that
    for every protocol."""
    has_rows, has_columns = "instances" in payload, "inputs" in payload
    if has_rows == has_columns:
        raise InvalidInput(
            "request must have exactly one of 'instances' (row format) or 'inputs' (columnar "
            f"format), got {'both' if has_rows else 'neither'}"
        )
    if has_rows:
        values, fmt = _row_values(payload["instances"], signature), RequestFormat.ROW
    else:
        values, fmt = _columnar_values(payload["inputs"], signature), RequestFormat.COLUMNAR
    inputs = {
        name: _decode_tensor(spec, value)
        if (spec := signature.inputs.get(name))
        else _decode_untyped(value)
        for name, value in values.items()
    }
    return PredictRequest(read_signature_name(payload), inputs, fmt)


def encode_predict_response(outputs: dict[str, np.ndarray], fmt: RequestFormat) -> bytes:
    """Serialise a model's outputs as TF Serving does for the request's format."""
    if not outputs:
        raise SharedServeError("the model returned no outputs")
    names = list(outputs)
    ready = {name: _jsonable(name, np.asarray(arr)) for name, arr in outputs.items()}
    if fmt is RequestFormat.COLUMNAR:
        body: Any = ready[names[0]] if len(names) == 1 else ready
        return orjson.dumps({"outputs": body}, option=orjson.OPT_SERIALIZE_NUMPY)

    # Row format: dim 0 of every output is the batch, and each row becomes one element.
    batch_sizes: dict[str, int] = {}
    for name, arr in outputs.items():
        shape = np.shape(arr)
        if not shape:
            raise InvalidInput(
                f"output {name!r} is a scalar, but the row format ('instances') needs a batch "
                "dimension; send the request in the columnar format ('inputs')"
            )
        batch_sizes[name] = shape[0]
    if len(names) == 1:
        return orjson.dumps({"predictions": ready[names[0]]}, option=orjson.OPT_SERIALIZE_NUMPY)
    if len(set(batch_sizes.values())) > 1:
        sizes = ", ".join(f"{name!r}: {size}" for name, size in batch_sizes.items())
        raise InvalidInput(
            f"outputs have different batch sizes (dim 0) ({sizes}); the row format needs them "
            "equal; send the request in the columnar format ('inputs')"
        )
    rows = [{name: ready[name][i] for name in names} for i in range(batch_sizes[names[0]])]
    return orjson.dumps({"predictions": rows}, option=orjson.OPT_SERIALIZE_NUMPY)


# --- request layout ---------------------------------------------------------------------------


def _row_values(instances: Any, signature: Signature) -> dict[str, Any]:
    """Per input, the list over the batch: the instances themselves, or one column of them."""
    if isinstance(instances, JsonArray):  # numbers, not named inputs
        return {_only_input(signature, "'instances' is a list of values"): instances}
    if not isinstance(instances, list):
        raise InvalidInput(f"'instances' must be a list, got {json_type(instances)}")
    if not instances:
        raise InvalidInput("'instances' must be a non-empty list")
    if not _is_named(instances[0]):
        # Like TF Serving, the first element decides: a plain value means "the only input".
        return {_only_input(signature, "'instances' is a list of values"): instances}
    names = list(instances[0])
    for i, instance in enumerate(instances):
        if not _is_named(instance):
            raise InvalidInput(
                f"instances[{i}] is {json_type(instance)}, but instances[0] is an object of "
                "named inputs; every instance must be one"
            )
        if instance.keys() != instances[0].keys():
            missing = [n for n in names if n not in instance]
            if missing:
                raise InvalidInput(f"instances[{i}] is missing input {quoted(missing[0])}")
            extra = next(n for n in instance if n not in instances[0])
            raise InvalidInput(
                f"instances[{i}] names input {quoted(extra)}, which instances[0] lacks"
            )
    return {name: [instance[name] for instance in instances] for name in names}


def _columnar_values(inputs: Any, signature: Signature) -> dict[str, Any]:
    if not _is_named(inputs):
        return {_only_input(signature, "'inputs' is a single value"): inputs}
    return dict(inputs)


def _only_input(signature: Signature, what: str) -> str:
    if len(signature.inputs) != 1:
        raise InvalidInput(
            f"{what}, but signature {signature.name!r} has {len(signature.inputs)} inputs "
            f"({', '.join(sorted(signature.inputs))}); name each input in a JSON object"
        )
    return next(iter(signature.inputs))


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "b64" in value


def _is_named(value: Any) -> bool:
    """A JSON object of named inputs; ``{"b64": ...}`` is a binary value, not one of these."""
    return isinstance(value, dict) and not _is_b64(value)


# --- tensors ----------------------------------------------------------------------------------


def _decode_tensor(spec: TensorSpec, value: Any) -> np.ndarray:
    if spec.dtype == "DT_STRING":
        return _decode_strings(spec.name, value)
    return _decode_numeric(spec, value)


def _decode_untyped(value: Any) -> np.ndarray:
    """An input the signature does not have: numpy's guess, only for the validator to refuse."""
    if isinstance(value, JsonArray):
        return value.raw
    try:
        return np.asarray(value)
    except ValueError:  # ragged; it is refused by name anyway
        return np.empty(0, dtype=object)


def _decode_numeric(spec: TensorSpec, value: Any) -> np.ndarray:
    return numeric_array(spec.name, spec.dtype, spec.numpy_dtype, value, _describe_item)


def _describe_item(item: Any) -> str:
    if _is_b64(item):
        return "a {'b64': ...} binary value (b64 is only for DT_STRING inputs)"
    return json_type(item)


def _decode_strings(name: str, value: Any) -> np.ndarray:
    if isinstance(value, JsonArray):
        value = value.value()  # numbers: refused below, with the general path's words
    flat: list[bytes] = []
    shape = _walk_strings(name, value, flat)
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(shape)


def _walk_strings(name: str, value: Any, flat: list[bytes]) -> tuple[int, ...]:
    """Append the leaves of ``value`` to ``flat`` as bytes; return the shape."""
    if isinstance(value, list):
        shapes = [_walk_strings(name, item, flat) for item in value]
        if any(shape != shapes[0] for shape in shapes):
            raise InvalidInput(f"input {name!r}: nested lists are ragged (inhomogeneous shape)")
        return (len(value), *(shapes[0] if shapes else ()))
    if isinstance(value, str):
        flat.append(value.encode("utf-8", "surrogatepass"))
    elif _is_b64(value) and isinstance(value["b64"], str):
        try:
            flat.append(base64.b64decode(value["b64"], validate=True))
        except binascii.Error as e:
            raise InvalidInput(f"input {name!r}: invalid base64 in 'b64' value: {e}") from e
    else:
        raise InvalidInput(
            f"input {name!r}: expected DT_STRING (a string or {{'b64': '<base64>'}}), "
            f"got {json_type(value)}"
        )
    return ()


# --- response ---------------------------------------------------------------------------------


def _jsonable(name: str, arr: np.ndarray) -> Any:
    """An output ready for ``orjson.dumps(..., OPT_SERIALIZE_NUMPY)``; indexable on dim 0."""
    kind = arr.dtype.kind
    if kind in "OSU":
        always_b64 = name.endswith("_bytes")
        return _map_leaves(arr.tolist(), lambda v: _text_or_b64(name, v, always_b64))
    if kind == "f" and arr.dtype.itemsize != 4:
        arr = arr.astype(np.float64 if arr.dtype.itemsize > 8 else np.float32)  # orjson: f32/f64
    elif kind not in "biuf":
        raise SharedServeError(f"output {name!r} has dtype {arr.dtype}, which JSON cannot carry")
    if arr.ndim == 0:
        return arr.item()  # orjson serialises numpy scalars and arrays, but not 0-d arrays
    return np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("="), copy=False))


def _map_leaves(value: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(value, list):
        return [_map_leaves(item, fn) for item in value]
    return fn(value)


def _text_or_b64(name: str, value: Any, always_b64: bool) -> Any:
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogatepass")
    if not isinstance(value, bytes):
        raise SharedServeError(f"output {name!r} holds a {type(value).__name__}, not bytes")
    if not always_b64:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            pass  # not text: fall back to b64 so the body stays valid JSON
    return {"b64": base64.b64encode(value).decode("ascii")}

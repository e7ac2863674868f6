"""Open Inference Protocol tensors <-> numpy (pure: no framework, no transport).

Both OIP wire formats describe a tensor the same way (``name``, ``datatype``, ``shape``) and carry
its elements either typed (JSON ``data``; gRPC ``contents``) or raw (the REST binary extension's
bytes after the JSON header; gRPC ``raw_input_contents``). Raw is little-endian row-major, and a
``BYTES`` element is a 4-byte little-endian length and then its bytes. Every way a tensor cannot
be read becomes an ``InvalidInput`` naming the input; whether the arrays fit the signature (names,
shapes) is ``validate.check_inputs``'s to say, as for every protocol.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from sharedserve.errors import InvalidInput, SharedServeError, quoted
from sharedserve.server.inference.validate import check_shape
from sharedserve.server.version.signature import (
    DTYPE_TO_NUMPY,
    Signature,
    TensorSpec,
    numeric_dtype_name,
)
from sharedserve.server.wire import json_arrays
from sharedserve.server.wire.json_arrays import JsonArray
from sharedserve.server.wire.json_values import json_type, numeric_array

__all__ = [
    "DATATYPE_OF_DT",
    "check_datatype",
    "datatype_of",
    "declared_input",
    "from_contents",
    "from_json",
    "from_raw",
    "parse_json",
    "parse_shape",
    "raw_elements",
    "tensor_metadata",
    "to_json_data",
    "to_raw",
]

#: TF Serving's dtype names (the signature's vocabulary) -> the OIP's.
DATATYPE_OF_DT = {
    "DT_BOOL": "BOOL",
    "DT_UINT8": "UINT8",
    "DT_UINT16": "UINT16",
    "DT_UINT32": "UINT32",
    "DT_UINT64": "UINT64",
    "DT_INT8": "INT8",
    "DT_INT16": "INT16",
    "DT_INT32": "INT32",
    "DT_INT64": "INT64",
    "DT_HALF": "FP16",
    "DT_FLOAT": "FP32",
    "DT_DOUBLE": "FP64",
    "DT_STRING": "BYTES",
}
_NUMPY = {DATATYPE_OF_DT[dt]: DTYPE_TO_NUMPY[dt] for dt in DATATYPE_OF_DT if dt != "DT_STRING"}
_LENGTH = struct.Struct("<I")


def tensor_metadata(spec: TensorSpec) -> dict[str, Any]:
    """A signature tensor as the OIP's metadata shows it (``-1`` for a size not fixed)."""
    shape = [-1] if spec.shape is None else list(spec.shape)  # unknown rank: shown as [-1]
    return {"name": spec.name, "datatype": DATATYPE_OF_DT[spec.dtype], "shape": shape}


def check_datatype(spec: TensorSpec, datatype: Any) -> None:
    """InvalidInput unless ``datatype`` is the one the signature's input takes."""
    if not isinstance(datatype, str) or (datatype not in _NUMPY and datatype != "BYTES"):
        raise InvalidInput(
            f"input {spec.name!r}: datatype {quoted(datatype)} is not one sharedserve serves; "
            f"the model takes {DATATYPE_OF_DT[spec.dtype]}"
        )
    if datatype != DATATYPE_OF_DT[spec.dtype]:
        raise InvalidInput(
            f"input {spec.name!r}: expected datatype {DATATYPE_OF_DT[spec.dtype]}, got {datatype}"
        )


def declared_input(
    signature: Signature, given: dict[str, np.ndarray], name: Any, datatype: Any, shape: Any
) -> tuple[str, str, tuple[int, ...]]:
    """An input's name, datatype and shape as a request declares them, checked against the
    signature (a known name, not in ``given`` already, its datatype) -> (name, datatype, shape)."""
    if not isinstance(name, str):
        raise InvalidInput(f"an input has no 'name' string (got {json_type(name)})")
    if name in given:
        raise InvalidInput(f"input {name!r} is given twice")
    spec = signature.inputs.get(name)
    if spec is None:
        raise InvalidInput(
            f"unknown input {quoted(name)}; the signature's inputs are "
            f"{', '.join(sorted(signature.inputs))}"
        )
    check_datatype(spec, datatype)
    return name, datatype, parse_shape(name, shape)


def parse_shape(name: str, shape: Any) -> tuple[int, ...]:
    """A tensor's declared shape: a list of non-negative integers."""
    if not isinstance(shape, (list, tuple)) or not all(
        isinstance(d, int) and not isinstance(d, bool) for d in shape
    ):
        raise InvalidInput(
            f"input {name!r}: 'shape' must be a list of integers, got {quoted(shape)}"
        )
    return check_shape(f"input {name!r}: 'shape'", shape)


def parse_json(
    body: bytes | bytearray, end: int | None = None, parse: Callable[..., Any] = json_arrays.parse
) -> Any:
    """A request's JSON (``body[:end]``), each input's numeric ``data`` decoded straight into
    numpy (a ``JsonArray``) where it is one, by ``parse`` (``json_arrays.parse``'s signature):
    the answers and errors of parsing it whole."""
    header = parse(body, (b"data",), _data_places, end)
    if header is not None:
        return header
    try:
        return orjson.loads(memoryview(body)[:end])
    except orjson.JSONDecodeError as e:
        raise InvalidInput(f"the request's JSON is not valid: {e}") from e


def _data_places(header: Any) -> list[tuple[Any, str]]:
    inputs = header.get("inputs") if isinstance(header, dict) else None
    return [(entry, "data") for entry in inputs] if isinstance(inputs, list) else []


def from_json(name: str, datatype: str, shape: tuple[int, ...], data: Any) -> np.ndarray:
    """The elements of a JSON tensor (``data`` flat or nested, row-major) in ``shape``."""
    if datatype == "BYTES":
        array = _strings(name, data.value() if isinstance(data, JsonArray) else data)
    else:
        array = numeric_array(name, datatype, _NUMPY[datatype], data)
    return _shaped(name, array, shape)


#: Where gRPC's typed ``contents`` hold each datatype (FP16 travels raw only).
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def from_contents(name: str, datatype: str, shape: tuple[int, ...], contents: Any) -> np.ndarray:
    """A tensor sent in gRPC's typed ``contents`` (an ``InferTensorContents``)."""
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        raise InvalidInput(f"input {name!r}: {datatype} travels in raw_input_contents only")
    values = getattr(contents, field)
    if datatype == "BYTES":
        array = np.empty(len(values), dtype=object)
        array[:] = list(values)
    else:
        # np.asarray reads the repeated field in C; the checked cast catches 300 for UINT8.
        array = numeric_array(name, datatype, _NUMPY[datatype], np.asarray(values))
    return _shaped(name, array, shape, f"values in {field}")


_WIDEST = max(dtype.itemsize for dtype in _NUMPY.values())


def raw_elements(datatype: str | None, size: int) -> int:
    """The fewest elements ``size`` bytes of raw contents hold: exact for a numeric
    ``datatype``; for one not known (yet), at the widest numeric datatype's size; 0 for BYTES,
    whose one element may be any length."""
    if datatype == "BYTES":
        return 0
    dtype = _NUMPY.get(datatype or "")
    return size // (dtype.itemsize if dtype is not None else _WIDEST)


def from_raw(
    name: str, datatype: str, shape: tuple[int, ...], raw: bytes | memoryview
) -> np.ndarray:
    """A tensor sent as raw bytes. Numeric tensors are a read-only view of ``raw``: backends copy
    into the framework's own tensors."""
    size = math.prod(shape)
    if datatype == "BYTES":
        return _shaped(name, _length_prefixed(name, raw), shape)
    dtype = _NUMPY[datatype]
    if len(raw) != size * dtype.itemsize:
        raise InvalidInput(
            f"input {name!r}: {len(raw)} bytes of raw data, shape {list(shape)} of {datatype} "
            f"needs {size * dtype.itemsize}"
        )
    little = dtype.newbyteorder("<")
    return np.frombuffer(raw, dtype=little).astype(dtype, copy=False).reshape(shape)


def datatype_of(array: np.ndarray) -> str:
    """The OIP datatype of a model output."""
    if array.dtype.kind in "OSU":
        return "BYTES"
    name = numeric_dtype_name(array.dtype)
    if name is None:
        raise SharedServeError(f"cannot send a model output of dtype {array.dtype}")
    return DATATYPE_OF_DT[name]


def to_raw(array: np.ndarray) -> bytes:
    """An output's elements as the raw form carries them."""
    if array.dtype.kind in "OSU":
        parts: list[bytes] = []
        for value in array.reshape(-1):
            item = value if isinstance(value, bytes) else str(value).encode()
            parts += (_LENGTH.pack(len(item)), item)
        return b"".join(parts)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def to_json_data(name: str, array: np.ndarray) -> Any:
    """An output's elements, flat and row-major, ready for ``orjson`` (OPT_SERIALIZE_NUMPY)."""
    if array.dtype.kind in "OSU":
        try:
            return [
                v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)
            ]
        except UnicodeDecodeError as e:
            raise InvalidInput(
                f"output {name!r} holds bytes that are not UTF-8 text, which JSON cannot carry: "
                "ask for it with the binary data extension (parameters.binary_data)"
            ) from e
    if array.dtype == np.float16:
        array = array.astype(np.float32)  # orjson writes float32 and float64 arrays only
    return np.ascontiguousarray(array.astype(array.dtype.newbyteorder("="), copy=False)).reshape(-1)


def _shaped(
    name: str, array: np.ndarray, shape: tuple[int, ...], what: str = "elements given"
) -> np.ndarray:
    if array.size != math.prod(shape):
        raise InvalidInput(
            f"input {name!r}: {array.size} {what} for shape {list(shape)} "
            f"({math.prod(shape)} elements)"
        )
    return array.reshape(shape)


def _strings(name: str, data: Any) -> np.ndarray:
    flat: list[bytes] = []
    stack = [data]
    while stack:  # depth-first, in order: the flattened row-major elements
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(reversed(value))
        elif isinstance(value, str):
            flat.append(value.encode("utf-8", "surrogatepass"))
        else:
            raise InvalidInput(
                f"input {name!r}: BYTES data must be strings, got {json_type(value)}"
            )
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out


def _length_prefixed(name: str, raw: bytes | memoryview) -> np.ndarray:
    view, items, at = memoryview(raw), list[bytes](), 0
    while at < len(view):
        if at + 4 > len(view):
            raise InvalidInput(f"input {name!r}: raw BYTES data ends inside an element's length")
        (length,) = _LENGTH.unpack_from(view, at)
        at += 4
        if at + length > len(view):
            raise InvalidInput(
                f"input {name!r}: a raw BYTES element of {length} bytes runs past the data's end"
            )
        items.append(bytes(view[at : at + length]))
        at += length
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out

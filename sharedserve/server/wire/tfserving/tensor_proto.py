"""TensorFlow ``TensorProto`` <-> numpy, without TensorFlow.

The messages are sharedserve's wire-compatible copies (``api/tf_serving.proto``), so a
TorchScript-only install serves gRPC without the ``tensorflow`` wheel. ``tf.make_ndarray`` would
also copy through Python lists for the typed ``*_val`` fields. Here numeric tensors travel as
``tensor_content`` (raw little-endian bytes, one memcpy each way, what TF Serving's own clients
send), and the typed fields are read with ``np.asarray`` on the repeated field, never an element
loop, and counted first: more values than the shape holds are refused before any is made a
Python object. TF's rule that a single typed value fills the whole shape is honoured.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from sharedserve import errors
from sharedserve.errors import InvalidInput, SharedServeError
from sharedserve.server.inference.validate import MAX_DIMS, check_rank, check_shape
from sharedserve.server.protos.tfserving import tf_serving_pb2 as pb
from sharedserve.server.version.signature import DTYPE_TO_NUMPY, numeric_dtype_name
from sharedserve.server.wire import proto_slices as wire

__all__ = ["DTYPE_ENUM", "from_tensor_proto", "read_tensor_proto", "to_tensor_proto"]

#: DT_* name -> DataType enum value.
DTYPE_ENUM: dict[str, int] = {name: pb.DataType.Value(name) for name in DTYPE_TO_NUMPY}
_ENUM_NAME = {value: name for name, value in DTYPE_ENUM.items()}

# The repeated field a dtype's values live in when not sent as tensor_content.
_VALUE_FIELD = {
    "DT_FLOAT": "float_val",
    "DT_DOUBLE": "double_val",
    "DT_HALF": "half_val",
    "DT_INT8": "int_val",
    "DT_INT16": "int_val",
    "DT_INT32": "int_val",
    "DT_UINT8": "int_val",
    "DT_UINT16": "int_val",
    "DT_INT64": "int64_val",
    "DT_UINT32": "uint32_val",
    "DT_UINT64": "uint64_val",
    "DT_BOOL": "bool_val",
    "DT_STRING": "string_val",
}


def dtype_name(proto: Any) -> str:
    name = _ENUM_NAME.get(proto.dtype)
    if name is None:
        known = proto.dtype in pb.DataType.values()
        shown = pb.DataType.Name(proto.dtype) if known else f"enum value {proto.dtype}"
        raise InvalidInput(f"unsupported tensor dtype {shown}")
    return name


def from_tensor_proto(
    proto: Any, what: str = "tensor", count: Callable[[int], None] | None = None
) -> np.ndarray:
    """Decode a TensorProto; InvalidInput names ``what`` on any inconsistency. ``count`` is
    told the declared elements before any value is read (it may refuse them)."""
    name = dtype_name(proto)
    if proto.tensor_shape.unknown_rank:
        raise InvalidInput(f"{what}: tensor_shape has unknown rank")
    # The same judgement as the OIP's (too many dimensions, negative, too many elements); the
    # rank first: a 5 MB message of a million dimensions took 0.3 s to list, on the event loop.
    dims = proto.tensor_shape.dim
    check_rank(f"{what}: tensor_shape", len(dims))
    shape = check_shape(f"{what}: tensor_shape", [int(d.size) for d in dims])
    size = math.prod(shape)
    if count is not None:
        count(size)
    dtype = DTYPE_TO_NUMPY[name]
    # Read once: each access to a bytes field copies it out of the message (upb).
    content = proto.tensor_content if name != "DT_STRING" else b""
    if content:
        little = dtype.newbyteorder("<")
        if len(content) != size * dtype.itemsize:
            raise InvalidInput(
                f"{what}: tensor_content has {len(content)} bytes, shape "
                f"{list(shape)} of {name} needs {size * dtype.itemsize}"
            )
        # A view of the message's bytes where the byte order is already right (read-only:
        # backends copy into the framework's own tensors); a converted copy otherwise.
        return np.frombuffer(content, dtype=little).astype(dtype, copy=False).reshape(shape)
    values = getattr(proto, _VALUE_FIELD[name])
    # Counted before anything is made of them (len is the field's own count): 30M empty strings
    # fit in a 57 MiB message, and were a list and an array of 30M objects before being refused.
    given = len(values)
    if given not in {size, 1}:  # TF's rule: one value fills the shape
        raise InvalidInput(
            f"{what}: {given} values given for shape {list(shape)} ({size} elements)"
        )
    if name == "DT_STRING":
        flat = np.empty(given, dtype=object)
        # A chunk at a time: one list of 30M strings is a second of C holding the GIL.
        for i in range(0, given, wire.SLICE_FIELDS):
            flat[i : i + wire.SLICE_FIELDS] = values[i : i + wire.SLICE_FIELDS]
    elif name == "DT_HALF":
        flat = np.asarray(values, dtype=np.uint16).view(np.float16)  # half_val holds raw bits
    else:
        flat = np.asarray(values, dtype=dtype)
    if given == size:
        return flat.reshape(shape)
    # A read-only view, not a copy: the validator counts the elements before a backend makes
    # them real, so a 40-byte message cannot allocate gigabytes here.
    return np.broadcast_to(flat.reshape(()), shape)


_VALUES = wire.Values(pb.TensorProto)
_FIELDS = pb.TensorProto.DESCRIPTOR.fields_by_name
_VALUE_NUMBER = {name: _FIELDS[field].number for name, field in _VALUE_FIELD.items()}


def read_tensor_proto(
    data: bytes, start: int, end: int, what: str, *, limit: int | None, into: Any = None
) -> Any:
    """The TensorProto in ``data[start:end]``, parsed in slices (``wire``), its values counted
    as they are walked: more than ``limit`` (the element limit) is PayloadTooLarge, and where
    dtype and shape came first (as every standard serializer sends them), values of the wrong
    kind, or more than the shape holds, are InvalidInput at once, the rest unwalked. What comes
    in another order is legal protobuf: ``from_tensor_proto`` judges it after the parse.
    Merged into ``into`` if given (a tensor sent in two parts)."""
    return wire.parse(pb.TensorProto, data, start, end, check=_Walk(data, what, limit), into=into)


class _Walk:
    def __init__(self, data: bytes, what: str, limit: int | None) -> None:
        self._data, self._what, self._limit = data, what, limit
        self._dtype: str | None = None
        self._shape: list[int] | None = None
        self._declared = 0  # dtype and shape fields seen before any value
        self._in_order = True
        self._values = 0

    def __call__(self, field: wire.Field) -> None:
        number = field.number
        if number in (1, 2):
            self._declare(field)
            return
        count = _VALUES.count(field, self._data)
        if not count:
            return
        self._values += count
        if self._limit is not None and self._values > self._limit:
            raise errors.PayloadTooLarge(
                f"{self._what}: more than {self._limit} values, the most elements a request "
                "may hold (--max-request-elements)"
            )
        if not self._in_order or self._dtype is None or self._shape is None:
            return
        if number != _VALUE_NUMBER[self._dtype]:
            raise InvalidInput(f"{self._what}: {_VALUES.names[number]} given for {self._dtype}")
        size = math.prod(self._shape)
        if self._values > max(size, 1):  # TF's rule: one value fills the shape
            raise InvalidInput(
                f"{self._what}: at least {self._values} values given for shape "
                f"{self._shape} ({size} elements)"
            )

    def _declare(self, field: wire.Field) -> None:
        number, wire_type, value, end = field.number, field.wire, field.value, field.end
        seen = 1 << number
        if self._values or self._declared & seen or field.repeats > 1:
            self._in_order = False  # a later dtype replaces, a later shape merges: judged after
            return
        self._declared |= seen
        if number == 1 and wire_type == 0:
            self._dtype = _ENUM_NAME.get(wire.varint(self._data, value, end, "TensorProto")[0])
        elif number == 2 and wire_type == 2:
            shape = wire.parse(pb.TensorShapeProto, self._data, value, end)
            dims = shape.dim
            if not shape.unknown_rank and len(dims) <= MAX_DIMS:
                sizes = [int(d.size) for d in dims]
                self._shape = sizes if min(sizes, default=0) >= 0 else None


def to_tensor_proto(array: np.ndarray, proto: Any | None = None) -> Any:
    """Encode an array (numeric as tensor_content, strings as string_val) into ``proto``."""
    proto = proto if proto is not None else pb.TensorProto()
    array = np.asarray(array)
    if array.dtype.kind in "OSU":
        proto.dtype = pb.DT_STRING
        proto.string_val.extend(
            v if isinstance(v, bytes) else str(v).encode() for v in array.reshape(-1)
        )
    else:
        name = numeric_dtype_name(array.dtype)
        if name is None:
            raise SharedServeError(f"cannot encode a model output of dtype {array.dtype}")
        proto.dtype = DTYPE_ENUM[name]
        proto.tensor_content = np.ascontiguousarray(
            array, dtype=array.dtype.newbyteorder("<")
        ).tobytes()
    for size in array.shape:
        proto.tensor_shape.dim.add(size=int(size))
    return proto

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

from sharedserve.errors import InvalidInput, SharedServeError
from sharedserve.server.signature import DTYPE_TO_NUMPY, numeric_dtype_name
from sharedserve.server.tfserving.api import tf_serving_pb2 as pb
from sharedserve.server.validate import check_rank, check_shape

__all__ = ["DTYPE_ENUM", "from_tensor_proto", "to_tensor_proto"]

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
        flat[:] = list(values)
    elif name == "DT_HALF":
        flat = np.asarray(values, dtype=np.uint16).view(np.float16)  # half_val holds raw bits
    else:
        flat = np.asarray(values, dtype=dtype)
    if given == size:
        return flat.reshape(shape)
    # A read-only view, not a copy: the validator counts the elements before a backend makes
    # them real, so a 40-byte message cannot allocate gigabytes here.
    return np.broadcast_to(flat.reshape(()), shape)


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

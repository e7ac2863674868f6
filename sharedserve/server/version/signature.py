"""Framework-neutral description of a model's signatures (pure: no framework imports).

Backends translate their own signature objects into these, so every wire format's codec and
metadata speak one vocabulary (the Open Inference Protocol maps it to its own datatype names):
TensorFlow's ``DataType`` names (``DT_FLOAT``) and shapes with ``-1`` for a dimension of unknown
size, exactly as TF Serving reports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "DTYPE_TO_NUMPY",
    "PREDICT_METHOD",
    "Signature",
    "TensorSpec",
    "numeric_dtype_name",
    "shape_matches",
]

#: TF Serving's ``method_name`` for predict signatures.
PREDICT_METHOD = "tensorflow/serving/predict"

#: TensorFlow DataType name -> numpy dtype. Strings are numpy ``object`` arrays of ``bytes``.
DTYPE_TO_NUMPY: dict[str, np.dtype] = {
    "DT_FLOAT": np.dtype(np.float32),
    "DT_DOUBLE": np.dtype(np.float64),
    "DT_HALF": np.dtype(np.float16),
    "DT_INT8": np.dtype(np.int8),
    "DT_INT16": np.dtype(np.int16),
    "DT_INT32": np.dtype(np.int32),
    "DT_INT64": np.dtype(np.int64),
    "DT_UINT8": np.dtype(np.uint8),
    "DT_UINT16": np.dtype(np.uint16),
    "DT_UINT32": np.dtype(np.uint32),
    "DT_UINT64": np.dtype(np.uint64),
    "DT_BOOL": np.dtype(np.bool_),
    "DT_STRING": np.dtype(object),
}

_NUMERIC_NAMES = {dtype: name for name, dtype in DTYPE_TO_NUMPY.items() if name != "DT_STRING"}


def numeric_dtype_name(dtype: np.dtype) -> str | None:
    """TF Serving's name for a numeric numpy dtype in either byte order; None if it has none."""
    return _NUMERIC_NAMES.get(dtype.newbyteorder("="))


@dataclass(frozen=True)
class TensorSpec:
    """One named input or output of a signature.

    ``shape`` is ``None`` when even the rank is unknown; otherwise one entry per dimension, ``-1``
    where that dimension's size is not fixed (the batch dimension, usually).
    ``tensor_name`` is the graph tensor name TF Serving shows in metadata (``serving_default_x:0``).
    """

    name: str
    dtype: str
    shape: tuple[int, ...] | None
    tensor_name: str = ""

    @property
    def numpy_dtype(self) -> np.dtype:
        return DTYPE_TO_NUMPY[self.dtype]


@dataclass(frozen=True)
class Signature:
    """A callable entry point of a model: named inputs to named outputs."""

    name: str
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    method_name: str = PREDICT_METHOD
    defaults: dict[str, object] = field(default_factory=dict)


def shape_matches(expected: tuple[int, ...] | None, actual: tuple[int, ...]) -> bool:
    """Whether ``actual`` fits a declared shape (None: any rank; -1: any size)."""
    if expected is None:
        return True
    return len(expected) == len(actual) and all(
        want in (-1, got) for want, got in zip(expected, actual, strict=True)
    )

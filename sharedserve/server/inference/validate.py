"""The one check of a request's tensors against the model's signature. Pure.

Every wire format first decodes its bytes into arrays (``codec`` for TF Serving's JSON,
``tensor_proto`` for its gRPC, ``oip/tensors`` for the Open Inference Protocol's) without
judging them; then the predictor calls ``check_inputs`` once, on the shared predict path,
whatever the protocol and the backend. So a bad request gets the same answer over every
protocol, and backends take their inputs as given. Limits a request must stay within (sizes,
element counts) belong here too, and so does ``check_shape``: the one judgement of a declared
shape that every decoder makes before numpy sees it (numpy refuses some shapes with errors that
are no client's fault to read, others by trying to allocate them).
"""

from __future__ import annotations

import math

import numpy as np

from sharedserve.errors import InvalidInput, PayloadTooLarge, quoted
from sharedserve.server.version.signature import (
    Signature,
    TensorSpec,
    numeric_dtype_name,
    shape_matches,
)

__all__ = ["MAX_DIMS", "check_inputs", "check_rank", "check_shape", "dtype_name"]

#: numpy's most dimensions (TensorFlow and torch take no more): one past it, reshape fails.
MAX_DIMS = 64
# No numpy array may hold more bytes than an intp counts (the widest dtype is 8 bytes; halved
# again for room): a declared shape past this is refused before numpy sees it.
_MAX_ELEMENTS = (2**63 - 1) // 16


def check_rank(what: str, rank: int) -> None:
    """InvalidInput unless a shape of ``rank`` dimensions fits numpy; a decoder may ask before
    it turns a million declared dimensions into a list."""
    if rank > MAX_DIMS:
        raise InvalidInput(f"{what} has {rank} dimensions, more than {MAX_DIMS}")


def check_shape(what: str, shape: list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """A declared shape (already a sequence of integers) that numpy can hold; InvalidInput
    naming ``what`` (say ``input 'x': 'shape'``) otherwise."""
    check_rank(what, len(shape))
    if any(d < 0 for d in shape):
        raise InvalidInput(f"{what} has a negative dimension {list(shape)}")
    size = math.prod(shape)  # Python's integers: no int64 overflow on a hostile shape
    if size > _MAX_ELEMENTS:
        raise InvalidInput(
            f"{what} {list(shape)} has {size} elements, more than any tensor can hold"
        )
    return tuple(shape)


def check_inputs(
    signature: Signature, inputs: dict[str, np.ndarray], max_elements: int | None = None
) -> None:
    """InvalidInput unless ``inputs`` are exactly the signature's: names, dtypes and shapes;
    PayloadTooLarge when together they hold more than ``max_elements``.

    Decoders hand over arrays that may still be views (one gRPC value broadcast over a declared
    shape costs no memory until a backend copies it): the count here comes first.
    """
    total = sum(array.size for array in inputs.values())
    if max_elements is not None and total > max_elements:
        raise PayloadTooLarge(
            f"the request's tensors hold {total} elements, over the limit of {max_elements} "
            "(--max-request-elements)"
        )
    unknown = sorted(set(inputs) - set(signature.inputs))
    if unknown:
        raise InvalidInput(
            f"unknown input {quoted(unknown[0])}; the signature's inputs are "
            f"{', '.join(sorted(signature.inputs))}"
        )
    for name, spec in signature.inputs.items():
        if name not in inputs:
            raise InvalidInput(f"missing input {name!r}")
        _check_tensor(spec, inputs[name])


def _check_tensor(spec: TensorSpec, array: np.ndarray) -> None:
    if dtype_name(array.dtype) != spec.dtype:
        raise InvalidInput(
            f"input {spec.name!r}: expected {spec.dtype}, got {dtype_name(array.dtype)}"
        )
    if spec.shape is not None and not shape_matches(spec.shape, array.shape):
        raise InvalidInput(
            f"input {spec.name!r}: expected shape {_dims(spec.shape)}, got {_dims(array.shape)}"
        )


def dtype_name(dtype: np.dtype) -> str:
    """TF Serving's name for a numpy dtype (object arrays hold strings); numpy's if it has none."""
    if dtype.kind in "OS":
        return "DT_STRING"
    return numeric_dtype_name(dtype) or str(dtype)


def _dims(shape: tuple[int, ...] | None) -> str:
    return "unknown" if shape is None else "[" + ", ".join(map(str, shape)) + "]"

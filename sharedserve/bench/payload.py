"""Requests built from a model's own signature: random data of the right shape and dtype. Pure.

The bench knows nothing about the models it drives: it reads ``GET /v1/models/NAME/metadata``
(TF Serving's shape, which both backends serve) and makes one batch-1 request per target, built
once and sent many times, so building requests costs the load generator nothing per request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from sharedserve.errors import ConfigError
from sharedserve.server import HEADER_LENGTH, datatype_of, to_raw

__all__ = [
    "InputSpec",
    "oip_rest_request",
    "oip_tensors",
    "random_inputs",
    "rest_body",
    "signature_inputs",
]

_NUMPY = {
    "DT_FLOAT": np.float32,
    "DT_DOUBLE": np.float64,
    "DT_HALF": np.float16,
    "DT_INT8": np.int8,
    "DT_INT16": np.int16,
    "DT_INT32": np.int32,
    "DT_INT64": np.int64,
    "DT_UINT8": np.uint8,
    "DT_BOOL": np.bool_,
    "DT_STRING": np.object_,
}


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: str
    """TF dtype name, e.g. ``DT_FLOAT``."""
    shape: tuple[int, ...]
    """Concrete shape of a batch-1 request (unknown dimensions become 1)."""


def signature_inputs(metadata: Any, signature: str = "serving_default") -> list[InputSpec]:
    """The inputs of ``signature`` from a TF Serving metadata response."""
    try:
        signatures = metadata["metadata"]["signature_def"]["signature_def"]
        inputs = signatures[signature]["inputs"]
    except (KeyError, TypeError):
        raise ConfigError(f"model metadata has no signature {signature!r}") from None
    specs = []
    for name, tensor in sorted(inputs.items()):
        dtype = tensor.get("dtype")
        if dtype not in _NUMPY:
            raise ConfigError(f"input {name!r} has dtype {dtype!r}, which the bench cannot fill")
        shape_info = tensor.get("tensor_shape", {})
        if shape_info.get("unknown_rank"):
            raise ConfigError(f"input {name!r} has unknown rank; the bench needs a shape")
        dims = [int(d.get("size", -1)) for d in shape_info.get("dim", [])]
        # Batch 1: the leading -1 is the batch; other unknown sizes get the smallest legal value.
        shape = tuple(1 if d < 0 else d for d in dims)
        specs.append(InputSpec(name, dtype, shape))
    if not specs:
        raise ConfigError(f"signature {signature!r} has no inputs")
    return specs


def random_inputs(specs: list[InputSpec], seed: int) -> dict[str, np.ndarray]:
    """One random array per input: floats in [0, 1), small integers, short strings."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        kind = _NUMPY[spec.dtype]
        if spec.dtype == "DT_STRING":
            arrays[spec.name] = np.full(spec.shape, "sharedserve", dtype=object)
        elif spec.dtype == "DT_BOOL":
            arrays[spec.name] = rng.integers(0, 2, spec.shape).astype(np.bool_)
        elif np.issubdtype(kind, np.floating):
            arrays[spec.name] = rng.random(spec.shape).astype(kind)
        else:
            arrays[spec.name] = rng.integers(0, 10, spec.shape).astype(kind)
    return arrays


def rest_body(arrays: dict[str, np.ndarray]) -> bytes:
    """A TF Serving columnar predict body, ``{"inputs": {name: nested list}}``."""
    columns = {name: array.tolist() for name, array in arrays.items()}
    return orjson.dumps({"inputs": columns})


def oip_tensors(arrays: dict[str, np.ndarray]) -> list[tuple[str, str, list[int], bytes]]:
    """Each input as the Open Inference Protocol's raw form carries it:
    (name, datatype, shape, little-endian bytes)."""
    return [
        (name, datatype_of(array), list(array.shape), to_raw(array))
        for name, array in arrays.items()
    ]


def oip_rest_request(arrays: dict[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """An Open Inference Protocol infer body with every tensor binary, both ways (what Triton's
    client sends by default), and the headers it needs."""
    tensors = oip_tensors(arrays)
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": shape,
                    "datatype": datatype,
                    "parameters": {"binary_data_size": len(raw)},
                }
                for name, datatype, shape, raw in tensors
            ],
            "parameters": {"binary_data_output": True},
        }
    )
    headers = {
        "Content-Type": "application/octet-stream",
        HEADER_LENGTH: str(len(header)),
    }
    return header + b"".join(raw for *_, raw in tensors), headers

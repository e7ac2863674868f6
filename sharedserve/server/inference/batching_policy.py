"""Dynamic batching policy: settings, TF Serving's parameters file, and merging requests.

Why it is apart from the batcher: what may merge with what, how rows are packed and handed back,
and what a ``batching_parameters.txt`` means are decisions with no I/O in them, so they live here
and are tested table-driven; ``batching.py`` only adds the asyncio queue and the thread pool.

The parameters file is TF Serving's (``--batching_parameters_file``, protobuf text format of
``BatchingParameters``), so a file that works there works here. Fields that would change what a
batch is (padding, allowed sizes, splitting large requests) are refused rather than ignored.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import fields

import numpy as np
from google.protobuf import text_format

from sharedserve.config import BatchingSettings
from sharedserve.errors import ConfigError, InvalidInput, SharedServeError
from sharedserve.server.protos.tfserving.batching_parameters_pb2 import BatchingParameters

__all__ = [
    "BatchKey",
    "BatchingSettings",
    "batch_key",
    "merge",
    "parse_batching_parameters",
    "request_rows",
    "split",
    "take_batch",
]

# --- TF Serving's batching_parameters.txt (protobuf text format) -------------------------------

_INT64_FIELDS = tuple(f.name for f in fields(BatchingSettings))  # all Int64Value wrappers
# Fields that would change what a batch is are refused unless left at their off value (so a
# file written for TF Serving that merely spells them out still loads). thread_pool_name names
# TF Serving's shared pool and means nothing here: each batcher has its own threads.
_UNSUPPORTED = {
    "allowed_batch_sizes": "padding batches to allowed sizes is not implemented",
    "pad_variable_length_inputs": "padding variable-length inputs is not implemented",
    "enable_large_batch_splitting": "requests over max_batch_size are refused, not split",
    "max_execution_batch_size": "requests over max_batch_size are refused, not split",
}
_WRAPPER_HINT = (
    "; TF Serving's fields are google.protobuf wrappers: write 'max_batch_size { value: 8 }'"
)


def _error(line: int, message: str) -> ConfigError:
    return ConfigError(f"batching parameters line {line}: {message}")


def _line_of(text: str, name: str) -> int:
    """The line a field is set on, for messages about a parsed value."""
    found = re.search(rf"(?m)^.*?\b{name}\s*[:{{<]", text)
    return text.count("\n", 0, found.start()) + 1 if found else 1


def _is_on(parameters: BatchingParameters, name: str) -> bool:
    value = getattr(parameters, name)
    if name == "allowed_batch_sizes":
        return len(value) > 0
    if name == "pad_variable_length_inputs":
        return bool(value)
    return parameters.HasField(name) and bool(value.value)


def parse_batching_parameters(text: str) -> BatchingSettings:
    """Parse a TF Serving ``batching_parameters.txt``; ConfigError (with the line) if unusable.

    protobuf's own text-format parser reads it into TF Serving's ``BatchingParameters`` message
    (``api/batching_parameters.proto``), so what TF Serving accepts is accepted here, and every
    syntax error, unknown or repeated field and out-of-range number is refused with its line.
    Fields left out keep ``BatchingSettings``' defaults (TF Serving's).
    """
    parameters = BatchingParameters()
    try:
        text_format.Parse(text, parameters)
    except text_format.ParseError as e:
        detail = re.sub(r"^\d+:\d+ : ", "", str(e)).rstrip(".")
        hint = _WRAPPER_HINT if 'Expected "{"' in detail else ""
        raise _error(e.GetLine() or 1, f"{detail} (column {e.GetColumn()}){hint}") from None
    for name, reason in _UNSUPPORTED.items():
        if _is_on(parameters, name):
            raise _error(_line_of(text, name), f"{name} is not supported ({reason})")
    values = {
        name: getattr(parameters, name).value for name in _INT64_FIELDS if parameters.HasField(name)
    }
    settings = BatchingSettings(**values)
    settings.validate()
    return settings


# --- merging requests ---------------------------------------------------------------------------

BatchKey = tuple[str, tuple[tuple[str, str, tuple[int, ...]], ...]]
"""Signature name, then (input name, dtype, shape past dim 0) per input, sorted by name."""


def _dtype_key(dtype: np.dtype[np.generic]) -> str:
    # Fixed-width strings of different widths concatenate losslessly (numpy widens), so the width
    # must not keep two requests apart; every other dtype must match exactly.
    return dtype.kind if dtype.kind in "US" else dtype.str


def batch_key(signature_name: str, inputs: dict[str, np.ndarray]) -> BatchKey:
    """Requests merge only when signature, and every input's dtype and non-batch dims, agree."""
    return signature_name, tuple(
        sorted((name, _dtype_key(array.dtype), array.shape[1:]) for name, array in inputs.items())
    )


def request_rows(inputs: dict[str, np.ndarray]) -> int:
    """The request's batch size: dim 0, which every input must share (InvalidInput otherwise)."""
    if not inputs:
        raise InvalidInput("a batched request needs at least one input")
    for name, array in sorted(inputs.items()):
        if array.ndim == 0:
            raise InvalidInput(f"batching needs dim 0 on every input; {name!r} is a scalar")
    rows = {name: array.shape[0] for name, array in inputs.items()}
    if len(set(rows.values())) > 1:
        shown = ", ".join(f"{name!r}: {size}" for name, size in sorted(rows.items()))
        raise InvalidInput(f"inputs disagree on the batch size (dim 0): {shown}")
    return int(next(iter(rows.values())))


def merge(requests: list[dict[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], list[int]]:
    """Concatenate the requests along dim 0, input by input; also returns each one's rows."""
    if not requests:
        raise SharedServeError("merge needs at least one request")
    sizes = [request_rows(inputs) for inputs in requests]
    key = batch_key("", requests[0])
    if any(batch_key("", inputs) != key for inputs in requests[1:]):
        raise InvalidInput("requests with different inputs, dtypes or shapes cannot be batched")
    if len(requests) == 1:
        return dict(requests[0]), sizes  # nothing to merge: no copy
    merged = {name: np.concatenate([r[name] for r in requests]) for name in requests[0]}
    return merged, sizes


def split(outputs: dict[str, np.ndarray], sizes: list[int]) -> list[dict[str, np.ndarray]]:
    """Cut a merged batch's outputs back into one dict per request (views, not copies)."""
    total = sum(sizes)
    for name, array in outputs.items():
        if not isinstance(array, np.ndarray) or array.ndim == 0 or array.shape[0] != total:
            shape = getattr(array, "shape", type(array).__name__)  # a framework may break types
            raise SharedServeError(
                f"output {name!r} has shape {shape}, but the batch had {total} rows; a model "
                f"served with batching must return the batch as dim 0 of every output"
            )
    bounds = itertools.pairwise(itertools.accumulate(sizes, initial=0))
    return [{name: array[start:end] for name, array in outputs.items()} for start, end in bounds]


def take_batch(queue_sizes: list[int], max_batch_size: int) -> int:
    """How many requests from the head of the queue (their row counts, FIFO) one batch takes.

    At least one when the queue is not empty, even one over ``max_batch_size`` (the batcher
    refuses those before they queue); it stops at the first request that does not fit, because
    skipping ahead would let small requests starve a large one.
    """
    taken = rows = 0
    for size in queue_sizes:
        if taken and rows + size > max_batch_size:
            break
        taken += 1
        rows += size
    return taken

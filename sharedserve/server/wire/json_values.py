"""JSON values -> typed numpy arrays, for every JSON wire format (pure: no framework, no HTTP).

TF Serving's REST body and the Open Inference Protocol's JSON tensors both carry numbers as
(nested) JSON lists, and a 3 MB body of floats must not be walked element by element in Python:
numpy infers one dtype for the whole parsed value in C, and one checked cast gives the target.
The rules are TF Serving's (rapidjson's ``IsInt()``/``IsBool()``), and the OIP has none stricter:

* float targets accept numbers, never strings or an all-boolean value; a value too large for the
  target (``1e39`` for float32) is refused rather than turned into ``inf``;
* integer targets accept integers only (``2.0`` is refused), within the target's range;
* boolean targets accept ``true``/``false`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from sharedserve.errors import InvalidInput
from sharedserve.server.wire.json_arrays import JsonArray

__all__ = ["json_type", "numeric_array"]


def json_type(value: Any) -> str:
    """What a JSON value is, for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a JSON object"
    return type(value).__name__


def numeric_array(
    name: str,
    label: str,
    target: np.dtype,
    value: Any,
    describe_item: Callable[[Any], str] = json_type,
) -> np.ndarray:
    """``value`` as an array of ``target``; InvalidInput names input ``name`` and type ``label``.

    ``describe_item`` says what a non-number among the values is (a wire format may know better
    than "a JSON object"). ``value`` may be a ``JsonArray``: decoded already, as numpy would.
    """
    if isinstance(value, JsonArray):
        raw = value.raw
    else:
        try:
            raw = np.asarray(value)  # numpy infers bool / int64 / uint64 / float64 / str / object
        except ValueError as e:
            raise InvalidInput(
                f"input {name!r}: nested lists are ragged (inhomogeneous shape)"
            ) from e
    kind = raw.dtype.kind
    if kind == "f" and target == np.uint64:
        # numpy reads [1, 2**63] as floats (no signed type holds both): integers only, re-read.
        raw = _exact_uint64(raw, value.value() if isinstance(value, JsonArray) else value)
        kind = raw.dtype.kind
    if raw.size == 0 and kind in "biuf":
        return raw.astype(target)  # [] is float64 to numpy; an empty tensor of any dtype is fine

    want = {"f": "iuf", "i": "iu", "u": "iu", "b": "b"}[target.kind]
    if kind not in want:
        raise InvalidInput(
            f"input {name!r}: expected {label}, got {_describe(raw, describe_item)}"
            + (" (integer dtypes take integers only, not floats)" if kind == "f" else "")
        )
    if target.kind in "iu" and raw.dtype != target:
        info = np.iinfo(target)
        for extreme in (int(raw.min()), int(raw.max())):
            if not info.min <= extreme <= info.max:
                raise InvalidInput(
                    f"input {name!r}: value {extreme} is out of range for {label} "
                    f"[{info.min}, {info.max}]"
                )
    try:
        with np.errstate(over="raise"):
            return raw.astype(target, copy=False)
    except FloatingPointError as e:
        raise InvalidInput(f"input {name!r}: a value is out of range for {label}") from e


def _exact_uint64(raw: np.ndarray, value: Any) -> np.ndarray:
    """``value`` as uint64 when every number in it is an integer (walks it: a rare path)."""
    exact = np.asarray(value, dtype=object)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in exact.flat):
        return raw  # a float among them: refused as floats
    try:
        return np.asarray(value, dtype=np.uint64)
    except OverflowError:
        return exact  # a negative or too large value: refused below, by range


def _describe(raw: np.ndarray, describe_item: Callable[[Any], str]) -> str:
    """What a client sent (error path only, so it may walk)."""
    kind = raw.dtype.kind
    if kind in "biuf":
        return {"b": "booleans", "i": "integers", "u": "integers", "f": "floats"}[kind]
    if kind == "U":
        return "strings"
    for item in raw.flat:  # object dtype: something that is not a number came in
        if not isinstance(item, (int, float)):
            return describe_item(item)
    return f"values numpy cannot convert ({raw.dtype})"

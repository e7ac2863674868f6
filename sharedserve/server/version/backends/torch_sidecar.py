"""A TorchScript model's ``signature.json`` sidecar, read and checked. Pure: no torch.

A TorchScript file has no named signatures, so the sidecar declares what TF Serving would show
(input and output names, dtypes, ``-1`` dimensions). Kept apart from ``torch.py`` so that the
backend holds what touches torch (load, predict, memory, paging) and stays short.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sharedserve.errors import ModelLoadError
from sharedserve.server.version.signature import (
    DTYPE_TO_NUMPY,
    PREDICT_METHOD,
    Signature,
    TensorSpec,
)

__all__ = ["SIGNATURE_FILE", "check_input_order", "read_signature_file"]

# Written by sharedserve.models.torch_models, which this layer may not import.
SIGNATURE_FILE = "signature.json"

_DEFAULT_SIGNATURE = "serving_default"
_TOP_KEYS = {"signature_name", "method_name", "inputs", "outputs"}
_SPEC_KEYS = {"dtype", "shape"}


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    duplicated = sorted({key for key in keys if keys.count(key) > 1})
    if duplicated:
        raise ValueError(f"duplicate keys {duplicated}")
    return dict(pairs)


def read_signature_file(path: Path) -> Signature:
    """Parse and validate a ``signature.json`` sidecar; ModelLoadError says what is wrong."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ModelLoadError(
            f"{path.parent} has no {path.name}: a TorchScript model needs one to declare its "
            "signature (`sharedserve models build --framework torch` writes it)"
        ) from None
    except OSError as e:
        raise ModelLoadError(f"cannot read {path}: {e}") from e
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as e:  # JSONDecodeError is a ValueError, and so are duplicate keys
        raise ModelLoadError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise ModelLoadError(f"{path} must hold a JSON object, got {type(doc).__name__}")
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise ModelLoadError(f"{path}: unknown keys {unknown}; allowed: {sorted(_TOP_KEYS)}")
    name = doc.get("signature_name", _DEFAULT_SIGNATURE)
    method = doc.get("method_name", PREDICT_METHOD)
    for key, value in (("signature_name", name), ("method_name", method)):
        if not isinstance(value, str) or not value:
            raise ModelLoadError(f"{path}: {key!r} must be a non-empty string, got {value!r}")
    return Signature(
        name=name,
        inputs=_read_specs(path, doc, "inputs"),
        outputs=_read_specs(path, doc, "outputs"),
        method_name=method,
    )


def _read_specs(path: Path, doc: dict[str, Any], key: str) -> dict[str, TensorSpec]:
    entries = doc.get(key)
    if not isinstance(entries, dict) or not entries:
        raise ModelLoadError(
            f'{path}: {key!r} must be a non-empty object like {{"x": {{"dtype": "DT_FLOAT", '
            f'"shape": [-1, 8]}}}}, got {entries!r}'
        )
    specs = {}
    for name, entry in entries.items():
        where = f"{path}: {key}.{name}"
        if not isinstance(entry, dict) or not set(entry) <= _SPEC_KEYS or "dtype" not in entry:
            raise ModelLoadError(f'{where} must be an object with "dtype" and optional "shape"')
        dtype = entry["dtype"]
        if dtype == "DT_STRING" or dtype not in DTYPE_TO_NUMPY:
            choices = sorted(set(DTYPE_TO_NUMPY) - {"DT_STRING"})
            raise ModelLoadError(f"{where}: dtype {dtype!r} cannot be served by torch; {choices}")
        shape = entry.get("shape")
        if shape is not None and not (
            isinstance(shape, list)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= -1 for d in shape)
        ):
            raise ModelLoadError(
                f"{where}: shape must be a list of sizes (-1 for any) or null, got {shape!r}"
            )
        specs[name] = TensorSpec(
            name=name,
            dtype=dtype,
            shape=None if shape is None else tuple(shape),
            tensor_name=name,
        )
    return specs


def check_input_order(
    sidecar_file: Path, declared: list[str], takes: list[str], taker: str
) -> None:
    """Refuse a sidecar that lists ``taker``'s inputs in another order than it takes them:
    inputs are passed positionally, so the same names in another order would swap tensors."""
    if set(declared) == set(takes) and declared != takes:
        raise ModelLoadError(
            f"{sidecar_file} lists inputs {declared} but {taker} takes them in the order "
            f"{takes}; list them in {taker}'s order"
        )

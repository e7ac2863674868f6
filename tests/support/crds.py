"""Validate custom resources against the schemas of their CRDs, vendored in ``crds/``.

No cluster here, so an API server's first check is played locally: the CRD's ``openAPIV3Schema``
for the object's ``apiVersion`` and ``kind``, through ``jsonschema``. Closer to the API server
than plain JSON Schema in the ways that catch mistakes in manifests:

- **Unknown fields are errors.** A structural CRD schema prunes fields it does not name, so a
  typo (``protocolVersion`` for ``protocolVersions``) is dropped without a word on a real
  cluster. Every object schema that names its properties (or names none and allows no
  additional ones) is closed, unless it says ``x-kubernetes-preserve-unknown-fields``.
- **``metadata``**, which CRD schemas leave as a bare object, is checked as ObjectMeta's common
  fields: a misspelt ``lables``, or a label value that YAML made a number, is caught.
- **``x-kubernetes-list-type``**: ``set`` items and ``map`` keys must be unique (a second port
  with the same ``containerPort`` and ``protocol``), as the API server requires.
- ``null`` is refused unless the schema says ``nullable`` (the API server drops such a field).

Not checked: CEL rules (``x-kubernetes-validations``), ``format``, defaults, and whatever an
admission webhook of the operator checks. The vendored schemas and their origin: crds/README.md.
"""

from __future__ import annotations

import copy
import difflib
import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema import Draft4Validator
from jsonschema.exceptions import ValidationError

__all__ = ["CRDS", "Crd", "CrdViolations", "crd_for", "known_kinds", "validate", "violations"]

CRDS = Path(__file__).resolve().parent / "crds"

Obj = dict[str, Any]
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_NAME = {
    "type": "string",
    "maxLength": 253,
    "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
}
# The fields of ObjectMeta a manifest may carry; the rest of it is the API server's to set.
_OBJECT_META: Obj = {
    "type": "object",
    "properties": {
        "name": _NAME,
        "generateName": {"type": "string"},
        "namespace": _NAME,
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    },
}


@dataclass(frozen=True)
class Crd:
    """One served version of a vendored CRD."""

    api_version: str
    kind: str
    schema: Obj
    """The version's openAPIV3Schema, made strict (the module docstring says how)."""
    source: dict[str, str]
    """repository, ref, commit, path and license of the CRD it came from."""

    def describe(self) -> str:
        s = self.source
        return f"{self.api_version} {self.kind} ({s['repository']} {s['ref']}, {s['path']})"


class CrdViolations(AssertionError):
    """An object does not match its CRD's schema; the message lists every violation."""

    def __init__(self, obj: Obj, crd: Crd, found: list[str]) -> None:
        self.violations = found
        name = obj.get("metadata", {}).get("name", "?")
        lines = "\n".join(f"  - {v}" for v in found)
        super().__init__(f"{obj['kind']} {name} does not match {crd.describe()}:\n{lines}")


def _load(path: Path) -> Obj:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    content: Obj = json.loads(data)
    return content


@cache
def _vendored() -> dict[tuple[str, str], Crd]:
    crds: dict[tuple[str, str], Crd] = {}
    for path in sorted(CRDS.glob("*.json*")):
        content = _load(path)
        for version, schema in content["versions"].items():
            api_version = f"{content['group']}/{version}"
            crds[api_version, content["kind"]] = Crd(
                api_version, content["kind"], _root(schema), content["source"]
            )
    return crds


def known_kinds() -> set[tuple[str, str]]:
    """(apiVersion, kind) of every vendored schema."""
    return set(_vendored())


def crd_for(api_version: str, kind: str) -> Crd:
    try:
        return _vendored()[api_version, kind]
    except KeyError:
        known = ", ".join(f"{a} {k}" for a, k in sorted(known_kinds()))
        raise KeyError(f"no vendored schema for {api_version} {kind}; there are: {known}") from None


def _root(schema: Obj) -> Obj:
    strict = copy.deepcopy(schema)
    meta = copy.deepcopy(_OBJECT_META)
    _strict(strict)
    _strict(meta)
    strict.setdefault("properties", {})["metadata"] = meta
    strict["required"] = sorted({*strict.get("required", []), "apiVersion", "kind", "metadata"})
    return strict


def _strict(schema: Any) -> None:
    """Close unknown fields and make ``nullable`` explicit in ``schema``, at every depth."""
    if not isinstance(schema, dict):
        return
    for key in ("properties", "patternProperties"):
        for sub in schema.get(key, {}).values():
            _strict(sub)
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key, []):
            _strict(sub)
    for key in ("items", "additionalProperties", "not"):
        _strict(schema.get(key))
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    is_object = schema.get("type") == "object" or "properties" in schema
    open_ended = "additionalProperties" in schema or "patternProperties" in schema
    if is_object and not preserve and not open_ended:
        schema["additionalProperties"] = False
    if schema.get("nullable") is True and isinstance(schema.get("type"), str):
        schema["type"] = [schema["type"], "null"]


def _list_type(validator: Any, list_type: str, instance: Any, schema: Obj) -> Iterator[Any]:
    """``x-kubernetes-list-type``: no duplicate items in a set, no duplicate keys in a map."""
    if not isinstance(instance, list):
        return
    if list_type == "set":
        seen_items: list[Any] = []
        for item in instance:
            if item in seen_items:
                yield ValidationError(f"duplicate item {item!r} in a list of type set")
            seen_items.append(item)
    elif list_type == "map":
        names = schema.get("x-kubernetes-list-map-keys", [])
        fields = schema.get("items", {}).get("properties", {})
        seen: set[str] = set()
        for item in instance:
            if not isinstance(item, dict):
                continue
            # A key left out takes its default, as the API server fills it in before it checks.
            values = [item.get(n, fields.get(n, {}).get("default")) for n in names]
            key = json.dumps(values)
            if key in seen:
                shown = ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=True))
                yield ValidationError(f"duplicate key ({shown}) in a list of type map")
            seen.add(key)


_Validator = jsonschema.validators.extend(Draft4Validator, {"x-kubernetes-list-type": _list_type})


def _path(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".") or "(the object)"


def _explain(error: ValidationError) -> Iterator[str]:
    where = _path(error.absolute_path)
    if error.validator == "additionalProperties" and error.validator_value is False:
        known = set(error.schema.get("properties", {}))
        for name in sorted(set(error.instance) - known):
            field = f"{where}.{name}" if error.absolute_path else name
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            yield f"{field}: unknown field (the API server would drop it){hint}"
        return
    yield f"{where}: {error.message}"


def violations(obj: Obj) -> list[str]:
    """Every way ``obj`` breaks its CRD's schema, each as 'path: what', by path; [] when none."""
    crd = crd_for(obj.get("apiVersion", ""), obj.get("kind", ""))
    errors = _Validator(crd.schema).iter_errors(obj)
    return sorted(line for error in errors for line in _explain(error))


def validate(obj: Obj) -> None:
    """Raise CrdViolations listing every violation, if there is one."""
    found = violations(obj)
    if found:
        raise CrdViolations(obj, crd_for(obj["apiVersion"], obj["kind"]), found)

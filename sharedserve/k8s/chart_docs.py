"""The chart's ``values.yaml`` and docs/kubernetes.md's values table, both from the values'
JSON Schema (``k8s.chart``), so neither says other than what Helm checks. Pure."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from typing import Any

from sharedserve.k8s.chart import chart_schema

__all__ = ["values_table", "values_yaml"]

_HEADER = """\
# The sharedserve chart's values, each at its default (`sharedserve schema chart-values` is their
# JSON Schema, values.schema.json, which Helm checks them against). `sharedserve size` writes a
# plan's as plan/values.yaml: helm install sharedserve charts/sharedserve -f plan/values.yaml.
# Made from the types in sharedserve/k8s/chart.py, as the schema is: change them, not this file
# (tests/integration/k8s/test_chart.py says how to write it again).
"""


def _properties(schema: dict[str, Any], node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """``node``'s properties, each a reference to a definition resolved into it."""
    for name, given in node.get("properties", {}).items():
        prop = given
        if "$ref" in given:
            target = schema["$defs"][given["$ref"].rsplit("/", 1)[1]]
            prop = {**target, **{k: v for k, v in given.items() if k != "$ref"}}
        yield name, prop


def _default(node: dict[str, Any], name: str, prop: dict[str, Any]) -> str:
    if "default" in prop:
        return json.dumps(prop["default"])
    if name in node.get("required", ()):
        return "required"
    return {"array": "[]", "object": "{}"}.get(prop.get("type", ""), "null")


def _lines(schema: dict[str, Any], node: dict[str, Any], indent: str) -> Iterator[str]:
    for name, prop in _properties(schema, node):
        for line in textwrap.wrap(prop.get("description", ""), 97 - len(indent)):
            yield f"{indent}# {line}"
        if prop.get("type") == "object" and "properties" in prop:
            yield f"{indent}{name}:"
            yield from _lines(schema, prop, indent + "  ")
        else:
            yield f"{indent}{name}: {_default(node, name, prop)}"


def values_yaml() -> str:
    """The chart's ``values.yaml``: every key at its default, with its description."""
    schema = chart_schema()
    return _HEADER + "\n".join(_lines(schema, schema, "")) + "\n"


def _rows(schema: dict[str, Any], node: dict[str, Any], prefix: str) -> Iterator[str]:
    for name, prop in _properties(schema, node):
        key = f"{prefix}{name}"
        if prop.get("type") == "object" and "properties" in prop:
            yield from _rows(schema, prop, key + ".")
            continue
        what = " ".join(prop.get("description", "").split()).replace("|", "\\|")
        default = _default(node, name, prop)
        yield f"| `{key}` | `{default}` | {what} |"
    if prefix == "" and "servers" in node.get("properties", {}):
        item = schema["$defs"]["ServerValues"]
        yield from _rows(schema, item, "servers[].")
        yield from _rows(schema, schema["$defs"]["ServerModelValues"], "servers[].models[].")


def values_table() -> str:
    """docs/kubernetes.md's table of the chart's values: key, default, meaning."""
    schema = chart_schema()
    rows = ["| Key | Default | Meaning |", "| --- | --- | --- |"]
    return "\n".join([*rows, *_rows(schema, schema, "")]) + "\n"

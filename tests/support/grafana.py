"""A Grafana dashboard's PromQL: every query in it, and every metric name each query reads.

Queries are parsed by a real PromQL parser (``promql-parser``, Rust's promql-parser), so label
matchers, strings, functions, keywords, durations and grouping labels are never taken for metric
names. Grafana's own syntax is handled first: its interval variables stand where PromQL wants a
duration, and template variable queries wrap PromQL in ``label_values(...)`` or
``query_result(...)``. Template variables inside label matcher values are plain strings to PromQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import promql_parser

__all__ = ["expressions", "metric_names", "panels", "variable_expressions"]

Panel = dict[str, Any]

# Grafana's interval variables, which it replaces with a duration before the query is sent.
# (``$__interval_ms`` and the like are numbers, not durations: left alone, they fail to parse.)
_INTERVALS = re.compile(
    r"\$(?:__rate_interval|__interval|__range)\b|\$\{__(?:rate_interval|interval|range)\}"
)
_LABEL_VALUES = re.compile(r"label_values\((?P<args>.*)\)", re.DOTALL)
_QUERY_RESULT = re.compile(r"query_result\((?P<expr>.*)\)", re.DOTALL)
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def panels(dashboard: dict[str, Any]) -> Iterator[Panel]:
    """Every panel, rows included, and the panels inside collapsed rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panels(panel)


def variable_expressions(variable: dict[str, Any]) -> list[str]:
    """The PromQL a template variable's query runs; ValueError for one that cannot be checked."""
    if variable.get("type") != "query":
        return []
    query = variable["query"]
    if isinstance(query, dict):  # the form Grafana 10 and later save
        query = query["query"]
    query = query.strip()
    if match := _LABEL_VALUES.fullmatch(query):
        selector, _, label = match["args"].rpartition(",")
        if not _LABEL_NAME.fullmatch(label.strip()):
            raise ValueError(f"not a label name in {query!r}")
        return [selector] if selector.strip() else []  # label_values(label): every series
    if match := _QUERY_RESULT.fullmatch(query):
        return [match["expr"]]
    if query.startswith(("metrics(", "label_names(")):
        raise ValueError(f"{query!r} names no metric that could be checked")
    return [query]


def expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression: each panel target's, then each template variable's."""
    found = [t["expr"] for p in panels(dashboard) for t in p.get("targets", []) if "expr" in t]
    for variable in dashboard.get("templating", {}).get("list", []):
        found += variable_expressions(variable)
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects. ValueError when it does not parse, or when a selector
    names its metric by regex (which no list of names could check)."""
    tree = promql_parser.parse(_INTERVALS.sub("5m", expr))
    names: set[str] = set()

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names.update(_selector_names(node, expr))

    promql_parser.walk(tree, visit)
    return names


def _selector_names(node: promql_parser.VectorSelector, expr: str) -> set[str]:
    if node.name:
        return {node.name}
    # {__name__="x", ...}, or Prometheus 3's {__name__="x" or __name__="y"}: one name per group.
    groups = node.matchers.or_matchers or [node.matchers.matchers]
    names = set()
    for group in groups:
        named = [m for m in group if m.name == "__name__"]
        if len(named) != 1 or named[0].op != promql_parser.MatchOp.Equal:
            raise ValueError(f"a selector in {expr!r} does not name one metric exactly")
        names.add(named[0].value)
    return names

"""The Grafana dashboard (k8s/monitoring) against what a running server and allocator export.

Every query in the dashboard is parsed as PromQL (tests/support/grafana.py) and each metric it
names must be in the scrape of a real ``sharedserve serve`` (the session's ``tiny``, after a
predict) or a real ``sharedserve allocator`` (fake GPUs, fake kubelet, after an Allocate). The
one exception is the series that need a real GPU (NVML's figures), which the fake GPUs do not
give and the test machine need not have: their names come from the code that exports them, run
with figures as NVML reports them, never from a list typed here.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sharedserve.allocator.inventory import Sizing, build_inventory
from sharedserve.allocator.metrics import AllocatorCollector, UsageView
from sharedserve.gpu.fake import FakeGpuBackend
from sharedserve.server.metrics.prometheus import Metrics
from tests.support.allocator import GPUS, T4, Node, allocate, ids, prefer
from tests.support.gpus import write_inventory
from tests.support.grafana import expressions, metric_names, panels, variable_expressions
from tests.support.servers import Server, free_port

pytestmark = [pytest.mark.tensorflow]

DASHBOARD = (
    Path(__file__).resolve().parents[3] / "k8s" / "monitoring" / "sharedserve-dashboard.json"
)
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
ROW = [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]


@dataclass(frozen=True)
class Exported:
    series: frozenset[str]
    """Sample names with at least one series in the scrape."""
    unincremented: frozenset[str]
    """``<name>_total`` of labelled counters (and the series of labelled histograms) the scrape
    declares but has no series of yet: a labelled counter has none until its first increment
    (no connection was refused here), a histogram none until its first observation (no model
    was paged in)."""
    families: dict[str, frozenset[str]]
    """Each declared family's sample names, those it has and those its type gives it."""


_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("_count", "_sum", ""),
}


def exported(*texts: str) -> Exported:
    found = [family for text in texts for family in text_string_to_metric_families(text)]
    # The text format carries a counter's or histogram's creation time as a gauge of its own.
    created = {f"{f.name}_created" for f in found if f.type in ("counter", "histogram")}
    series: set[str] = set()
    unincremented: set[str] = set()
    families: dict[str, frozenset[str]] = {}
    for family in found:
        names = {sample.name for sample in family.samples}
        series |= names
        if family.name in created:
            continue
        if family.type == "counter" and not names:
            unincremented.add(f"{family.name}_total")
        if family.type == "histogram" and not names:  # likewise until its first observation
            unincremented |= {family.name + suffix for suffix in _SUFFIXES["histogram"]}
        typed = {family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",))}
        families[family.name] = frozenset(names | typed)
    return Exported(frozenset(series), frozenset(unincremented), families)


def series_names(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


class _MeasuredGpus(FakeGpuBackend):
    """The fake inventory answering as NVML does for a real GPU."""

    def memory_used_mib(self, gpu_uuid: str) -> int | None:
        return 1024

    def utilization_percent(self, gpu_uuid: str) -> int | None:
        return 37


@pytest.fixture(scope="module")
def gpu_only(tmp_path_factory: pytest.TempPathFactory) -> frozenset[str]:
    """Series that exist only where NVML measures a GPU: what the server's and the allocator's
    own metrics code exports with NVML's figures, less what it exports without them. Fake GPUs,
    and a machine without a GPU, give them no series to scrape: the only names not scraped."""

    def server(reading: tuple[float | None, float | None, float | None]) -> set[str]:
        metrics = Metrics("tiny")
        metrics.track_gpu_memory(lambda: reading)
        return series_names(metrics.render().decode())

    def allocator(backend: FakeGpuBackend) -> set[str]:
        registry = CollectorRegistry()
        inventory = build_inventory(backend.list_gpus(), Sizing())
        registry.register(AllocatorCollector(inventory, backend, lambda: {}, UsageView()))
        return series_names(generate_latest(registry).decode())

    path = write_inventory(tmp_path_factory.mktemp("gpus") / "gpus.json", GPUS)
    names = server((3e9, 4e9, 2.5e9)) - server((None, None, None))
    names |= allocator(_MeasuredGpus(path)) - allocator(FakeGpuBackend(path))
    assert names, "the code exports nothing more with a GPU: the premise of this test is gone"
    return frozenset(names)


@pytest.fixture(scope="module")
def scraped(tiny_server: Server) -> Exported:
    """One scrape of the session's ``tiny`` server and one of a fresh allocator's."""
    response = tiny_server.client.post("/v1/models/tiny:predict", json={"instances": ROW})
    assert response.status_code == 200, response.text  # so the labelled series exist
    served = tiny_server.client.get("/metrics")
    assert served.status_code == 200
    node = Node(["--vgpus-per-gpu", "4"], metrics_port=free_port())
    try:
        plugin = node.plugin()
        # vGPUs have series once the kubelet has offered them as free or allocated them.
        prefer(plugin, ids(T4, 0, 1, 2, 3), 1)
        allocate(plugin, ids(T4, 2))
        text = node.metrics()
    finally:
        log, code = node.log(), node.close()
    assert code == 0, log
    return exported(served.text, text)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_names(dashboard: dict[str, Any]) -> set[str]:
    return {name for expr in expressions(dashboard) for name in metric_names(expr)}


def unexported(names: Iterable[str], scraped: Exported, gpu_only: frozenset[str]) -> set[str]:
    """The names neither scraped nor exported only with a GPU. (On a machine with a GPU the
    server's GPU memory series are scraped like the rest; the code only vouches for the others.)
    """
    return set(names) - scraped.series - scraped.unincremented - gpu_only


def test_every_metric_the_dashboard_names_is_exported(
    dashboard: dict[str, Any], scraped: Exported, gpu_only: frozenset[str]
) -> None:
    names = dashboard_names(dashboard)
    assert len(names) >= 15, sorted(names)
    assert unexported(names, scraped, gpu_only) == set()


def test_the_check_catches_a_misspelled_metric(
    dashboard: dict[str, Any], scraped: Exported, gpu_only: frozenset[str]
) -> None:
    """The control for the test above: one wrong letter in one query fails it."""
    broken = copy.deepcopy(dashboard)
    target = next(t for p in panels(broken) for t in p.get("targets", []))
    assert "sharedserve_requests_total" in target["expr"]
    target["expr"] = target["expr"].replace(
        "sharedserve_requests_total", "sharedserve_request_total"
    )
    assert unexported(dashboard_names(broken), scraped, gpu_only) == {"sharedserve_request_total"}


def test_every_exported_metric_has_a_panel(
    dashboard: dict[str, Any], scraped: Exported, gpu_only: frozenset[str]
) -> None:
    # Panels only: a template variable's query shows nothing.
    shown = {
        name
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
        for name in metric_names(target["expr"])
    }
    assert len(scraped.families) >= 10, sorted(scraped.families)
    missing = [family for family, names in scraped.families.items() if not names & shown]
    assert missing == [], "exported but on no panel"
    assert sorted(gpu_only - shown) == []


def test_panels_have_targets_with_ref_ids_on_the_datasource_variable(
    dashboard: dict[str, Any],
) -> None:
    assert dashboard["schemaVersion"] >= 39
    assert "rows" not in dashboard  # the pre-5.0 layout, which Grafana migrates on load
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"model", "namespace", "pod", "node"} <= set(variables)
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]
            assert variable_expressions(variable), variable["name"]
    ids_seen = [p["id"] for p in panels(dashboard)]
    assert len(ids_seen) == len(set(ids_seen)), "panel ids repeat"
    shown = [p for p in panels(dashboard) if p["type"] != "row"]
    assert len(shown) >= 15
    for panel in shown:
        title, targets = panel["title"], panel.get("targets", [])
        assert panel["datasource"] == DATASOURCE, title
        assert targets, f"{title} has no target"
        ref_ids = [t.get("refId") for t in targets]
        assert all(ref_ids) and len(set(ref_ids)) == len(ref_ids), title
        for target in targets:
            assert target.get("datasource", DATASOURCE) == DATASOURCE, title
            assert target["expr"].strip(), title


# The extractor itself, on expressions built to trip a tokenizer.
@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'histogram_quantile(0.99, sum by (model, le) (rate(a_bucket{model=~"$model", '
            'code!~"2..|OK"}[$__rate_interval])))',
            {"a_bucket"},
        ),
        ("sum without (instance, le) (rate(a[${__rate_interval}]))", {"a"}),
        ("a / on (uuid) group_left (index, name) max by (uuid, index, name) (b)", {"a", "b"}),
        ("a and b unless c or d > bool 1", {"a", "b", "c", "d"}),
        ('{__name__="a", job="sum"} offset 5m', {"a"}),
        ('{__name__="a" or __name__="b"}', {"a", "b"}),
        ('label_replace(a, "dst", "$1", "b_total", "(.*)")', {"a"}),
        ('a{x="rate(b[5m]) + c"}', {"a"}),
        ("max_over_time(a[1h:5m] @ end()) - a offset -5m", {"a"}),
        ('-absent(a{by="on"}) * sum(rate(b_sum[$__interval])) / scalar(c)', {"a", "b_sum", "c"}),
        ("vector(1) + time()", set()),
        ("count(by)", {"by"}),  # a metric named like a keyword is still a metric
    ],
)
def test_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


@pytest.mark.parametrize(
    "expr",
    [
        '{__name__=~"sharedserve_.*"}',  # a regex names no metric that can be checked
        "sum(a) by",
        "rate(a)",  # a range vector is required: the parser type-checks
        "rate(a[$__interval_ms])",
    ],
)
def test_metric_names_refuses(expr: str) -> None:
    with pytest.raises(ValueError):
        metric_names(expr)


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ('label_values(a{ns=~"$namespace", x="1,2"}, model)', ['a{ns=~"$namespace", x="1,2"}']),
        ({"query": "label_values(a, pod)", "refId": "V"}, ["a"]),
        ("label_values(model)", []),
        ("query_result(topk(5, sum by (model) (a)))", ["topk(5, sum by (model) (a))"]),
        ("up", ["up"]),
    ],
)
def test_variable_expressions(query: Any, found: list[str]) -> None:
    assert variable_expressions({"type": "query", "query": query}) == found


def test_expressions_reach_into_collapsed_rows() -> None:
    dashboard = {
        "panels": [
            {"type": "timeseries", "targets": [{"refId": "A", "expr": "a"}]},
            {
                "type": "row",
                "collapsed": True,
                "panels": [{"type": "stat", "targets": [{"refId": "A", "expr": "b + c"}]}],
            },
        ],
        "templating": {"list": [{"type": "query", "query": "label_values(d, x)"}]},
    }
    assert dashboard_names(dashboard) == {"a", "b", "c", "d"}
    with pytest.raises(ValueError):
        variable_expressions({"type": "query", "query": "metrics(sharedserve_.*)"})

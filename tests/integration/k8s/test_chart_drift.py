"""One source: the chart's templates against ``k8s render`` and kustomize for the same inputs.

The chart's templates are Helm's spelling of what sharedserve/k8s/model/ (``k8s render``) and
k8s/ (kustomize) hold; these render both for the same inputs and compare the objects, normalised
only where the two name things differently on purpose (tests/support/chart.py). So a template
edited without its source, or a source without its template, fails here; and the last test shows
that it does, by editing a template.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from sharedserve.documents import parse
from sharedserve.k8s.admin import admin_secrets
from sharedserve.k8s.chart import ChartValues, chart_deployments
from sharedserve.k8s.render import render_model
from sharedserve.k8s.shared_server import shared_server_objects
from tests.support.chart import CHART, NAMESPACE, differences, template
from tests.support.manifests import kustomize, load

Obj = dict[str, Any]

# Every key of a server, each way it changes the objects.
SERVERS: Obj = {
    "image": "registry.example/sharedserve:0.1.0",
    "modelPvc": "models-ro",
    "adminSecret": "fleet-admin",
    "runtimeClass": "nvidia",
    "allocator": {"enabled": False},
    "servers": [
        {"model": "tiny", "replicas": 3, "spread": "nodes", "vgpu": 2, "cpu": "1500m",
         "memory": "3Gi", "serveArgs": ["--enable-batching", "--max-batch-size", "8"]},
        {"model": "Edge.Model_v2", "modelDir": "edge", "spread": "preferred"},
        {"model": "claims", "name": "claims-dra", "gpuMemory": "6Gi", "gpuCompute": 30},
        {"model": "claims-memory-only", "gpuMemory": "1536Mi"},
        {"model": "rankers", "replicas": 2, "paging": True, "spread": "nodes", "models": [
            {"name": "ranker", "directory": "ranker-v3",
             "modelFile": {"weight": 3.0, "gpu_memory_mib": 900, "pinned": True}},
            {"name": "fraud", "directory": "fraud", "modelFile": {"weight": 1.0}}]},
        {"model": "pair", "gpuMemory": "4Gi", "models": [
            {"name": "a", "directory": "a"}, {"name": "b", "directory": "b"}]},
    ],
}  # fmt: skip


def k8s_render(values: Obj) -> list[Obj]:
    """What ``k8s render`` renders for the chart's servers: each model's objects, a shared
    server's made a shared server's, and the management key's Secret."""
    objects: list[Obj] = []
    for deployment, pods in chart_deployments(parse(ChartValues, values, where="values"),
                                              NAMESPACE):  # fmt: skip
        rendered = render_model(deployment)
        objects += rendered if pods is None else shared_server_objects(rendered, pods)
    return admin_secrets(objects) + objects


def test_the_servers_are_what_k8s_render_renders(tmp_path: Path) -> None:
    assert differences(template(SERVERS, tmp=tmp_path), k8s_render(SERVERS)) == []


def test_without_its_secret_the_servers_read_the_named_one(tmp_path: Path) -> None:
    values = {**SERVERS, "createAdminSecret": False}
    chart = template(values, tmp=tmp_path)
    assert "Secret" not in [o["kind"] for o in chart]
    assert differences(chart, [o for o in k8s_render(values) if o["kind"] != "Secret"]) == []


@pytest.mark.parametrize(
    ("allocator", "kustomization"),
    [
        ({"mode": "device-plugin", "vgpusPerGpu": 4, "policy": "bundle"}, "base/allocator"),
        ({"mode": "device-plugin", "mps": True}, "overlays/mps"),
        ({"mode": "dra"}, "overlays/dra/driver"),
    ],
)
def test_the_allocator_is_what_kustomize_builds(
    allocator: Obj, kustomization: str, tmp_path: Path
) -> None:
    chart = template({"allocator": allocator}, tmp=tmp_path)
    assert differences(chart, load(kustomize(kustomization))) == []


def test_the_monitoring_pieces_are_what_kustomize_builds(tmp_path: Path) -> None:
    monitoring = {"serviceMonitor": True, "podMonitor": True, "dashboard": True}
    values = {"allocator": {"enabled": False}, "monitoring": monitoring}
    assert differences(template(values, tmp=tmp_path), load(kustomize("monitoring"))) == []


@pytest.mark.parametrize(
    ("template_file", "before", "after"),
    [
        ("servers.yaml", "failureThreshold: 60", "failureThreshold: 61"),
        ("servers.yaml", "sizeLimit: 256Mi", "sizeLimit: 512Mi"),
        ("allocator.yaml", "periodSeconds: 20", "periodSeconds: 30"),
        ("_allocator.tpl", "      - resourceslices\n", "      - resourceslices\n      - pods\n"),
    ],
)
def test_a_changed_template_fails_the_comparison(
    template_file: str, before: str, after: str, tmp_path: Path
) -> None:
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    path = chart / "templates" / template_file
    assert before in path.read_text()
    path.write_text(path.read_text().replace(before, after, 1))
    # The servers (every key) and the DRA driver, whose cluster pieces _allocator.tpl holds.
    dra = {"allocator": {"mode": "dra"}}

    def render(chart: Path) -> list[Obj]:
        return template(SERVERS, tmp=tmp_path, chart=chart) + template(
            dra, tmp=tmp_path, chart=chart
        )

    theirs = k8s_render(SERVERS) + load(kustomize("overlays/dra/driver"))
    assert differences(render(CHART), theirs) == []
    assert differences(render(chart), theirs) != []

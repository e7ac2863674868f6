"""The Helm chart (charts/sharedserve) with the real Helm: it lints strictly, each documented
values file renders objects that validate strictly against Kubernetes 1.36's schemas (custom
resources against their CRDs'), a plan's values.yaml renders one workload per server of the
plan, and a mistyped value is refused with the schema's message. Its files made from types (the
schema, the defaults, the docs' table) are what the types make now.

Helm is found on the PATH or in the virtualenv (``make helm`` puts it there).
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sharedserve.cli import app
from sharedserve.k8s.admin import ADMIN_KEY_DIGEST
from sharedserve.k8s.chart_docs import values_table, values_yaml
from sharedserve.size.run import plan_fleet
from tests.support import crds
from tests.support.chart import CHART, NAMESPACE, differences, run_helm, template
from tests.support.manifests import DRA_KUBERNETES_VERSION, K8S, load, validate

ROOT = CHART.parents[1]
EXAMPLES = ROOT / "examples" / "helm"
PLAN = ROOT / "tests" / "data" / "plan" / "expected"
# A golden values file per mode; the plan's is what `sharedserve size` writes (its golden test
# keeps it current).
VALUES = {
    "device-plugin": EXAMPLES / "device-plugin.yaml",
    "mps": EXAMPLES / "mps.yaml",
    "dra": EXAMPLES / "dra.yaml",
    "plan with a shared server": PLAN / "values.yaml",
}

Obj = dict[str, Any]


@pytest.mark.parametrize("values", [None, *VALUES.values()], ids=["defaults", *VALUES])
def test_helm_lint_strict_passes(values: Path | None) -> None:
    args = ["lint", "--strict", "--namespace", NAMESPACE]
    result = run_helm(*args, *(["-f", str(values)] if values else []))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


@pytest.mark.parametrize("mode", list(VALUES))
def test_helm_install_takes_each_values_file(mode: str) -> None:
    # A client-side dry run: what `helm install` checks before it reaches a cluster.
    args = ["install", "sharedserve", "-n", NAMESPACE, "--dry-run=client", "-f", str(VALUES[mode])]
    result = run_helm(*args)
    assert result.returncode == 0, result.stderr
    assert "STATUS: pending-install" in result.stdout


@pytest.mark.parametrize("mode", list(VALUES))
def test_each_values_file_renders_objects_valid_for_kubernetes_1_36(
    mode: str, tmp_path: Path
) -> None:
    objects = template(VALUES[mode])
    # Custom resources (the Prometheus Operator's monitors, KEDA's ScaledObject) against their
    # CRDs' schemas (tests/support/crds), the rest against Kubernetes 1.36's.
    custom = [o for o in objects if (o["apiVersion"], o["kind"]) in crds.known_kinds()]
    core = [o for o in objects if o not in custom]
    paths = []
    for i, obj in enumerate(core):
        paths.append(tmp_path / f"{i:03d}-{obj['kind']}.yaml")
        paths[-1].write_text(yaml.safe_dump(obj))
    checked = validate(paths, DRA_KUBERNETES_VERSION)
    assert len(checked) == len(core)
    for obj in custom:
        crds.validate(obj)


def _kinds(objects: list[Obj]) -> list[str]:
    return sorted(o["kind"] for o in objects)


def test_each_mode_installs_its_allocator_pieces() -> None:
    dp, mps, dra = (template(VALUES[m]) for m in ("device-plugin", "mps", "dra"))
    assert _kinds(dp).count("DaemonSet") == 1 and "DeviceClass" not in _kinds(dp)
    assert _kinds(mps).count("DaemonSet") == 2  # the allocator and MPS's control daemon
    for kind in ("DeviceClass", "ClusterRole", "ClusterRoleBinding", "ServiceAccount",
                 "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):  # fmt: skip
        assert kind in _kinds(dra), kind
    assert _kinds(dra).count("ResourceClaimTemplate") == 2
    assert _kinds(dp).count("HorizontalPodAutoscaler") == 2
    assert _kinds(dra).count("ScaledObject") == 2


def test_the_made_key_is_the_one_each_pod_carries_the_digest_of() -> None:
    objects = template(VALUES["device-plugin"])
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    key = base64.b64decode(secret["data"]["key"])
    assert len(key) == 64 and key.isalnum()
    digest = hashlib.sha256(key).hexdigest()[:16]
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations[ADMIN_KEY_DIGEST] == digest
    assert template(VALUES["device-plugin"]) != objects  # a new key where none exists yet


def test_a_plans_values_render_one_workload_per_server_of_the_plan_as_k8s_yaml_does(
    tmp_path: Path,
) -> None:
    plan = json.loads((PLAN / "plan.json").read_text())
    servers = [m["name"] for m in plan["models"] if m.get("server") is None]
    servers += [s["name"] for s in plan["servers"]]
    assert plan["servers"], "the golden plan must hold a shared server"
    objects = template(PLAN / "values.yaml")
    deployments = [o["metadata"]["name"] for o in objects if o["kind"] == "Deployment"]
    assert sorted(deployments) == sorted(servers)
    # The same objects as k8s.yaml's, in its namespace; the allocator aside, and the management
    # key's Secret, which the chart makes and k8s.yaml leaves to the user.
    values = yaml.safe_load((PLAN / "values.yaml").read_text())
    values["allocator"]["enabled"] = False
    servers_only = template(values, tmp=tmp_path, namespace="models")
    rendered = load((PLAN / "k8s.yaml").read_text())
    assert differences([o for o in servers_only if o["kind"] != "Secret"], rendered) == []
    daemonset = next(o for o in objects if o["kind"] == "DaemonSet")
    assert daemonset["metadata"]["name"] == "sharedserve-allocator"
    config = next(o for o in objects if o["metadata"]["name"] == "sharedserve-allocator")
    assert config["data"]["vgpus-per-gpu"] == str(plan["kubernetes"]["vgpus_per_gpu"])


def test_a_dra_plans_values_render_its_claims_as_k8s_yaml_does(tmp_path: Path) -> None:
    fleet = (PLAN.parent / "fleet.yaml").read_text()
    fleet = fleet.replace("profile: profiles/", f"profile: {PLAN.parent / 'profiles'}/")
    fleet = fleet.replace(
        "kubernetes: {namespace: models}", "kubernetes: {namespace: models, dra: true}"
    )
    (tmp_path / "fleet.yaml").write_text(fleet)
    plan_fleet(tmp_path / "fleet.yaml", tmp_path / "plan")
    values = yaml.safe_load((tmp_path / "plan" / "values.yaml").read_text())
    assert values["allocator"] == {"mode": "dra"}
    objects = template(values, tmp=tmp_path, namespace="models")
    claims = [o for o in objects if o["kind"] == "ResourceClaimTemplate"]
    assert len(claims) == len(values["servers"])
    values["allocator"]["enabled"] = False
    servers_only = template(values, tmp=tmp_path, namespace="models")
    rendered = load((tmp_path / "plan" / "k8s.yaml").read_text())
    assert differences([o for o in servers_only if o["kind"] != "Secret"], rendered) == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"allocator": {"mode": "gpu"}}, "at '/allocator/mode': value must be one of"),
        ({"servers": [{"model": "tiny", "replicas": "two"}]}, "at '/servers/0/replicas'"),
        ({"allocater": {}}, "additional properties 'allocater' not allowed"),
        ({"servers": [{"model": "tiny", "gpuCompute": 150}]}, "at '/servers/0/gpuCompute'"),
        ({"servers": [{"model": "bad name"}]}, "at '/servers/0/model'"),
        ({"servers": [{"name": "tiny"}]}, "missing property 'model'"),
    ],
)
def test_helm_refuses_a_mistyped_value_with_the_schemas_message(
    values: Obj, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    for command in ("template", "install"):
        extra = ["--dry-run=client"] if command == "install" else []
        result = run_helm(command, "sharedserve", "-n", NAMESPACE, *extra, "-f", str(path))
        assert result.returncode != 0, result.stdout
        assert "values don't meet the specifications of the schema" in result.stderr
        assert message in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"servers": [{"model": "tiny"}, {"model": "Tiny"}]},
         "tiny and Tiny both render as the Deployment"),
        ({"servers": [{"model": "tiny", "gpuCompute": 20}]},
         "tiny: gpuCompute is a share asked of the DRA"),
        ({"servers": [{"model": "tiny", "gpuMemory": "2Gi", "vgpu": 2}],
          "allocator": {"mode": "dra"}},
         "tiny: vgpu with gpuMemory"),
        ({"servers": [{"model": "tiny"}], "allocator": {"mode": "dra"}},
         "tiny asks for vGPUs, which the DRA driver does not advertise"),
        ({"servers": [{"model": "tiny", "gpuMemory": "2Gi"}]},
         "tiny claims gpuMemory of the DRA driver, but the allocator is the device plugin"),
        ({"servers": [{"model": "tiny"}],
          "autoscaling": {"kind": "hpa", "metric": "sharedserve_queue_wait_seconds"}},
         "queue wait, a histogram's quantile, needs kind keda"),
    ],
)  # fmt: skip
def test_helm_refuses_what_the_schema_cannot_say(values: Obj, message: str, tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = run_helm("template", "sharedserve", "-n", NAMESPACE, "-f", str(path))
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_the_committed_schema_is_what_sharedserve_schema_prints() -> None:
    result = CliRunner().invoke(app, ["schema", "chart-values"])
    assert result.exit_code == 0, result.output
    assert (CHART / "values.schema.json").read_text() == result.output, (
        "charts/sharedserve/values.schema.json is stale: "
        "sharedserve schema chart-values > charts/sharedserve/values.schema.json"
    )


def test_the_committed_defaults_are_what_the_types_make() -> None:
    assert (CHART / "values.yaml").read_text() == values_yaml(), (
        "charts/sharedserve/values.yaml is stale: python -c 'from sharedserve.k8s.chart_docs "
        'import values_yaml; print(values_yaml(), end="")\' > charts/sharedserve/values.yaml'
    )


def test_the_docs_values_table_is_the_schemas() -> None:
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    assert values_table() in docs, (
        "docs/kubernetes.md's values table differs from the chart's schema: paste "
        "sharedserve.k8s.chart_docs.values_table()'s"
    )


def test_the_chart_dashboard_is_k8s_monitorings() -> None:
    ours = CHART / "files" / "sharedserve-dashboard.json"
    assert ours.read_bytes() == (K8S / "monitoring" / "sharedserve-dashboard.json").read_bytes()

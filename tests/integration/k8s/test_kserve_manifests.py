"""The KServe manifests (k8s/kserve) and the Prometheus Operator monitors (k8s/monitoring),
checked as far as a machine without a cluster can.

What runs here: every object is validated against the schema of its CRD, vendored from the
projects' releases (tests/support/crds/README.md says which), strictly: unknown fields, which a
real API server would silently drop, are errors. The runtime's wiring is checked against KServe's
conventions (container name, /mnt/models, {{.Name}}, ports, protocols) and its args against the
real `sharedserve serve` parser. What cannot run here (no cluster): KServe's admission webhooks
and controller, scheduling, the storage initializer; docs/kubernetes.md ("KServe") lists what to
check on a cluster.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer

from sharedserve.cli import app
from sharedserve.contract import VGPU_RESOURCE
from sharedserve.server.settings import ShutdownSettings
from tests.support import crds
from tests.support import manifests as m
from tests.support.manifests import K8S, Obj

KSERVE = K8S / "kserve"
MONITORING = K8S / "monitoring"
MODEL_DEPLOYMENT = K8S.parent / "sharedserve" / "k8s" / "model" / "deployment.yaml"
# KServe's own names (pkg/constants/constants.go at the vendored tag): the protocols an
# InferenceService and a runtime may name, the container a runtime must have for the predictor
# to be merged into, where the storage initializer puts the model, and the HTTP port KServe
# assumes when a runtime declares none.
KSERVE_PROTOCOLS = {"v1", "v2", "grpc-v1", "grpc-v2"}
KSERVE_CONTAINER = "kserve-container"
MODEL_MOUNT = "/mnt/models"
KSERVE_HTTP_PORT = 8080
MONITOR_KINDS = ("ServiceMonitor", "PodMonitor")
# What a Go template in a KServe runtime can say about the InferenceService: {{.Name}},
# {{.Namespace}}, {{.Labels.key}}, {{.Annotations.key}} (ObjectMeta's fields).
PLACEHOLDER = re.compile(r"\{\{\s*\.(Name|Namespace|Labels|Annotations)(?:\.(\w+))?\s*\}\}")
# The usage errors typer raises: click's, or those of the copy of click newer typers carry.
CLICK_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


def _objects(directory: Path) -> list[Obj]:
    return [
        obj
        for path in sorted(directory.glob("*.yaml"))
        if path.name != "kustomization.yaml" and not path.name.endswith(".patch.yaml")
        for obj in m.load(path.read_text())
    ]


@pytest.fixture(scope="module")
def kserve() -> list[Obj]:
    return _objects(KSERVE)


@pytest.fixture(scope="module")
def runtime(kserve: list[Obj]) -> Obj:
    return m.one(kserve, "ClusterServingRuntime")


@pytest.fixture(scope="module")
def isvc(kserve: list[Obj]) -> Obj:
    return m.one(kserve, "InferenceService")


def _container(runtime: Obj) -> Obj:
    (container,) = [c for c in runtime["spec"]["containers"] if c["name"] == KSERVE_CONTAINER]
    return container


def _render(value: Any, meta: Obj) -> Any:
    """``value`` with KServe's placeholders filled in from ``meta`` as the controller does (a Go
    template over the container); a placeholder it would not understand fails the test."""
    if isinstance(value, dict):
        return {k: _render(v, meta) for k, v in value.items()}
    if isinstance(value, list):
        return [_render(v, meta) for v in value]
    if not isinstance(value, str):
        return value

    def fill(match: re.Match[str]) -> str:
        field, key = match.groups()
        if field in ("Name", "Namespace"):
            assert key is None, match.group(0)
            return str(meta[field.lower()])
        return str(meta.get(field.lower(), {})[key])

    rendered = PLACEHOLDER.sub(fill, value)
    assert "{{" not in rendered, f"a placeholder KServe's template would not fill: {value}"
    return rendered


def _serve_params(args: list[str]) -> dict[str, Any]:
    """``args`` (after ``serve``) parsed by the real `sharedserve serve`, which is not run."""
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    try:
        params: dict[str, Any] = serve.make_context("serve", list(args)).params
    except CLICK_ERROR as e:
        message = getattr(e, "format_message", e.__str__)()
        pytest.fail(f"`sharedserve serve` refuses the runtime's args {args}: {message}")
    return params


# -- the CRD schemas ---------------------------------------------------------------------------


def test_kserve_files_hold_the_runtime_and_an_inference_service(kserve: list[Obj]) -> None:
    assert (KSERVE / "clusterservingruntime.yaml").is_file()
    assert (KSERVE / "inferenceservice.yaml").is_file()
    assert sorted(o["kind"] for o in kserve) == ["ClusterServingRuntime", "InferenceService"]


def test_every_kserve_object_matches_its_crd_schema(kserve: list[Obj]) -> None:
    for obj in kserve:
        crds.validate(obj)
    assert {(o["apiVersion"], o["kind"]) for o in kserve} == {
        ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"),
        ("serving.kserve.io/v1beta1", "InferenceService"),
    }


def test_the_kustomize_build_is_the_files_unchanged(kserve: list[Obj]) -> None:
    # No `namespace:` transformer: kustomize would give the cluster-scoped runtime one too.
    built = m.load(m.kustomize("kserve"))
    key = functools.partial(json.dumps, sort_keys=True)
    assert sorted(map(key, built)) == sorted(map(key, kserve))
    assert "namespace" not in m.one(built, "ClusterServingRuntime")["metadata"]


def test_every_monitor_matches_its_crd_schema() -> None:
    monitors = [o for o in _objects(MONITORING) if o.get("kind") in MONITOR_KINDS]
    assert sorted(o["kind"] for o in monitors) == sorted(MONITOR_KINDS)
    for obj in monitors:
        assert obj["apiVersion"] == "monitoring.coreos.com/v1", obj["metadata"]["name"]
        crds.validate(obj)


def test_the_validator_reports_a_misspelt_field_and_a_wrong_type(isvc: Obj) -> None:
    bad = copy.deepcopy(isvc)
    model = bad["spec"]["predictor"]["model"]
    model["protocolVersions"] = [model.pop("protocolVersion")]
    bad["spec"]["predictor"]["minReplicas"] = "1"
    found = crds.violations(bad)
    assert found == [
        "spec.predictor.minReplicas: '1' is not of type 'integer'",
        "spec.predictor.model.protocolVersions: unknown field (the API server would drop it); "
        "did you mean protocolVersion?",
    ]
    with pytest.raises(crds.CrdViolations) as raised:
        crds.validate(bad)
    assert "InferenceService tiny does not match serving.kserve.io/v1beta1" in str(raised.value)
    assert all(line in str(raised.value) for line in found)


def test_the_validator_reports_duplicate_ports_metadata_and_unknown_kinds(runtime: Obj) -> None:
    bad = copy.deepcopy(runtime)
    # protocol left out: TCP by default, so this is the same port again.
    _container(bad)["ports"].append({"name": "again", "containerPort": KSERVE_HTTP_PORT})
    bad["metadata"]["labels"]["version"] = 1
    bad["metadata"]["lables"] = {}
    assert crds.violations(bad) == [
        "metadata.labels.version: 1 is not of type 'string'",
        "metadata.lables: unknown field (the API server would drop it); did you mean labels?",
        "spec.containers[0].ports: duplicate key (containerPort=8080, protocol=TCP) in a list "
        "of type map",
    ]
    with pytest.raises(KeyError, match=r"no vendored schema for serving\.kserve\.io/v1 Nope"):
        crds.violations({"apiVersion": "serving.kserve.io/v1", "kind": "Nope"})


def test_vendored_schemas_are_small_and_say_where_they_come_from() -> None:
    files = sorted(crds.CRDS.glob("*.json*"))
    assert {p.name.split(".json")[0] for p in files} == {
        "serving.kserve.io_clusterservingruntimes",
        "serving.kserve.io_inferenceservices",
        "monitoring.coreos.com_servicemonitors",
        "monitoring.coreos.com_podmonitors",
        "keda.sh_scaledobjects",
    }
    assert sum(p.stat().st_size for p in files) < 1_000_000
    readme = (crds.CRDS / "README.md").read_text()
    for api_version, kind in sorted(crds.known_kinds()):
        crd = crds.crd_for(api_version, kind)
        assert re.fullmatch(r"[0-9a-f]{40}", crd.source["commit"]), crd.describe()
        assert crd.source["license"] == "Apache-2.0"
        for field in ("repository", "ref", "commit", "path"):
            assert crd.source[field] in readme, (crd.describe(), field)


# -- KServe's conventions and the server -------------------------------------------------------


def test_the_runtime_serves_tensorflow_and_torchscript_over_v1_v2_and_grpc_v2(
    runtime: Obj,
) -> None:
    spec = runtime["spec"]
    formats = {f["name"] for f in spec["supportedModelFormats"]}
    assert {"tensorflow", "pytorch"} <= formats
    protocols = set(spec["protocolVersions"])
    assert {"v1", "v2", "grpc-v2"} <= protocols <= KSERVE_PROTOCOLS
    # Named explicitly only: never picked for an InferenceService that lets KServe choose.
    assert all(f.get("autoSelect") is False for f in spec["supportedModelFormats"])


def test_the_runtime_container_follows_kserve_conventions(runtime: Obj) -> None:
    container = _container(runtime)
    (deployment,) = m.load(MODEL_DEPLOYMENT.read_text())
    assert container["image"] == m.pod_spec(deployment)["containers"][0]["image"]
    ports = container["ports"]
    # The first port is the predictor Service's port 80; KServe takes a port whose name holds
    # "h2c" (or "grpc") for gRPC and gives it appProtocol kubernetes.io/h2c.
    assert ports[0]["containerPort"] == KSERVE_HTTP_PORT
    assert "h2c" not in ports[0]["name"] and "grpc" not in ports[0]["name"]
    assert [p["name"] for p in ports if p["name"] == "h2c"] == ["h2c"]
    names = {p["name"] for p in ports}
    probes = {
        k: container[k]["httpGet"] for k in ("startupProbe", "readinessProbe", "livenessProbe")
    }
    for kind, probe in probes.items():
        assert probe["port"] in names, kind
    assert probes["readinessProbe"]["path"] == "/v2/health/ready"
    assert probes["readinessProbe"]["port"] == ports[0]["name"]
    assert probes["livenessProbe"]["path"] == probes["startupProbe"]["path"] == "/v2/health/live"
    # The same preStop wait as the model Deployment's, within the pod's default grace of 30 s.
    assert container["lifecycle"] == m.pod_spec(deployment)["containers"][0]["lifecycle"]
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] + ShutdownSettings().grace_s < 30
    assert {v["name"] for v in runtime["spec"]["volumes"]} >= {
        mount["name"] for mount in container["volumeMounts"]
    }


def test_the_runtime_args_parse_with_serve_and_match_its_ports(runtime: Obj, isvc: Obj) -> None:
    # KServe fills the placeholders from the InferenceService's metadata and appends the
    # InferenceService's own args to the runtime's.
    container = _render(_container(runtime), isvc["metadata"])
    args = [*container["args"], *isvc["spec"]["predictor"]["model"].get("args", [])]
    assert container["command"] == ["sharedserve"]
    assert args[0] == "serve"
    params = _serve_params(args[1:])
    assert params["model"] == Path(MODEL_MOUNT)
    assert params["name"] == isvc["metadata"]["name"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert params["rest_port"] == container["ports"][0]["containerPort"]
    assert params["grpc_port"] == ports["h2c"]
    assert params["host"] == "0.0.0.0"


def test_a_mistyped_arg_is_refused_by_the_parse(runtime: Obj) -> None:
    args = _render(_container(runtime), {"name": "tiny"})["args"][1:]
    with pytest.raises(pytest.fail.Exception, match="No such option: --rest-prot"):
        _serve_params([a.replace("--rest-port", "--rest-prot") for a in args])


def test_the_inference_service_names_the_runtime_and_asks_for_a_vgpu(
    runtime: Obj, isvc: Obj
) -> None:
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    # KServe's match (ModelSpec.RuntimeSupportsModel): the format's name, and its version when
    # the InferenceService gives one.
    wanted = model["modelFormat"]
    assert any(
        f["name"] == wanted["name"] and wanted.get("version") in (None, f.get("version"))
        for f in runtime["spec"]["supportedModelFormats"]
    )
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    resources = model["resources"]
    assert resources["limits"][VGPU_RESOURCE] == "1"
    # An extended resource's request, when given, must equal its limit.
    assert resources.get("requests", {}).get(VGPU_RESOURCE, "1") == "1"
    assert model["storageUri"].startswith("pvc://sharedserve-models/")
    # Two container ports: a plain Deployment (Standard, formerly RawDeployment), not Knative.
    mode = isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"]
    assert mode in ("Standard", "RawDeployment")

"""The DRA overlay (k8s/overlays/dra) and `sharedserve k8s render --dra`, checked without a cluster.

Its files, its builds (kubectl's built-in kustomize) and `render --dra`'s output go through
``kubernetes-validate --strict`` against the Kubernetes 1.36 schemas (consumable capacity is beta
there); the driver's flags, host directories, RBAC, DeviceClass and ResourceSlice admission policy
and the model's claim template are asserted on the built objects, and `render --dra` is checked
to give the overlay's model. What cannot run here (no cluster, no GPU): scheduling, the admission
policy's CEL (no API server compiles it here), the driver's registration with a kubelet;
docs/kubernetes.md says what to check on a cluster. The other manifests: test_k8s_manifests.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sharedserve import contract
from sharedserve.cli import app
from sharedserve.errors import ConfigError
from sharedserve.k8s.render import ModelDeployment, render_model, render_model_yaml
from tests.support import manifests as m
from tests.support.manifests import Obj
from tests.support.servers import run_cli

DRA_SOURCE = m.MODEL_SOURCE / "dra"
DRA_PLUGIN_DIR = f"/var/lib/kubelet/plugins/{contract.DRA_DRIVER}"
PLUGINS_REGISTRY = "/var/lib/kubelet/plugins_registry"
CDI_DIR = "/var/run/cdi"
CLUSTER_SCOPED = {
    "Namespace",
    "PriorityClass",
    "ClusterRole",
    "ClusterRoleBinding",
    "DeviceClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def _id(obj: Obj) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


@pytest.fixture(scope="module")
def builds() -> dict[str, list[Obj]]:
    # m.kustomize runs each build once a session: test_k8s_manifests.py builds these too.
    return {directory: m.load(m.kustomize(directory)) for directory in m.DRA_KUSTOMIZATIONS}


def test_dra_manifests_validate_strictly_against_1_36(
    builds: dict[str, list[Obj]], tmp_path: Path
) -> None:
    """The overlay's files and builds, the Component's claim template and `render --dra` of a
    model other than the template's, in one run against 1.36 (m.DRA_KUBERNETES_VERSION)."""
    files = [*m.manifest_files(dra=True), DRA_SOURCE / "resourceclaimtemplate.yaml"]
    assert len(files) == 5
    for directory in m.DRA_KUSTOMIZATIONS:
        path = tmp_path / (directory.replace("/", "_") + ".yaml")
        path.write_text(yaml.safe_dump_all(builds[directory]))
        files.append(path)
        for obj in builds[directory]:
            namespace = obj["metadata"].get("namespace")
            assert namespace == (None if obj["kind"] in CLUSTER_SCOPED else "sharedserve"), obj
    rendered = tmp_path / "resnet50.yaml"
    rendered.write_text(
        render_model_yaml(
            ModelDeployment(
                model="resnet50", image="sharedserve:0.1.0", gpu_memory="3584Mi", replicas=2,
                runtime_class="nvidia", serve_args=("--enable-batching",),
            )
        )
    )  # fmt: skip
    files.append(rendered)
    by_file = m.validate(files, m.DRA_KUBERNETES_VERSION)
    for path in files:
        assert len(by_file[str(path)]) == len(m.load(path.read_text())) > 0, path
    assert len(by_file[str(rendered)]) == 4  # with the management key's Secret


def test_dra_strict_validation_rejects_a_stray_capacity_field(tmp_path: Path) -> None:
    """The control for the test above: 1.36's schema knows a claim's capacity.requests, and
    refuses a field beside it that it does not know."""
    template, _, _ = render_model(ModelDeployment(model="tiny", image="i", gpu_memory="1Gi"))
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    request["exactly"]["capacity"]["limits"] = {"memory": "1Gi"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(template))
    with pytest.raises(AssertionError, match="Additional properties are not allowed"):
        m.validate([path], m.DRA_KUBERNETES_VERSION)


def test_dra_driver(builds: dict[str, list[Obj]]) -> None:
    objects = builds["overlays/dra/driver"]
    # k8s/overlays/dra is its two parts.
    parts = [*objects, *builds["overlays/dra/model"]]
    assert sorted(map(_id, builds["overlays/dra"])) == sorted(map(_id, parts))
    daemonset = m.one(objects, "DaemonSet", "sharedserve-allocator")
    pod = m.pod_spec(daemonset)
    (container,) = pod["containers"]
    args = m.expanded_args(container, objects)
    assert args[:3] == ["allocator", "--api", "dra"]
    # The device plugin's flags are gone with its directory; the driver's name its directories.
    for device_plugin_flag in (
        "--vgpus-per-gpu",
        "--replicas",
        "--policy",
        "--device-plugin-dir",
        "--mps",
    ):
        assert device_plugin_flag not in args
    assert m.flag(args, "--node-name") == "fieldRef:spec.nodeName"
    env = m.container_env(container, objects)
    assert env["NODE_NAME"] == "fieldRef:spec.nodeName"
    assert int(m.flag(args, "--memory-step-mib")) == 256
    assert float(m.flag(args, "--health-interval")) > 0
    # Each directory from the host, read-write, at the path the driver reports to the kubelet
    # and the runtime; nothing else of the host.
    directories = {
        "--dra-plugin-dir": DRA_PLUGIN_DIR,
        "--plugin-registry-dir": PLUGINS_REGISTRY,
        "--cdi-dir": CDI_DIR,
    }
    for flag, path in directories.items():
        assert m.flag(args, flag) == path
        mount, volume = m.mount_of(container, pod, path)
        assert mount["mountPath"] == path and not mount.get("readOnly"), path
        assert volume["hostPath"]["path"] == path
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == set(directories.values())
    assert m.DEVICE_PLUGINS not in json.dumps(daemonset)
    # One driver pod per node at any time: two would serve the same sockets and slice.
    assert daemonset["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }
    # The API as its own ServiceAccount, bound to exactly what it does.
    account = m.one(objects, "ServiceAccount", pod["serviceAccountName"])
    assert pod["automountServiceAccountToken"] is True
    binding = m.one(objects, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "sharedserve"}
    ]
    role = m.one(objects, "ClusterRole", binding["roleRef"]["name"])
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        ("resource.k8s.io", "resourceslices", "create"),
        ("resource.k8s.io", "resourceslices", "update"),
        ("resource.k8s.io", "resourceslices", "delete"),
        ("resource.k8s.io", "resourceclaims", "get"),
    }
    # The DeviceClass that claims name selects this driver's devices.
    device_class = m.one(objects, "DeviceClass", contract.DRA_DRIVER)
    (selector,) = device_class["spec"]["selectors"]
    assert selector["cel"]["expression"] == f'device.driver == "{contract.DRA_DRIVER}"'
    # Metrics and privileges are the base's (test_k8s_manifests.py's test_allocator_daemonset).
    assert m.container_port(container, "metrics") == int(m.flag(args, "--metrics-port"))
    assert m.selects(m.one(objects, "Service", "sharedserve-allocator-metrics"), daemonset)
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_dra_resourceslice_policy(builds: dict[str, list[Obj]]) -> None:
    """Its CEL cannot be compiled here (no API server); what it compares can be read."""
    objects = builds["overlays/dra/driver"]
    policy = m.one(objects, "ValidatingAdmissionPolicy")
    binding = m.one(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.k8s.io"] and rule["resources"] == ["resourceslices"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    # Only the driver's ServiceAccount, by the name the DaemonSet runs as.
    account = m.pod_spec(m.one(objects, "DaemonSet"))["serviceAccountName"]
    (condition,) = spec["matchConditions"]
    assert f'endsWith(":{account}")' in condition["expression"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert "authentication.kubernetes.io/node-name" in variables["requesterNode"]
    assert "oldObject" in variables["slice"]  # DELETE carries the old object only
    expressions = [v["expression"] for v in spec["validations"]]
    assert any("spec.?nodeName" in e and "variables.requesterNode" in e for e in expressions), (
        expressions
    )
    assert any(f'spec.driver == "{contract.DRA_DRIVER}"' in e for e in expressions), expressions
    assert any(e == 'variables.requesterNode != ""' for e in expressions), expressions


def test_dra_model(builds: dict[str, list[Obj]]) -> None:
    objects = builds["overlays/dra"]
    deployment = m.one(objects, "Deployment", "tiny")
    pod = m.pod_spec(deployment)
    (container,) = pod["containers"]
    (claim,) = pod["resourceClaims"]
    assert container["resources"]["claims"] == [{"name": claim["name"]}]
    for kind in ("requests", "limits"):
        assert contract.VGPU_RESOURCE not in container["resources"][kind]
    template = m.one(objects, "ResourceClaimTemplate", claim["resourceClaimTemplateName"])
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    # 6Gi of one GPU's memory, from the class this overlay installs.
    assert request["exactly"] == {
        "deviceClassName": m.one(objects, "DeviceClass")["metadata"]["name"],
        "capacity": {"requests": {contract.DRA_MEMORY: "6Gi"}},
    }
    assert request["exactly"]["deviceClassName"] == contract.DRA_DRIVER


def test_dra_render_is_the_overlays_model(builds: dict[str, list[Obj]]) -> None:
    """`k8s/overlays/dra/model` (the Component over k8s/base/model) and `render --dra` agree:
    rendering tiny as the overlay does, with the Secret the overlay generates, gives the
    overlay's objects."""
    secret = m.one(builds["overlays/dra/model"], "Secret")["metadata"]["name"]
    result = run_cli(
        "k8s", "render", "--model", "tiny", "--image", "sharedserve:0.1.0",
        "--dra", "--gpu-memory", "6Gi", "--admin-secret", secret,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rendered = m.load(result.stdout)
    assert [o["kind"] for o in rendered] == ["ResourceClaimTemplate", "Deployment", "Service"]
    built = {_id(o): o for o in builds["overlays/dra/model"]}
    for obj in rendered:
        assert obj == built[_id(obj)], obj["kind"]


SPEC_ARGS = ["--spec", "{spec}", "--gpu-memory-mib", "16384"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--model", "tiny", "--gpu-memory", "6Gi"], "give --dra with it"),
        (["--model", "tiny", "--dra"], "--dra --model needs --gpu-memory"),
        (["--model", "tiny", "--dra", "--gpu-memory", "6Gi", "--vgpu", "2"], "--dra with --vgpu"),
        (["--model", "tiny", "--dra", "--gpu-memory", "6GB"], "not a Kubernetes quantity"),
        (["--model", "tiny", "--dra", "--gpu-memory", "512m"], "did you mean Mi"),
        (["--model", "tiny", "--dra", "--gpu-memory", "-1Gi"], "--gpu-memory must be positive"),
        ([*SPEC_ARGS, "--dra", "--gpu-memory", "6Gi"], "--dra --spec with --gpu-memory"),
        ([*SPEC_ARGS, "--dra", "--vgpus-per-gpu", "8"], "the DRA driver cuts no vGPUs"),
        (["--spec", "{spec}", "--dra"], "--spec needs --gpu-memory-mib"),
    ],
)
def test_render_dra_usage_errors(tmp_path: Path, args: list[str], fragment: str) -> None:
    # In process: these are refused before the spec is read; test_k8s_manifests.py's
    # test_render_usage_error_exits_2 checks that a ConfigError reaches the user as exit status 2.
    spec = str(tmp_path / "pack.yaml")
    given = [spec if a == "{spec}" else a for a in args]
    result = CliRunner().invoke(app, ["k8s", "render", "--image", "i", *given])
    assert isinstance(result.exception, ConfigError), result.output
    assert fragment in result.exception.message


@pytest.mark.tensorflow
def test_render_spec_dra_claims_the_planned_memory(models_dir: Path, tmp_path: Path) -> None:
    spec = m.write_spec(tmp_path / "pack.yaml", models_dir)
    out = tmp_path / "mix.yaml"
    result = run_cli(
        "k8s", "render", "--spec", str(spec), "--image", "sharedserve:0.1.0", "--dra",
        "--gpu-memory-mib", "16384", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    objects = m.load(out.read_text())
    # Each model's claim template, Deployment and Service, and the management key's Secret.
    assert len(m.validate([out], m.DRA_KUBERNETES_VERSION)[str(out)]) == len(objects) == 7
    deployments = m.deployments_by_name(objects)
    # The plan of test_render_spec_validates_and_sizes_pods_from_the_plan (test_k8s_manifests.py),
    # claimed as it is: tiny's 3522 MiB cap and edge-b's 3000 MiB, each with the 704 MiB reserve;
    # no vGPUs.
    expected = {"tiny": "4226Mi", "edge-b": "3704Mi"}
    for name, memory in expected.items():
        pod = m.pod_spec(deployments[name])
        (container,) = pod["containers"]
        assert contract.VGPU_RESOURCE not in container["resources"]["limits"], name
        (claim,) = pod["resourceClaims"]
        template = m.one(objects, "ResourceClaimTemplate", claim["resourceClaimTemplateName"])
        (request,) = template["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"]["capacity"]["requests"] == {"memory": memory}, name
    text = out.read_text()
    counted = "2 models in 2 Deployments, 4 pods, 16382 MiB of GPU memory (1.0 GPUs' worth)"
    assert counted in m.header(text)
    assert "# tiny: 3 pods x 4226 MiB of GPU memory; planned cap 3522 MiB + 704 MiB" in text

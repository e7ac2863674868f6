"""``sharedserve k8s render``'s pure parts: the model objects, quantities and the YAML writer."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import yaml

from sharedserve import contract
from sharedserve.errors import ConfigError
from sharedserve.k8s.admin import ADMIN_KEY_DIGEST, ADMIN_SECRET
from sharedserve.k8s.render import (
    ModelDeployment,
    check_serve_args,
    render_model,
    render_model_yaml,
)
from sharedserve.quantity import parse_cpu, parse_memory, parse_quantity


def _server(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = objects[0]
    assert deployment["kind"] == "Deployment"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_tiny_defaults() -> None:
    deployment, service = render_model(ModelDeployment(model="tiny", image="sharedserve:0.1.0"))
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "tiny"
    assert deployment["metadata"]["namespace"] == "sharedserve"
    container = _server([deployment, service])
    assert container["command"] == ["sharedserve"]
    assert container["args"][:5] == ["serve", "--model", "/models/tiny", "--name", "tiny"]
    limits = container["resources"]["limits"]
    assert limits == {"cpu": "500m", "memory": "2Gi", "sharedserve.io/vgpu": "1"}
    assert container["resources"]["requests"] == limits
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/live"
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    pod = deployment["spec"]["template"]["spec"]
    assert "runtimeClassName" not in pod
    (models,) = [v for v in pod["volumes"] if v["name"] == "models"]
    assert models["persistentVolumeClaim"] == {"claimName": "sharedserve-models", "readOnly": True}
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports == {"http": 8501, "grpc": 8500}
    assert service["spec"]["selector"].items() <= pod_labels(deployment).items()


def pod_labels(deployment: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def test_flags_reach_the_objects() -> None:
    spec = ModelDeployment(
        model="mobilenet_v2",
        image="registry.example:5000/team/sharedserve:0.1.0",
        vgpu=2,
        cpu="1.5",
        memory="3Gi",
        model_pvc="my-models",
        namespace="inference",
        replicas=3,
        runtime_class="nvidia",
    )
    deployment, service = render_model(spec)
    # Model names may hold "_"; Kubernetes names may not.
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "mobilenet-v2"
    assert deployment["metadata"]["namespace"] == service["metadata"]["namespace"] == "inference"
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    container = _server([deployment, service])
    assert container["image"] == "registry.example:5000/team/sharedserve:0.1.0"
    assert container["resources"]["limits"] == {
        "cpu": "1.5",
        "memory": "3Gi",
        "sharedserve.io/vgpu": "2",
    }
    assert "/models/mobilenet_v2" in container["args"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    (models,) = [v for v in pod["volumes"] if v["name"] == "models"]
    assert models["persistentVolumeClaim"]["claimName"] == "my-models"


def test_explicit_name_for_replicas_of_one_model() -> None:
    deployment, _ = render_model(ModelDeployment(model="tiny", image="img", name="tiny-3"))
    assert deployment["metadata"]["name"] == "tiny-3"
    labels = pod_labels(deployment)
    assert labels["app.kubernetes.io/instance"] == "tiny-3"
    assert labels["sharedserve.io/model"] == "tiny"
    assert _server([deployment])["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"model": "bad/name"}, "--model"),
        ({"model": "-tiny"}, "--model"),
        ({"model": "x" * 64}, "--model"),
        ({"model": "9lives"}, "pass --name"),
        ({"name": "Tiny"}, "--name"),
        ({"image": "has space"}, "--image"),
        ({"image": ""}, "--image"),
        ({"vgpu": 0}, "--vgpu"),
        ({"replicas": 0}, "--replicas"),
        ({"cpu": "half"}, "not a Kubernetes quantity"),
        ({"cpu": "0"}, "positive"),
        ({"cpu": "0.0005"}, "finer than 1m"),
        ({"memory": "500m"}, "did you mean Mi"),
        ({"memory": "2GB"}, "not a Kubernetes quantity"),
        ({"model_pvc": "Models"}, "--model-pvc"),
        ({"namespace": "a.b"}, "--namespace"),
        ({"runtime_class": "NVIDIA"}, "--runtime-class"),
        ({"admin_secret": "Admin"}, "--admin-secret 'Admin' is not a valid Secret name"),
        ({"gpu_memory": "6GB"}, "--gpu-memory '6GB' is not a Kubernetes quantity"),
        ({"gpu_memory": "512m"}, "did you mean Mi"),
        ({"gpu_memory": "0"}, "--gpu-memory must be positive"),
        ({"gpu_memory": "6Gi", "vgpu": 2}, "--vgpu with --dra"),
    ],
)
def test_invalid_values_are_config_errors(changes: dict[str, Any], fragment: str) -> None:
    fields: dict[str, Any] = {"model": "tiny", "image": "sharedserve:0.1.0", **changes}
    with pytest.raises(ConfigError) as info:
        render_model(ModelDeployment(**fields))
    assert fragment in info.value.message


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("0.5", Decimal("0.5")),
        ("2", Decimal(2)),
        (".25", Decimal("0.25")),
        ("1k", Decimal(1000)),
        ("2Gi", Decimal(2 * 1024**3)),
        ("512Mi", Decimal(512 * 1024**2)),
        ("1e3", Decimal(1000)),
        ("1.5E-3", Decimal("0.0015")),
        ("+3M", Decimal(3_000_000)),
    ],
)
def test_quantities(text: str, value: Decimal) -> None:
    assert parse_quantity(text, "--x") == value


@pytest.mark.parametrize("text", ["", "m", "1.2.3", "1 Gi", "1gi", "1Ki2", "0x10", "--1"])
def test_not_quantities(text: str) -> None:
    with pytest.raises(ConfigError, match="not a Kubernetes quantity"):
        parse_quantity(text, "--x")


def test_cpu_and_memory_rules() -> None:
    assert parse_cpu("1m") == Decimal("0.001")
    assert parse_memory("1") == 1
    with pytest.raises(ConfigError, match="positive"):
        parse_memory("-1Gi")
    with pytest.raises(ConfigError, match="finer than 1m"):
        parse_cpu("0.0015")


def test_dra_mode_claims_gpu_memory_instead_of_vgpus() -> None:
    spec = ModelDeployment(
        model="mobilenet_v2",
        image="sharedserve:0.1.0",
        gpu_memory="3584Mi",
        replicas=2,
        namespace="inference",
        runtime_class="nvidia",
    )
    template, deployment, service = render_model(spec)
    assert (template["kind"], deployment["kind"], service["kind"]) == (
        "ResourceClaimTemplate",
        "Deployment",
        "Service",
    )
    assert template["metadata"] == {
        "name": "mobilenet-v2-gpu",
        "namespace": "inference",
        "labels": deployment["metadata"]["labels"],
    }
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {
        "deviceClassName": contract.DRA_DRIVER,
        "capacity": {"requests": {contract.DRA_MEMORY: "3584Mi"}},
    }
    pod = deployment["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    (claim,) = pod["resourceClaims"]
    assert claim == {"name": "gpu", "resourceClaimTemplateName": "mobilenet-v2-gpu"}
    container = _server([deployment])
    # No vGPU: CPU and memory as before, and the pod's claim.
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "2Gi"},
        "limits": {"cpu": "500m", "memory": "2Gi"},
        "claims": [{"name": "gpu"}],
    }
    # The rest is the device-plugin render's.
    plain, _ = render_model(
        ModelDeployment(
            model="mobilenet_v2",
            image="sharedserve:0.1.0",
            replicas=2,
            namespace="inference",
            runtime_class="nvidia",
        )
    )
    plain_pod = plain["spec"]["template"]["spec"]
    assert {k: v for k, v in pod.items() if k not in ("resourceClaims", "containers")} == {
        k: v for k, v in plain_pod.items() if k != "containers"
    }
    plain_container = plain_pod["containers"][0]
    assert {k: v for k, v in container.items() if k != "resources"} == {
        k: v for k, v in plain_container.items() if k != "resources"
    }


def test_yaml_round_trips_the_render() -> None:
    for spec in (
        ModelDeployment(model="tiny", image="sharedserve:0.1.0"),
        ModelDeployment(model="resnet50", image="r.example/s:1", runtime_class="nvidia"),
        ModelDeployment(model="resnet50", image="r.example/s:1", gpu_memory="6Gi"),
    ):
        text = render_model_yaml(spec, admin_secret=False)
        assert text.startswith("# Model ")
        assert list(yaml.safe_load_all(text)) == render_model(spec)
        # By default, after a Secret with a new key; the pods marked with its digest only.
        secret, *objects = yaml.safe_load_all(render_model_yaml(spec))
        assert secret["kind"] == "Secret" and secret["metadata"]["name"] == ADMIN_SECRET
        for obj in objects:
            if obj["kind"] == "Deployment":
                del obj["spec"]["template"]["metadata"]["annotations"][ADMIN_KEY_DIGEST]
        assert objects == render_model(spec)


def test_the_pods_read_their_key_from_the_secret() -> None:
    deployment, _ = render_model(ModelDeployment(model="tiny", image="i", admin_secret="mine"))
    pod = deployment["spec"]["template"]["spec"]
    container = _server([deployment])
    at = container["args"].index("--admin-key-file")
    key_file = container["args"][at + 1]
    (mount,) = [m for m in container["volumeMounts"] if key_file.startswith(m["mountPath"])]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "mine" and mount["readOnly"] is True


@pytest.mark.parametrize("option", ["--admin-key-file", "--admin-key-file=/k"])
def test_render_owns_the_key_file_not_the_header(option: str) -> None:
    with pytest.raises(ConfigError, match="the management key's file from its Secret"):
        check_serve_args([option, "/k"])
    # The header is the user's to name: the manifests do not depend on it.
    check_serve_args(["--admin-header", "x-admin"])

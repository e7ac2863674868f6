"""The examples deploy what they plan: ``examples/fleet-500`` and the README's
``examples/fleet.yaml``, sized from the committed CPU profiles, write a ``k8s.yaml`` whose pods
ask for the plan's GPUs' worth (within 2%), fit each planned GPU, carry a rule wherever the plan
put a model's replicas on different GPUs, and whose header counts what ``plan.md`` and
``plan.html`` count.

The models' files are stand-ins of the sizes ``models build`` writes (a CPU profile's memory is
its files on disk, so their size is all the plan reads of them): sizing needs no TensorFlow.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from sharedserve.size.plan import kubernetes_summary, read_plan
from sharedserve.size.run import plan_fleet

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PROFILES = EXAMPLES / "fleet-500" / "profiles"
# Bytes on disk of each model as `sharedserve models build` writes it (its version directory).
BUILT = {"tiny": 43_536, "mobilenet_v2": 15_702_885, "resnet50": 104_491_474}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    for name, size in BUILT.items():
        version = root / name / "1"
        version.mkdir(parents=True)
        (version / "saved_model.pb").write_bytes(b"\0")
        with (version / "weights.bin").open("wb") as f:
            f.truncate(size - 1)  # sparse: the size is what counts
    return root


def sized(fleet: str, models: Path, out: Path) -> dict[str, Any]:
    """Plan ``fleet`` (its text; profiles and models made absolute) into ``out``."""
    text = fleet.replace("profile: profiles/", f"profile: {PROFILES}/")
    text = text.replace("profile: ../profiles/", f"profile: {PROFILES}/")
    text = text.replace("model: ../../models/", f"model: {models}/")
    text = text.replace("model: ../models/", f"model: {models}/")
    out.mkdir()
    (out / "fleet.yaml").write_text(text)
    plan_fleet(out / "fleet.yaml", out / "plan")
    return json.loads((out / "plan" / "plan.json").read_text())


def check_deploys_the_plan(plan: dict[str, Any], out: Path) -> None:
    kube = plan["kubernetes"]
    per_gpu, vgpu_mib = kube["vgpus_per_gpu"], kube["vgpu_memory_mib"]
    objects = [o for o in yaml.safe_load_all((out / "k8s.yaml").read_text()) if o]
    deployments = {o["metadata"]["labels"]["sharedserve.io/model"]: o
                   for o in objects if o["kind"] == "Deployment"}  # fmt: skip
    vgpus = {}
    for name, d in deployments.items():
        (container,) = d["spec"]["template"]["spec"]["containers"]
        vgpus[name] = int(container["resources"]["limits"]["sharedserve.io/vgpu"])
    # The GPUs' worth the pods ask for, from the manifests themselves, within 2% of the plan.
    worth = sum(vgpus[n] * d["spec"]["replicas"] for n, d in deployments.items()) / per_gpu
    assert worth == pytest.approx(kube["gpus_worth"], abs=0.01)
    assert abs(worth - plan["gpu_count"]) <= 0.02 * plan["gpu_count"], (worth, plan["gpu_count"])
    assert not [w for w in plan["warnings"] if w.startswith("k8s.yaml")]
    # Every pod holds its memory and reserve; every planned GPU's pods fit its vGPUs.
    reserve = plan["context_reserve_mib"]
    mib = {m["name"]: m["gpu_memory_mib"] for m in plan["models"] if m["server"] is None}
    mib |= {s["name"]: s["gpu_memory_mib"] for s in plan["servers"]}
    assert all(vgpus[n] * vgpu_mib >= mib[n] + reserve for n in deployments)
    servers = {s["name"]: len(s["models"]) for s in plan["servers"]}
    for gpu in plan["gpus"]:
        pods = Counter(r["server"] or r["model"] for r in gpu["replicas"])
        taken = sum(vgpus[n] * (k // servers.get(n, 1)) for n, k in pods.items())
        assert taken <= per_gpu, gpu["index"]
    # Every Deployment the plan put on different GPUs carries its rule: anti-affinity over
    # nodes where each pod has a node of its own, else a spread over nodes.
    nodes = {g["index"]: g["node"] for g in plan["gpus"]}
    placed = {m["name"]: m["gpus"] for m in plan["models"] if m["server"] is None}
    placed |= {s["name"]: s["gpus"] for s in plan["servers"]}
    spread = 0
    for name, gpus in placed.items():
        pod = deployments[name]["spec"]["template"]["spec"]
        on = [nodes[g] for g in gpus]
        if len(set(gpus)) < 2:
            assert "affinity" not in pod and "topologySpreadConstraints" not in pod
        elif len(set(on)) == len(on):
            anti = pod["affinity"]["podAntiAffinity"]
            (rule,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
            assert rule["topologyKey"] == "kubernetes.io/hostname"
            spread += 1
        else:
            (rule,) = pod["topologySpreadConstraints"]
            assert rule["topologyKey"] == "kubernetes.io/hostname"
            spread += 1
    assert kube["spread"] == spread
    # One account of what it holds, in the manifests' header, plan.md and plan.html alike.
    assert kube["deployments"] == len(deployments)
    assert kube["pods"] == sum(d["spec"]["replicas"] for d in deployments.values())
    summary = kubernetes_summary(read_plan(out / "plan.json"))
    header = " ".join(
        line[2:] for line in (out / "k8s.yaml").read_text().split("---")[0].splitlines()
    )
    assert summary in header
    assert summary in (out / "plan.md").read_text()
    page = (out / "plan.html").read_text().replace("<code>", "`").replace("</code>", "`")
    assert summary in html.unescape(page)


def test_the_500_model_example_deploys_what_it_plans(models: Path, tmp_path: Path) -> None:
    plan = sized((EXAMPLES / "fleet-500" / "fleet.yaml").read_text(), models, tmp_path / "500")
    assert len(plan["models"]) == 500 and plan["servers"]
    check_deploys_the_plan(plan, tmp_path / "500" / "plan")
    # As README.md ("Sizing a fleet") quotes them.
    assert (plan["gpu_count"], round(plan["kubernetes"]["gpus_worth"], 1)) == (484, 483.2)
    summary = kubernetes_summary(read_plan(tmp_path / "500" / "plan" / "plan.json"))
    deployments = 500 - sum(len(s["models"]) for s in plan["servers"]) + len(plan["servers"])
    assert summary.startswith(f"500 models in {deployments} Deployments (")


def test_the_readme_example_shows_a_shared_server_and_deploys_what_it_plans(
    models: Path, tmp_path: Path
) -> None:
    # The README profiles tiny and mobilenet_v2 on its reader's machine; the committed CPU
    # profiles of the same models stand in for them.
    plan = sized((EXAMPLES / "fleet.yaml").read_text(), models, tmp_path / "small")
    (server,) = plan["servers"]
    assert len(server["models"]) >= 2
    assert {m["name"] for m in plan["models"] if m["serving"] == "shared"} == set(server["models"])
    check_deploys_the_plan(plan, tmp_path / "small" / "plan")
    assert plan["kubernetes"]["gpus_worth"] == plan["gpu_count"] == 3  # as README.md says
    text = (tmp_path / "small" / "plan" / "k8s.yaml").read_text()
    assert f"a shared server: each pod serves {', '.join(server['models'])}" in text


def test_with_dra_the_500_model_example_claims_the_plans_compute(
    models: Path, tmp_path: Path
) -> None:
    fleet = (EXAMPLES / "fleet-500" / "fleet.yaml").read_text() + "kubernetes: {dra: true}\n"
    plan = sized(fleet, models, tmp_path / "dra")
    kube = plan["kubernetes"]
    objects = [o for o in yaml.safe_load_all((tmp_path / "dra" / "plan" / "k8s.yaml").read_text())
               if o]  # fmt: skip
    pods = {o["metadata"]["name"]: o["spec"]["replicas"] for o in objects
            if o["kind"] == "Deployment"}  # fmt: skip
    compute = 0
    for o in objects:
        if o["kind"] == "ResourceClaimTemplate":
            (request,) = o["spec"]["spec"]["devices"]["requests"]
            capacity = request["exactly"]["capacity"]["requests"]
            assert set(capacity) == {"memory", "compute"}
            compute += int(capacity["compute"]) * pods[o["metadata"]["name"].removesuffix("-gpu")]
    assert compute == kube["compute_percent"]
    assert abs(compute / 100 - plan["gpu_count"]) <= 0.02 * plan["gpu_count"]

"""The plan's Kubernetes manifests: ``k8s render --spec``'s renderer, each pod asking for the
share of a GPU its replica was planned at (vGPUs, or DRA claims for memory and compute), and
kept apart where the plan put replicas apart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from sharedserve.errors import ConfigError
from sharedserve.size.fleet import parse_fleet
from sharedserve.size.manifests import plan_manifests
from sharedserve.size.plan import Plan, read_plan

GOLDEN = Path(__file__).parents[2] / "data" / "plan" / "expected" / "plan.json"


def fleet(**kubernetes: Any) -> Any:
    data = {
        "gpu": {"name": "L4", "memory_mib": 24000, "price_per_hour": 0.8},
        "node": {"gpus": 2, "cpu_cores": 32},
        "context_reserve_mib": 500,
        "models": [{"name": "m", "profile": "p.json", "peak_qps": 1, "slo_p99_ms": 9}],
    }
    if kubernetes:
        data["kubernetes"] = kubernetes
    return parse_fleet(data, base_dir=Path("."))


def plan_of(models: dict[str, dict[str, Any]], gpus: list[tuple[int, list[str]]]) -> Plan:
    """A plan of ``models`` (name -> the figures manifests read) on ``gpus`` ((node, the models
    of its replicas) each), the rest the golden plan's."""
    golden = read_plan(GOLDEN)
    model, gpu = golden.models[0], golden.gpus[0]
    on = {name: [i for i, (_, held) in enumerate(gpus) for m in held if m == name]
          for name in models}  # fmt: skip
    return replace(
        golden,
        gpu_count=len(gpus),
        models=[replace(model, name=n, replicas=len(on[n]), gpus=on[n], **m)
                for n, m in models.items()],
        servers=[],
        gpus=[replace(gpu, index=i, node=node,
                      replicas=[replace(gpu.replicas[0], model=m, server=None) for m in held])
              for i, (node, held) in enumerate(gpus)],
    )  # fmt: skip


# Two GPUs on two nodes: GPU 0 holds big and small x3, GPU 1 big and small. big is memory-bound
# (6,000 MiB with its reserve: a quarter of the GPU), Small_1 busy-bound (0.1 of the GPU's time,
# an eighth of the 80% target; 1,500 MiB of memory).
MODELS = {
    "big": {"gpu_memory_mib": 5499.5, "busy_share": 0.05, "cpu_limit": 2.0},
    "Small_1": {"gpu_memory_mib": 1000.0, "busy_share": 0.1, "cpu_limit": None},
}
PLAN = plan_of(MODELS, [(0, ["big", "Small_1", "Small_1", "Small_1"]), (1, ["big", "Small_1"])])


def deployments(text: str) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"]: o
        for o in yaml.safe_load_all(text)
        if o and o["kind"] == "Deployment"
    }


def asked(text: str) -> dict[str, tuple[int, int, str]]:
    """Deployment name -> (pods, vGPUs per pod, CPU limit)."""
    out = {}
    for name, o in deployments(text).items():
        (c,) = o["spec"]["template"]["spec"]["containers"]
        limits = c["resources"]["limits"]
        out[name] = (o["spec"]["replicas"], int(limits["sharedserve.io/vgpu"]), str(limits["cpu"]))
    return out


def test_pods_ask_for_their_planned_share_and_the_plans_gpus_worth() -> None:
    manifests = plan_manifests(PLAN, fleet(), {"big": "resnet50"})
    kube = manifests.kubernetes
    # At --vgpus-per-gpu 4 (6,000 MiB vGPUs) big's memory takes 1 vGPU and so does each small
    # pod (an eighth of the target, under a quarter): GPU 0's four pods fill its 4 vGPUs.
    assert (kube.vgpus_per_gpu, kube.vgpu_memory_mib) == (4, 6000)
    assert kube.allocator_flag == "--vgpus-per-gpu 4" and manifests.unfit == []
    # Names made Kubernetes names; CPU from the profile's limit, else render's default.
    assert asked(manifests.text) == {"big": (2, 1, "2"), "small-1": (4, 1, "500m")}
    assert (kube.vgpus, kube.deployments, kube.pods) == (6, 2, 6)
    assert kube.gpus_worth == 1.5  # GPU 1 keeps room the plan left: no Deployment can use it
    header = " ".join(line.lstrip("# ") for line in manifests.text.split("---")[0].splitlines())
    assert "--vgpus-per-gpu 4" in header and "the fleet plan" in header
    assert "2 models in 2 Deployments, 6 pods" in header
    assert "1.5 GPUs' worth against the plan's 2 GPUs" in header
    # The model's directory on the volume where its files are known, else its name.
    assert "/models/resnet50" in manifests.text and "/models/Small_1" in manifests.text


def test_room_on_a_gpu_goes_to_its_pods() -> None:
    # One GPU each: a busy model (0.4 of the target) beside a memory one (a quarter of the GPU).
    models = {
        "busy": {"gpu_memory_mib": 100.0, "busy_share": 0.32, "cpu_limit": None},
        "held": {"gpu_memory_mib": 5500.0, "busy_share": 0.0, "cpu_limit": None},
    }
    plan = plan_of(models, [(0, ["busy", "held"]), (1, ["busy", "held"])])
    manifests = plan_manifests(plan, fleet(vgpus_per_gpu=20), {})
    # 0.4 and 0.25 of a GPU (8 and 5 of 20 vGPUs) leave 7 vGPUs a GPU, shared out in proportion.
    pods = asked(manifests.text)
    assert pods["busy"][1] >= 8 and pods["held"][1] >= 5
    assert pods["busy"][1] + pods["held"][1] == 20
    assert manifests.kubernetes.gpus_worth == 2.0 and manifests.kubernetes.under_share == 0


def test_a_given_cut_too_coarse_is_reported() -> None:
    manifests = plan_manifests(PLAN, fleet(vgpu_memory_mib=1000), {})
    # 6,000 MiB is 6 vGPUs of 1,000: big's memory, never rounded down.
    assert asked(manifests.text)["big"][1] >= 6 and manifests.unfit == []
    manifests = plan_manifests(PLAN, fleet(vgpus_per_gpu=3), {})
    assert manifests.unfit == ["GPU 0 (4 vGPUs)"]
    with pytest.raises(ConfigError, match="more than the GPU's 24000 MiB"):
        plan_manifests(PLAN, fleet(vgpu_memory_mib=30000), {})


def test_replicas_the_plan_put_apart_are_kept_apart() -> None:
    models = {n: {"gpu_memory_mib": 100.0, "busy_share": 0.1, "cpu_limit": None}
              for n in ("nodes", "gpus", "one")}  # fmt: skip
    plan = plan_of(models, [(0, ["nodes", "gpus", "one", "one"]), (0, ["gpus"]), (1, ["nodes"])])
    pods = {n: d["spec"]["template"]["spec"]
            for n, d in deployments(plan_manifests(plan, fleet(), {}).text).items()}  # fmt: skip
    # Each on a node of its own: required anti-affinity over nodes.
    (rule,) = pods["nodes"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert rule["topologyKey"] == "kubernetes.io/hostname"
    assert rule["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "nodes"
    # On two GPUs of one node: a spread over nodes the scheduler prefers, not one it must keep.
    (spread,) = pods["gpus"]["topologySpreadConstraints"]
    assert (spread["whenUnsatisfiable"], spread["maxSkew"]) == ("ScheduleAnyway", 1)
    # Both replicas on one GPU: nothing to keep apart.
    assert "affinity" not in pods["one"] and "topologySpreadConstraints" not in pods["one"]
    assert plan_manifests(plan, fleet(), {}).kubernetes.spread == 2


def test_with_dra_claims_ask_for_memory_and_compute() -> None:
    manifests = plan_manifests(PLAN, fleet(dra=True), {})
    kube = manifests.kubernetes
    assert kube.allocator_flag == "--api dra" and kube.vgpus is None
    templates = {
        o["metadata"]["name"]: o["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        for o in yaml.safe_load_all(manifests.text)
        if o and o["kind"] == "ResourceClaimTemplate"
    }
    big = templates["big-gpu"]["capacity"]["requests"]
    small = templates["small-1-gpu"]["capacity"]["requests"]
    assert big["memory"] == "6000Mi" and small["memory"] == "1500Mi"
    # Small_1's busy share is 12.5% of the target; GPU 0's three and big's fill its 100.
    assert int(small["compute"]) >= 13 and int(big["compute"]) + 3 * int(small["compute"]) <= 100
    assert kube.memory_mib == 2 * 6000 + 4 * 1500
    assert kube.compute_percent == 2 * int(big["compute"]) + 4 * int(small["compute"])
    with pytest.raises(ConfigError, match="give dra or a vGPU cut"):
        fleet(dra=True, vgpus_per_gpu=4)


def test_a_name_kubernetes_refuses_names_the_model() -> None:
    plan = plan_of({"-bad": {"gpu_memory_mib": 10, "busy_share": 0.1, "cpu_limit": None}},
                   [(0, ["-bad"])])  # fmt: skip
    with pytest.raises(ConfigError, match="fleet model -bad: --model '-bad'"):
        plan_manifests(plan, fleet(), {})


def test_the_plan_holds_no_key_and_says_how_to_make_the_secret() -> None:
    """A plan is kept and compared: its pods read the Secret render would emit, which it does
    not hold (a new key each run would make every plan differ)."""
    text = plan_manifests(PLAN, fleet(namespace="ml"), {}).text
    objects = [o for o in yaml.safe_load_all(text) if o]
    assert "Secret" not in {o["kind"] for o in objects}
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if "secret" in v]
        assert volume["secret"]["secretName"] == "sharedserve-admin"
        assert "--admin-key-file" in pod["containers"][0]["args"]
    assert "kubectl -n ml create secret generic sharedserve-admin" in text.split("---")[0]


def test_pods_bound_by_memory_beside_pods_bound_by_time_leave_one_under_its_busy_share() -> None:
    # A vGPU counts one figure a pod: 0.75 of the GPU's memory beside 0.75 of its time (over the
    # target) take 1.5 GPUs' worth of vGPUs. Memory is kept; the busy pod asks under its share.
    models = {
        "weights": {"gpu_memory_mib": 17500.0, "busy_share": 0.04, "cpu_limit": None},
        "busy": {"gpu_memory_mib": 100.0, "busy_share": 0.6, "cpu_limit": None},
    }
    plan = plan_of(models, [(0, ["weights", "busy"]), (1, ["weights", "busy"])])
    kube = plan_manifests(plan, fleet(), {}).kubernetes
    assert kube.under_share > 0.2
    # DRA claims count memory and compute apart: the busy pod gets its 75% of the GPU's time.
    manifests = plan_manifests(plan, fleet(dra=True), {})
    assert manifests.kubernetes.under_share == 0
    (busy,) = [
        o["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]
        for o in yaml.safe_load_all(manifests.text)
        if o and o["kind"] == "ResourceClaimTemplate" and o["metadata"]["name"] == "busy-gpu"
    ]
    assert int(busy["compute"]) >= 75


def test_memory_no_cut_holds_takes_the_finest_and_says_so() -> None:
    # 7,501 and 16,499 MiB with their reserves fill 24,000 MiB to the MiB: whole vGPUs of any cut
    # up to 100 round one of them past the GPU. Memory is never rounded down; the GPU is named.
    models = {
        "a": {"gpu_memory_mib": 7001.0, "busy_share": 0.01, "cpu_limit": None},
        "b": {"gpu_memory_mib": 15999.0, "busy_share": 0.01, "cpu_limit": None},
    }
    manifests = plan_manifests(plan_of(models, [(0, ["a", "b"])]), fleet(), {})
    kube = manifests.kubernetes
    assert kube.vgpus_per_gpu == 100 and kube.vgpu_memory_mib == 240
    pods = asked(manifests.text)
    assert pods["a"][1] * 240 >= 7501 and pods["b"][1] * 240 >= 16499
    assert manifests.unfit == [f"GPU 0 ({pods['a'][1] + pods['b'][1]} vGPUs)"]

"""The plan's Kubernetes manifests: ``k8s render --spec``'s renderer, sized from the plan, under
a cut of the GPU that holds every planned GPU's share."""

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


def fleet(**kubernetes: Any) -> Any:
    data = {
        "gpu": {"name": "L4", "memory_mib": 24000, "price_per_hour": 0.8},
        "node": {"gpus": 4, "cpu_cores": 32},
        "context_reserve_mib": 500,
        "models": [{"name": "m", "profile": "p.json", "peak_qps": 1, "slo_p99_ms": 9}],
    }
    if kubernetes:
        data["kubernetes"] = kubernetes
    return parse_fleet(data, base_dir=Path("."))


def plan_of(data: dict[str, Any]) -> Plan:
    """A plan with the figures the manifests read (``data``), the rest the golden plan's."""
    golden = read_plan(Path(__file__).parents[2] / "data" / "plan" / "expected" / "plan.json")
    model, gpu = golden.models[0], golden.gpus[0]
    return replace(
        golden,
        models=[replace(model, **m) for m in data["models"]],
        servers=data.get("servers", []),
        gpus=[replace(gpu, replicas=[replace(gpu.replicas[0], **r) for r in g["replicas"]])
              for g in data["gpus"]],
    )  # fmt: skip


# Two GPUs: GPU 0 holds big (5,500 MiB) and small x3 (1,500 MiB); GPU 1 big and small.
PLAN_FIGURES = {
    "models": [
        {"name": "big", "gpu_memory_mib": 5499.5, "replicas": 2, "cpu_limit": 2.0},
        {"name": "Small_1", "gpu_memory_mib": 1000.0, "replicas": 4, "cpu_limit": None},
    ],
    "gpus": [
        {"replicas": [{"model": "big"}] + [{"model": "Small_1"}] * 3},
        {"replicas": [{"model": "big"}, {"model": "Small_1"}]},
    ],
}
PLAN = plan_of(PLAN_FIGURES)


def vgpus_of(text: str) -> dict[str, tuple[int, int, str]]:
    """Deployment name -> (pods, vGPUs per pod, CPU limit)."""
    out = {}
    for o in yaml.safe_load_all(text):
        if o and o["kind"] == "Deployment":
            (c,) = o["spec"]["template"]["spec"]["containers"]
            limits = c["resources"]["limits"]
            out[o["metadata"]["name"]] = (
                o["spec"]["replicas"], int(limits["sharedserve.io/vgpu"]), str(limits["cpu"]),
            )  # fmt: skip
    return out


def test_the_coarsest_cut_that_holds_every_planned_gpu() -> None:
    manifests = plan_manifests(PLAN, fleet(), {"big": "resnet50"})
    # GPU 0 needs 6,000 + 3 x 1,500 MiB. --vgpus-per-gpu 1-3 cut 24,000 MiB into 24,000, 12,000
    # and 8,000 MiB: 4 pods need 4 vGPUs; --vgpus-per-gpu 4 (6,000 MiB): 1 + 3 = 4 vGPUs, it fits.
    assert (manifests.size.per_gpu, manifests.size.vgpu_memory_mib) == (4, 6000)
    assert manifests.size.allocator_flag == "--vgpus-per-gpu 4" and manifests.unfit == []
    # Names made Kubernetes names; CPU from the profile's limit, else render's default.
    assert vgpus_of(manifests.text) == {"big": (2, 1, "2"), "small-1": (4, 1, "500m")}
    assert manifests.vgpus == 6
    header = " ".join(line.lstrip("# ") for line in manifests.text.split("---")[0].splitlines())
    assert "--vgpus-per-gpu 4" in header and "the fleet plan" in header
    # The model's directory on the volume where its files are known, else its name.
    assert "/models/resnet50" in manifests.text and "/models/Small_1" in manifests.text


def test_a_given_cut_that_a_planned_gpu_overflows_is_reported() -> None:
    manifests = plan_manifests(PLAN, fleet(vgpu_memory_mib=1000), {})
    # 6,000 MiB is 6 vGPUs of 1,000 and 1,500 is 2: GPU 0 takes 12 of the 24 a GPU has: fits.
    assert vgpus_of(manifests.text)["big"][1] == 6 and manifests.unfit == []
    manifests = plan_manifests(PLAN, fleet(replicas_per_gpu=3), {})
    assert manifests.unfit == ["GPU 0 (4 vGPUs)"]
    with pytest.raises(ConfigError, match="more than the GPU's 24000 MiB"):
        plan_manifests(PLAN, fleet(vgpu_memory_mib=30000), {})


def test_a_name_kubernetes_refuses_names_the_model() -> None:
    plan = plan_of({
        "models": [{"name": "-bad", "gpu_memory_mib": 10, "replicas": 1, "cpu_limit": None}],
        "gpus": [{"replicas": [{"model": "-bad"}]}],
    })  # fmt: skip
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

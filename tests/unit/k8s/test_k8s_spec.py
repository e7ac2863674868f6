"""``sharedserve k8s render --spec``'s pure parts: vGPUs from pack's plan, CPU quantities, the
stream of a mix's Deployments and Services, and what a pod's extra serve options may be."""

from __future__ import annotations

import base64
import hashlib
from decimal import Decimal
from typing import Any

import pytest
import yaml

from sharedserve.allocator.inventory import Sizing, build_inventory
from sharedserve.config import CapSource, GpuCapRequest
from sharedserve.errors import ConfigError
from sharedserve.gpu.info import GpuInfo
from sharedserve.k8s.admin import ADMIN_KEY_DIGEST
from sharedserve.k8s.mix import ClaimSize, MixModel, VgpuSize, render_mix, render_mix_yaml
from sharedserve.k8s.render import ModelDeployment, check_serve_args, render_model
from sharedserve.pack.caps import EntryOnGpu, caps_on_gpu
from sharedserve.quantity import format_cpu, parse_cpu

RESERVE = 512
NO_CAP = GpuCapRequest.of(CapSource.NONE)


def size(gpu_mib: int, *, replicas: int | None = None, vgpu_mib: int | None = None) -> VgpuSize:
    """As the CLI makes it: the allocator's own inventory cuts the GPU."""
    sizing = Sizing(vgpus_per_gpu=replicas or 1, vgpu_memory_mib=vgpu_mib)
    (gpu,) = build_inventory([GpuInfo("GPU-t", 0, "t", gpu_mib)], sizing).gpus
    return VgpuSize(gpu_mib, gpu.vgpu_memory_mib, gpu.replicas, "--replicas")


@pytest.mark.parametrize(
    ("gpu_mib", "replicas", "vgpu_mib", "need_mib", "vgpus"),
    [
        # vGPU size from --vgpus-per-gpu: the GPU's memory / N, as the allocator cuts it.
        (16384, 8, None, 0, 1),  # at least one
        (16384, 8, None, 1, 1),
        (16384, 8, None, 2048, 1),  # exactly one vGPU
        (16384, 8, None, 2049, 2),  # a MiB more: rounded up
        (16384, 8, None, 10016, 5),
        (16384, 8, None, 16384, 8),  # the whole GPU
        (16384, 4, None, 10016, 3),
        (16384, 1, None, 1, 1),
        (15360, 7, None, 2194, 1),  # 15360 // 7 = 2194
        (15360, 7, None, 15360, 7),  # 7 x 2194 < 15360: never more than the GPU's vGPUs
        # vGPU size from --vgpu-memory-mib: floor(memory / size) of them per GPU.
        (16384, None, 1000, 999, 1),
        (16384, None, 1000, 1001, 2),
        (16384, None, 1000, 16384, 16),  # ceil is 17; the GPU advertises 16
        (81559, None, 4096, 19877 + 512, 5),
    ],
)
def test_vgpus_per_pod(
    gpu_mib: int, replicas: int | None, vgpu_mib: int | None, need_mib: int, vgpus: int
) -> None:
    assert size(gpu_mib, replicas=replicas, vgpu_mib=vgpu_mib).vgpus_for(need_mib) == vgpus


@pytest.mark.parametrize("gpu_mib", [16384, 15360, 11441, 81559])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 7, 8, 16])
def test_one_model_n_replicas_is_one_vgpu_each_at_n_per_gpu(gpu_mib: int, replicas: int) -> None:
    """pack's even split of N replicas, cap plus reserve, is exactly one of N vGPUs."""
    (share,) = caps_on_gpu(
        GpuInfo("GPU-t", 0, "t", gpu_mib),
        [EntryOnGpu("m", replicas, NO_CAP, 10.0)],
        context_reserve_mib=RESERVE,
    )
    assert share.mib is not None
    assert size(gpu_mib, replicas=replicas).vgpus_for(share.mib + RESERVE) == 1


def test_a_mix_follows_the_plan() -> None:
    gpu = GpuInfo("GPU-t", 0, "t", 16384)
    items = [
        EntryOnGpu("tiny", 4, NO_CAP, 0.05),
        EntryOnGpu("mobilenet_v2", 2, NO_CAP, 15.0),
        EntryOnGpu("resnet50", 1, NO_CAP, 97.9),
        EntryOnGpu("capped", 1, GpuCapRequest.of(CapSource.FLAG, mib=3000), 97.9),
    ]
    shares = caps_on_gpu(gpu, items, context_reserve_mib=RESERVE)
    caps = [s.mib for s in shares]
    # What the GPU has left after the cap and 8 reserves, 9288 MiB, shared by weights.
    assert caps == [70, 1056, 6893, 3000]
    vgpu = size(16384, replicas=8)
    assert [vgpu.vgpus_for(c + RESERVE) for c in caps if c is not None] == [1, 1, 4, 2]


@pytest.mark.parametrize(
    ("cores", "quantity"),
    [
        (1, "1"),
        (1.0, "1"),
        (2, "2"),
        (0.5, "500m"),
        (1.5, "1500m"),
        (0.1, "100m"),
        (0.25, "250m"),
        (0.001, "1m"),
        (12.345, "12345m"),
    ],
)
def test_cpu_limits_as_quantities(cores: float, quantity: str) -> None:
    assert format_cpu(cores) == quantity
    assert parse_cpu(quantity) == Decimal(str(cores))


@pytest.mark.parametrize(
    ("cores", "fragment"),
    [
        (0, "positive"),
        (-1, "positive"),
        (float("inf"), "positive"),
        (float("nan"), "positive"),
        (0.0005, "finer than 1m"),
        (1.0001, "finer than 1m"),
    ],
)
def test_cpu_limits_kubernetes_cannot_take(cores: float, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as info:
        format_cpu(cores, "cpu_limit")
    assert info.value.message.startswith("cpu_limit")


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "/elsewhere"],
        ["--name=x"],
        ["--host", "127.0.0.1"],
        ["--rest-port", "1"],
        ["--grpc-port=2"],
        ["--enable-batching", "--gpu-memory-fraction", "0.9"],
        ["--gpu-memory-mib", "100"],
        ["--cpu-limit", "4"],
        ["--fake-gpus", "g.json"],
    ],
)
def test_serve_options_the_pod_owns_are_refused(args: list[str]) -> None:
    with pytest.raises(ConfigError, match="set by k8s render or the allocator"):
        check_serve_args(args)
    spec = ModelDeployment(model="tiny", image="i", serve_args=tuple(args))
    with pytest.raises(ConfigError, match="set by k8s render or the allocator"):
        render_model(spec)


def test_serve_args_and_the_models_directory_reach_the_container() -> None:
    batching = ("--enable-batching", "--max-batch-size", "8")
    spec = ModelDeployment(model="tiny-a", image="i", model_dir="tiny", serve_args=batching)
    deployment, _ = render_model(spec)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:5] == ["serve", "--model", "/models/tiny", "--name", "tiny-a"]
    assert tuple(args[-3:]) == batching
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    with pytest.raises(ConfigError, match="model directory"):
        render_model(ModelDeployment(model="tiny", image="i", model_dir="a/b"))


def mix_model(model: str, replicas: int, cap_mib: int, **fields: Any) -> MixModel:
    deployment = ModelDeployment(
        model=model, image="sharedserve:0.1.0", replicas=replicas, **fields
    )
    return MixModel(deployment, cap_mib, f"mix.yaml: models[0] ({model})")


def test_the_mix_stream() -> None:
    models = [
        mix_model("tiny", 4, 83, cpu="1"),
        mix_model("resnet50", 1, 8152, cpu="1", serve_args=("--enable-batching",)),
    ]
    vgpu = size(16384, replicas=8)
    text = render_mix_yaml(
        models, vgpu, context_reserve_mib=RESERVE, source="mix.yaml", admin_secret=False
    )
    header = text.split("---\n", 1)[0]
    assert header.startswith("# Models of mix.yaml for sharedserve")
    assert all(line.startswith("# ") and len(line) <= 99 for line in header.splitlines())
    counted = "2 models in 2 Deployments, 5 pods, 9 vGPUs (1.1 GPUs' worth)"
    assert counted in " ".join(header.split())
    assert "# resnet50: 1 pod x 5 vGPUs (10240 MiB); planned cap 8152 MiB + 512 MiB reserve" in text
    deployments = render_mix(models, vgpu, context_reserve_mib=RESERVE)
    assert [d.vgpu for d in deployments] == [1, 5]
    expected = [obj for d in deployments for obj in render_model(d)]
    assert list(yaml.safe_load_all(text)) == expected
    limits = expected[2]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "1", "memory": "2Gi", "sharedserve.io/vgpu": "5"}


def test_the_mix_stream_for_the_dra_driver() -> None:
    """With the DRA driver a pod claims its cap plus reserve in MiB: no rounding to vGPUs."""
    models = [mix_model("tiny", 4, 83), mix_model("resnet50", 1, 8152)]
    claims = ClaimSize(16384)
    text = render_mix_yaml(
        models, claims, context_reserve_mib=RESERVE, source="mix.yaml", admin_secret=False
    )
    header = text.split("---\n", 1)[0]
    assert all(line.startswith("# ") and len(line) <= 99 for line in header.splitlines())
    flat = " ".join(line.removeprefix("# ") for line in header.splitlines())
    assert "a ResourceClaimTemplate, Deployment and Service each" in flat
    assert "2 models in 2 Deployments, 5 pods, 11044 MiB of GPU memory (0.7 GPUs' worth)" in flat
    assert "# resnet50: 1 pod x 8664 MiB of GPU memory; planned cap 8152 MiB + 512 MiB" in text
    deployments = render_mix(models, claims, context_reserve_mib=RESERVE)
    assert [(d.gpu_memory, d.vgpu) for d in deployments] == [("595Mi", 1), ("8664Mi", 1)]
    expected = [obj for d in deployments for obj in render_model(d)]
    assert list(yaml.safe_load_all(text)) == expected
    assert [o["kind"] for o in expected[:3]] == ["ResourceClaimTemplate", "Deployment", "Service"]


def test_the_mix_stream_opens_with_one_secret_for_every_pod() -> None:
    """One key per output and namespace, first in the stream; each pod marked with its digest."""
    models = [mix_model("tiny", 4, 83), mix_model("resnet50", 1, 8152)]
    vgpu = size(16384, replicas=8)
    text = render_mix_yaml(models, vgpu, context_reserve_mib=RESERVE, source="mix.yaml")
    header = text.split("---\n", 1)[0]
    assert all(line.startswith("# ") and len(line) <= 99 for line in header.splitlines())
    assert "kubectl -n sharedserve get secret sharedserve-admin" in header
    secret, *objects = yaml.safe_load_all(text)
    assert secret["kind"] == "Secret" and secret["metadata"]["namespace"] == "sharedserve"
    key = base64.b64decode(secret["data"]["key"])
    digests = {
        o["spec"]["template"]["metadata"]["annotations"][ADMIN_KEY_DIGEST]
        for o in objects
        if o["kind"] == "Deployment"
    }
    assert digests == {hashlib.sha256(key).hexdigest()[:16]}
    assert key.decode() not in text
    again = next(yaml.safe_load_all(render_mix_yaml(models, vgpu, context_reserve_mib=RESERVE,
                                                    source="mix.yaml")))  # fmt: skip
    assert again["data"] != secret["data"]


def test_mix_refusals_name_the_entry() -> None:
    vgpu = size(16384, replicas=8)
    with pytest.raises(ConfigError, match=r"^mix.yaml: models\[0\] \(9lives\): --model"):
        render_mix([mix_model("9lives", 1, 100)], vgpu, context_reserve_mib=RESERVE)
    # Model names that differ where Kubernetes names cannot.
    twins = [mix_model("tiny_a", 1, 100), mix_model("tiny.a", 1, 100)]
    with pytest.raises(ConfigError, match="both render as the Deployment and Service 'tiny-a'"):
        render_mix(twins, vgpu, context_reserve_mib=RESERVE)

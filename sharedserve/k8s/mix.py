"""A pack spec's models as Deployments and Services in one YAML stream (``k8s render --spec``).

Pure. ``pack --spec`` plans a mix on one GPU (``sharedserve.pack.plan``): each replica gets a GPU
memory cap, explicit or a share of what is left in proportion to its model's size, and keeps a
context reserve outside it. On Kubernetes the allocator cuts every GPU into equal vGPUs and a pod
asks for whole ones, so each model's pods ask for the vGPUs that hold what the plan gives one of
its replicas on that GPU, cap plus reserve:

    vGPUs per pod = ceil((cap + context reserve) / vGPU size), at least 1, at most a GPU's vGPUs

The reserve is counted because a pod's vGPUs are all the GPU memory the scheduler sets aside for
it, and its CUDA context lives in that memory too: counting the cap alone would let the scheduler
put more replicas on a GPU than the plan fits. With one model of N replicas and the allocator at
``--replicas N``, every pod gets 1 vGPU, exactly ``pack``'s N on one GPU. Rounding up can make a
mix take more vGPUs than one GPU has; the header says how many GPUs' worth. A pod never asks for
more vGPUs than one GPU advertises: the allocator grants a pod vGPUs on one GPU only.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sharedserve.errors import ConfigError
from sharedserve.k8s.render import ModelDeployment, dump_all, render_model

__all__ = ["MixModel", "VgpuSize", "render_mix", "render_mix_yaml"]


@dataclass(frozen=True)
class VgpuSize:
    """How the allocator cuts one GPU into vGPUs, as its ``--replicas`` or
    ``--vgpu-memory-mib`` does (``sharedserve.allocator.inventory``)."""

    gpu_memory_mib: int
    """The GPU's memory in MiB."""
    vgpu_memory_mib: int
    """Memory per vGPU in MiB, at least 1."""
    per_gpu: int
    """vGPUs the GPU advertises, at least 1."""
    allocator_flag: str
    """The allocator's flag that cuts GPUs this way, e.g. ``--replicas 8``, for the header."""

    def vgpus_for(self, mib: int) -> int:
        """The whole vGPUs holding ``mib`` MiB: at least 1, at most the GPU's."""
        return min(max(1, math.ceil(mib / self.vgpu_memory_mib)), self.per_gpu)


@dataclass(frozen=True)
class MixModel:
    """One entry of a pack spec: its pods, and what ``pack`` plans for each on one GPU."""

    deployment: ModelDeployment
    """The entry's Deployment and Service; ``vgpu`` is set from the plan."""
    cap_mib: int
    """The GPU memory cap ``pack`` gives each replica on one GPU, in MiB."""
    where: str
    """The entry, for errors: ``mix.yaml: models[2] (resnet50)``."""


def render_mix(
    models: Sequence[MixModel], size: VgpuSize, *, context_reserve_mib: int
) -> list[ModelDeployment]:
    """Each model's Deployment with its vGPUs set, checked; ConfigError names the entry."""
    deployments = []
    seen: dict[str, str] = {}
    for model in models:
        vgpu = size.vgpus_for(model.cap_mib + context_reserve_mib)
        deployment = replace(model.deployment, vgpu=vgpu)
        try:
            deployment.validate()
        except ConfigError as e:
            raise ConfigError(f"{model.where}: {e.message}") from e
        name = deployment.resource_name
        if name in seen:
            # The second would replace the first on apply.
            raise ConfigError(
                f"{seen[name]} and {model.where} both render as the Deployment and Service "
                f"{name!r}; give each a unique 'name'"
            )
        seen[name] = model.where
        deployments.append(deployment)
    return deployments


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def render_mix_yaml(
    models: Sequence[MixModel],
    size: VgpuSize,
    *,
    context_reserve_mib: int,
    source: str,
    basis: str = "what `pack` plans for one replica of the spec on one GPU",
    command: str = "sharedserve k8s render --spec",
) -> str:
    """Every model's Deployment and Service in one YAML stream, with comments saying how their
    vGPUs follow from the plan; ``source`` names the spec (or plan) in the header, ``basis``
    where each replica's cap comes from and ``command`` what wrote the file."""
    deployments = render_mix(models, size, context_reserve_mib=context_reserve_mib)
    pods = sum(d.replicas for d in deployments)
    vgpus = sum(d.replicas * d.vgpu for d in deployments)
    header = (
        f"Models of {source} for sharedserve ({command}): a Deployment and "
        f"Service each; {_count(len(deployments), 'model')}, {_count(pods, 'pod')}, "
        f"{_count(vgpus, 'vGPU')} ({vgpus / size.per_gpu:.1f} GPUs' worth). Apply with: "
        f"kubectl apply -f FILE. Each pod asks for the vGPUs holding {basis}: its GPU memory "
        f"cap plus {context_reserve_mib} MiB for "
        f"its CUDA context, rounded up to vGPUs of {size.vgpu_memory_mib} MiB, {size.per_gpu} "
        f"per {size.gpu_memory_mib} MiB GPU (the allocator's {size.allocator_flag})."
    )
    lines = textwrap.wrap(header, 97, break_long_words=False, break_on_hyphens=False)
    parts = ["".join(f"# {line}\n" for line in lines)]
    for model, deployment in zip(models, deployments, strict=True):
        note = (
            f"# {deployment.model}: {_count(deployment.replicas, 'pod')} x "
            f"{_count(deployment.vgpu, 'vGPU')} ({deployment.vgpu * size.vgpu_memory_mib} MiB); "
            f"planned cap {model.cap_mib} MiB + {context_reserve_mib} MiB reserve"
        )
        objects = render_model(deployment)
        parts.append(f"---\n{note}\n" + dump_all(objects))
    return "".join(parts)

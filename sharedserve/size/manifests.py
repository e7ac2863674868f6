"""A plan's models as Kubernetes manifests (``k8s.yaml``), by ``k8s render --spec``'s renderer.

Pure. One Deployment and Service per model: its planned replicas as pods, the CPU limit its
profile was measured under (``k8s render``'s default where it had none), and the vGPUs holding
its planned GPU memory plus the context reserve (``sharedserve.k8s.mix``).

The allocator cuts every GPU into equal vGPUs. The cut is the fleet file's
``kubernetes.vgpus_per_gpu`` or ``vgpu_memory_mib``, else the coarsest ``--vgpus-per-gpu``
under which every planned GPU's share fits its GPU's vGPUs: then a scheduler packing pods as the
plan does needs no more GPUs than the plan, and no GPU takes many more pods than the plan's fullest.
The scheduler places pods by their vGPUs, not by the plan's GPU numbers: the plan's GPU count
holds when it packs as well.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from sharedserve.allocator.inventory import MAX_REPLICAS, Sizing
from sharedserve.k8s.mix import MixModel, VgpuSize, render_mix_yaml
from sharedserve.k8s.render import ModelDeployment
from sharedserve.quantity import format_cpu
from sharedserve.size.fleet import Fleet
from sharedserve.size.plan import Plan
from sharedserve.size.vgpus import vgpu_cut

__all__ = ["PlanManifests", "plan_manifests"]

# The fleet file's names for the allocator's cut, which its refusals name.
_FLEET_NAMES = ("kubernetes.vgpus_per_gpu", "kubernetes.vgpu_memory_mib")


@dataclass(frozen=True)
class PlanManifests:
    text: str
    """The YAML stream."""
    size: VgpuSize
    vgpus: int
    """vGPUs all pods ask for."""
    unfit: list[str]
    """The planned GPUs whose share takes more vGPUs than a GPU has, under a given cut."""


def _cut(gpu_memory_mib: int, sizing: Sizing) -> VgpuSize:
    return vgpu_cut(gpu_memory_mib, sizing, names=_FLEET_NAMES)


def _unfit(size: VgpuSize, shares: list[list[int]]) -> list[str]:
    """The GPUs (``shares``: each GPU's replicas' MiB with reserves) that ``size`` cannot hold."""
    out = []
    for index, share in enumerate(shares):
        taken = sum(size.vgpus_for(mib) for mib in share)
        if taken > size.per_gpu:
            out.append(f"GPU {index} ({taken} vGPUs)")
    return out


def _coarsest(gpu_memory_mib: int, shares: list[list[int]]) -> VgpuSize:
    """The fewest vGPUs per GPU (the largest vGPUs, the most room in each pod's cap) that hold
    every planned GPU's share; the finest cut when none does."""
    # The fullest GPUs first: they refuse a coarse cut soonest.
    hardest = sorted(shares, key=lambda s: (-len(s), -sum(s)))
    finest = min(MAX_REPLICAS, gpu_memory_mib)
    for n in range(1, finest + 1):
        size = _cut(gpu_memory_mib, Sizing(vgpus_per_gpu=n))
        if all(sum(size.vgpus_for(mib) for mib in share) <= size.per_gpu for share in hardest):
            return size
    return _cut(gpu_memory_mib, Sizing(vgpus_per_gpu=finest))


def plan_manifests(plan: Plan, fleet: Fleet, directories: Mapping[str, str]) -> PlanManifests:
    """The plan's models as manifests; ``directories``: each model's directory on the models'
    volume, by name, where its files are known (else its name). ConfigError names a model
    whose name Kubernetes would refuse."""
    kube = fleet.kubernetes
    reserve = fleet.context_reserve_mib
    memory = fleet.gpu.memory_mib
    need = {m.name: math.ceil(m.gpu_memory_mib) for m in plan.models}
    shares = [[need[r.model] + reserve for r in g.replicas] for g in plan.gpus]
    if kube.vgpus_per_gpu is not None:
        size = _cut(memory, Sizing(vgpus_per_gpu=kube.vgpus_per_gpu))
    elif kube.vgpu_memory_mib is not None:
        size = _cut(memory, Sizing(vgpu_memory_mib=kube.vgpu_memory_mib))
    else:
        size = _coarsest(memory, shares)
    mix = []
    for m in plan.models:
        cpu = ModelDeployment.cpu if not m.cpu_limit else format_cpu(m.cpu_limit, "cpu")
        deployment = ModelDeployment(
            model=m.name,
            image=kube.image,
            replicas=m.replicas,
            cpu=cpu,
            namespace=kube.namespace,
            model_pvc=kube.model_pvc,
            runtime_class=kube.runtime_class,
            model_dir=directories.get(m.name),
        )
        mix.append(MixModel(deployment, need[m.name], f"fleet model {m.name}"))
    source = "the fleet plan" if fleet.source is None else f"the plan of {fleet.source}"
    text = render_mix_yaml(
        mix,
        size,
        context_reserve_mib=reserve,
        source=source,
        basis="its memory in the plan",
        command="sharedserve size --fleet",
    )
    vgpus = sum(size.vgpus_for(need[m.name] + reserve) * m.replicas for m in plan.models)
    return PlanManifests(text, size, vgpus, _unfit(size, shares))

"""A plan's models as Kubernetes manifests (``k8s.yaml``), by ``k8s render --spec``'s renderer.

One Deployment and Service per dedicated model: its planned replicas as pods, the CPU limit its
profile was measured under (``k8s render``'s default where it had none), and the vGPUs holding
its planned GPU memory plus the context reserve (``sharedserve.k8s.mix``). One per shared server,
as ``k8s render --spec`` renders a pack spec's (``sharedserve.k8s.shared_server``): its
replicas as pods, each one process serving the server's models from a repository its init
container builds, their model files (weight, budget, pinned) in a ConfigMap, ``--paging lru``
where it pages, and vGPUs holding the server's memory plus ONE reserve. Reads a model's own
``sharedserve.yaml`` where its files are given, as ``k8s render --spec`` does.

The allocator cuts every GPU into equal vGPUs. The cut is the fleet file's
``kubernetes.vgpus_per_gpu`` or ``vgpu_memory_mib``, else the coarsest ``--vgpus-per-gpu``
under which every planned GPU's share fits its GPU's vGPUs: then a scheduler packing pods as the
plan does needs no more GPUs than the plan, and no GPU takes many more pods than the plan's fullest.
The scheduler places pods by their vGPUs, not by the plan's GPU numbers: the plan's GPU count
holds when it packs as well.

The pods read their management key from the Secret ``sharedserve-admin``, which the plan does not
hold (``k8s render`` would make one with a new key every time): the header says how to make it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sharedserve.config import SharedServerModel
from sharedserve.errors import ConfigError
from sharedserve.k8s.mix import MixModel, VgpuSize, render_mix_yaml
from sharedserve.k8s.render import ModelDeployment
from sharedserve.k8s.shared_server import SharedServerModelFiles, SharedServerPods
from sharedserve.k8s.vgpus import vgpu_cut
from sharedserve.pack.repository import merged_model_file, model_file
from sharedserve.quantity import format_cpu
from sharedserve.size.fleet import Fleet
from sharedserve.size.plan import Plan, PlanModel, PlanServer, model_cap
from sharedserve.vgpu_sizing import MAX_REPLICAS, Sizing

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


def _deployment(
    fleet: Fleet, name: str, replicas: int, cpu_limit: float | None, model_dir: str | None
) -> ModelDeployment:
    kube = fleet.kubernetes
    return ModelDeployment(
        model=name,
        image=kube.image,
        replicas=replicas,
        cpu=ModelDeployment.cpu if not cpu_limit else format_cpu(cpu_limit, "cpu"),
        namespace=kube.namespace,
        model_pvc=kube.model_pvc,
        runtime_class=kube.runtime_class,
        model_dir=model_dir,
    )


def _server_pods(
    fleet: Fleet,
    server: PlanServer,
    models: Mapping[str, PlanModel],
    directories: Mapping[str, str],
    files: Mapping[str, Path],
) -> SharedServerPods:
    """A shared server's models in its pods, each with the model file its pack spec gives it
    (``size.plan.specs``): its weight (its rate in one replica), its budget, pinned or not."""
    out = []
    for name in server.models:
        m = models[name]
        directory = directories.get(name, name)
        try:
            _deployment(fleet, name, 1, None, directory).validate()  # safe in the pod's script
        except ConfigError as e:
            raise ConfigError(f"shared server {server.name}: model {name}: {e.message}") from e
        model = SharedServerModel(
            files.get(name, Path(directory)),
            name=name,
            weight=round(m.rate_per_replica, 3),
            gpu_memory_mib=model_cap(m),
            pinned=bool(server.paged) and name not in server.paged,
        )
        # The model's own sharedserve.yaml, where its files are here, under the plan's keys.
        settings = merged_model_file(model) if name in files else model_file(model)
        out.append(SharedServerModelFiles(name, directory, settings))
    return SharedServerPods(tuple(out), paging=server.paging == "lru")


def plan_manifests(
    plan: Plan,
    fleet: Fleet,
    directories: Mapping[str, str],
    files: Mapping[str, Path] | None = None,
) -> PlanManifests:
    """The plan's models as manifests: a Deployment a dedicated model, one a shared server
    (``k8s.shared_server``: its pods serve its models from one repository). ``directories``: each
    model's directory on the models' volume, by name, where its files are known (else its
    name); ``files``: their paths here, whose ``sharedserve.yaml`` a server's model file keeps.
    ConfigError names a model whose name Kubernetes would refuse."""
    files = files or {}
    kube = fleet.kubernetes
    reserve = fleet.context_reserve_mib
    memory = fleet.gpu.memory_mib
    need = {m.name: math.ceil(m.gpu_memory_mib) for m in plan.models}
    need |= {s.name: math.ceil(s.gpu_memory_mib) for s in plan.servers}
    by_name = {s.name: s for s in plan.servers}
    # A process a pod: a shared server's replica once, not once for each model it lists.
    shares = []
    for g in plan.gpus:
        share = [need[r.model] + reserve for r in g.replicas if r.server is None]
        for name, listed_ in Counter(r.server for r in g.replicas if r.server).items():
            share += [need[name] + reserve] * (listed_ // len(by_name[name].models))
        shares.append(share)
    if kube.vgpus_per_gpu is not None:
        size = _cut(memory, Sizing(vgpus_per_gpu=kube.vgpus_per_gpu))
    elif kube.vgpu_memory_mib is not None:
        size = _cut(memory, Sizing(vgpu_memory_mib=kube.vgpu_memory_mib))
    else:
        size = _coarsest(memory, shares)
    mix = []
    pods = {}
    for m in plan.models:
        if m.server is None:
            deployment = _deployment(fleet, m.name, m.replicas, m.cpu_limit,
                                     directories.get(m.name))  # fmt: skip
            mix.append(MixModel(deployment, need[m.name], f"fleet model {m.name}"))
            pods[m.name] = m.replicas
    models = {m.name: m for m in plan.models}
    for s in plan.servers:
        first = s.models[0]
        deployment = _deployment(fleet, s.name, s.replicas, s.cpu_limit,
                                 directories.get(first, first))  # fmt: skip
        pods_of = _server_pods(fleet, s, models, directories, files)
        mix.append(MixModel(deployment, need[s.name], f"shared server {s.name}", pods_of))
        pods[s.name] = s.replicas
    source = "the fleet plan" if fleet.source is None else f"the plan of {fleet.source}"
    text = render_mix_yaml(
        mix,
        size,
        context_reserve_mib=reserve,
        source=source,
        basis="its memory in the plan",
        command="sharedserve size --fleet",
        # A plan is a file to keep, compare and commit: no key in it. Its pods read the Secret
        # k8s render would emit, which the header says how to make.
        admin_secret=False,
    )
    vgpus = sum(size.vgpus_for(need[name] + reserve) * count for name, count in pods.items())
    return PlanManifests(text, size, vgpus, _unfit(size, shares))

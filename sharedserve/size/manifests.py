"""A plan's models as Kubernetes manifests (``k8s.yaml``), by ``k8s render --spec``'s renderer.

One Deployment and Service per dedicated model: its planned replicas as pods, the CPU limit its
profile was measured under (``k8s render``'s default where it had none). One per shared server,
as ``k8s render --spec`` renders a pack spec's (``sharedserve.k8s.shared_server``): its
replicas as pods, each one process serving the server's models from a repository its init
container builds, their model files (weight, budget, pinned) in a ConfigMap, ``--paging lru``
where it pages. Reads a model's own ``sharedserve.yaml`` where its files are given, as ``k8s
render --spec`` does.

**What a pod asks for** is the share of a GPU its replica was planned at: the larger of its
memory (its cap plus the context reserve; a shared server's, ONE reserve) and its busy share
over the utilisation target, in whole units (``size.shares``): vGPUs of the allocator's cut,
or with the DRA driver (``kubernetes.dra``) a claim for its memory in MiB and for a percent of
the GPU's compute. The units of the processes the plan put on one GPU sum to at most the
GPU's, and the room the plan left on a GPU (measured densities, spread, packing) goes to the
pods on it: the pods ask for about the plan's GPUs, so a scheduler filling GPUs by units needs
as many as the plan, and puts no more on one than it did.

The vGPU cut is the fleet file's ``kubernetes.vgpus_per_gpu`` or ``vgpu_memory_mib``, else the
coarsest ``--vgpus-per-gpu`` (at most ``FINEST``) at which every planned GPU's pods fit and no
pod asks under its planned share by more than ``CLOSE`` of a GPU.

**Spread.** Where the plan put a model's replicas on different GPUs, its pods carry a rule
(``k8s.PodSpread``): required anti-affinity over nodes where each is on a node of its own, else
a topology spread over nodes the scheduler prefers. The scheduler places pods on nodes; which
GPU of a node a pod gets is the allocator's (``--policy``), which no pod-level rule reaches.

The pods read their management key from the Secret ``sharedserve-admin``, which the plan does not
hold (``k8s render`` would make one with a new key every time): the header says how to make it.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from sharedserve.config import SharedServerModel
from sharedserve.contract import DRA_COMPUTE_UNITS, DRA_DRIVER
from sharedserve.errors import ConfigError
from sharedserve.k8s import (
    ClaimSize,
    MixModel,
    ModelDeployment,
    PodSpread,
    VgpuSize,
    render_mix,
    render_mix_yaml,
    vgpu_cut,
)
from sharedserve.k8s.chart import AllocatorMode, AllocatorValues, chart_values
from sharedserve.k8s.shared_server import SharedServerModelFiles, SharedServerPods
from sharedserve.pack.repository import merged_model_file, model_file
from sharedserve.quantity import format_cpu
from sharedserve.size.fleet import Fleet
from sharedserve.size.plan import (
    Plan,
    PlanKubernetes,
    PlanModel,
    PlanServer,
    kubernetes_summary,
    model_cap,
)
from sharedserve.size.shares import Apportioned, Need, apportion
from sharedserve.vgpu_sizing import Sizing

__all__ = ["CLOSE", "FINEST", "PlanManifests", "plan_manifests"]

FINEST = 100
"""The finest ``--vgpus-per-gpu`` the plan picks: a vGPU a hundredth of a GPU."""
CLOSE = 0.05
"""How far under its planned busy share, as a share of a GPU, rounding may leave a pod at the
cut the plan picks."""
# The fleet file's names for the allocator's cut, which its refusals name.
_FLEET_NAMES = ("kubernetes.vgpus_per_gpu", "kubernetes.vgpu_memory_mib")


@dataclass(frozen=True)
class PlanManifests:
    text: str
    """The YAML stream."""
    values: str
    """The Helm chart's values installing the same (``values.yaml``)."""
    kubernetes: PlanKubernetes
    """What its pods ask for, as plan.json says it."""
    unfit: list[str]
    """The planned GPUs whose pods' memory takes more vGPUs than a GPU has, under a given cut."""


@dataclass(frozen=True)
class _Workload:
    """A Deployment: a dedicated model's, or a shared server's."""

    pods: int
    mib: int
    """One pod's GPU memory: its cap plus the (one) context reserve."""
    busy: float
    """One pod's busy share of a GPU."""
    gpus: list[int]
    """The GPU of each of its replicas in the plan."""


def _workloads(plan: Plan, reserve: int) -> dict[str, _Workload]:
    out = {}
    for m in plan.models:
        if m.server is None:
            out[m.name] = _Workload(m.replicas, math.ceil(m.gpu_memory_mib) + reserve,
                                    m.busy_share, m.gpus)  # fmt: skip
    for s in plan.servers:
        out[s.name] = _Workload(s.replicas, math.ceil(s.gpu_memory_mib) + reserve,
                                s.busy_share, s.gpus)  # fmt: skip
    return out


def _on_gpus(plan: Plan) -> list[Counter[str]]:
    """Each planned GPU's pods by Deployment: a shared server's replica once, not once for each
    model it lists."""
    models = {s.name: len(s.models) for s in plan.servers}
    out = []
    for g in plan.gpus:
        pods = Counter(r.model for r in g.replicas if r.server is None)
        for name, listed in Counter(r.server for r in g.replicas if r.server).items():
            pods[name] = listed // models[name]
        out.append(pods)
    return out


def _needs(
    workloads: Mapping[str, _Workload], per_gpu: int, target: float, unit_mib: int | None
) -> dict[str, Need]:
    """Each Deployment's share in units of a GPU of ``per_gpu``: vGPUs of ``unit_mib`` MiB,
    whose memory is a floor; None: percent of the GPU's compute (DRA), its memory claimed
    apart."""
    out = {}
    for name, w in workloads.items():
        busy = w.busy / target * per_gpu
        if unit_mib is None:
            out[name] = Need(min(per_gpu, busy), 1)
        else:
            least = min(per_gpu, max(1, math.ceil(w.mib / unit_mib)))
            out[name] = Need(min(per_gpu, max(w.mib / unit_mib, busy)), least)
    return out


def _cut(gpu_memory_mib: int, sizing: Sizing) -> VgpuSize:
    return vgpu_cut(gpu_memory_mib, sizing, names=_FLEET_NAMES)


def _overflowing(
    memory: int, workloads: Mapping[str, _Workload], gpus: list[Counter[str]], finest: int
) -> list[int]:
    """For each ``--vgpus-per-gpu`` N from 1 to ``finest`` (index N - 1), the planned GPUs whose
    pods' memory alone, in whole vGPUs, takes more than N: cheap next to apportioning, so a
    fleet of thousands of GPUs tries every cut."""
    on, mib, count = [], [], []
    for index, pods in enumerate(gpus):
        for name, n in pods.items():
            on.append(index)
            mib.append(workloads[name].mib)
            count.append(n)
    where, need, pods_ = np.array(on), np.array(mib, dtype=float), np.array(count, dtype=float)
    out = []
    for n in range(1, finest + 1):
        least = np.clip(np.ceil(need / (memory // n)), 1, n)
        taken = np.bincount(where, weights=least * pods_, minlength=len(gpus))
        out.append(int((taken > n).sum()))
    return out


def _vgpus(
    fleet: Fleet, workloads: Mapping[str, _Workload], gpus: list[Counter[str]]
) -> tuple[VgpuSize, Apportioned]:
    """The allocator's cut, the fleet's or the plan's pick, and each Deployment's vGPUs. The
    plan's pick: the coarsest cut whose GPUs hold their pods' memory and leaves no pod under
    its busy share by more than ``CLOSE`` of a GPU; else the finest that holds the memory; else
    the one that leaves the fewest GPUs short of it (the plan then warns)."""
    kube, memory, target = fleet.kubernetes, fleet.gpu.memory_mib, fleet.utilization_target

    def apportioned(size: VgpuSize) -> Apportioned:
        needs = _needs(workloads, size.per_gpu, target, size.vgpu_memory_mib)
        return apportion(gpus, needs, size.per_gpu)

    if kube.vgpus_per_gpu is not None or kube.vgpu_memory_mib is not None:
        size = _cut(memory, Sizing(vgpus_per_gpu=kube.vgpus_per_gpu or 1,
                                   vgpu_memory_mib=kube.vgpu_memory_mib))  # fmt: skip
        return size, apportioned(size)
    short = _overflowing(memory, workloads, gpus, min(FINEST, memory))
    fitting = [n for n, full in enumerate(short, 1) if not full]
    for n in fitting:
        size = _cut(memory, Sizing(vgpus_per_gpu=n))
        shares = apportioned(size)
        if shares.under <= CLOSE * n:
            return size, shares
        if n * CLOSE >= 1:
            # Rounding leaves a pod under by less than a vGPU: past CLOSE's worth, it is pods
            # whose memory and busy shares together overfill a GPU, which finer cuts keep.
            break
    # Of equally short cuts the finest, where rounding costs each pod the least.
    n = fitting[-1] if fitting else max(range(1, len(short) + 1), key=lambda n: (-short[n - 1], n))
    size = _cut(memory, Sizing(vgpus_per_gpu=n))
    return size, apportioned(size)


def _spread(gpus: list[int], node_of: Mapping[int, int]) -> PodSpread:
    """How the plan keeps a Deployment's pods apart: by the GPUs and nodes it put them on."""
    if len(set(gpus)) < 2:
        return PodSpread.NONE
    nodes = [node_of[g] for g in gpus]
    return PodSpread.NODES if len(set(nodes)) == len(nodes) else PodSpread.PREFERRED


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


def _asks(size: VgpuSize | ClaimSize, reserve: int, target: float) -> str:
    """The header's words for what each pod asks for, and how pods are kept apart."""
    share = (
        f"its planned share of a GPU: the larger of its memory (its GPU memory cap plus {reserve} "
        f"MiB for its CUDA context) and its busy share over the {target:.0%} utilisation target"
    )
    if isinstance(size, VgpuSize):
        what = (
            f"Each pod asks for vGPUs of {size.vgpu_memory_mib:,} MiB, {size.per_gpu} per "
            f"{size.gpu_memory_mib:,} MiB GPU (the allocator's {size.allocator_flag}), holding "
            f"{share}; its memory is never rounded down. The vGPUs of the pods the plan put on "
            "one GPU sum to at most a GPU's"
        )
    else:
        what = (
            f"Each pod's ResourceClaim asks the DRA driver {DRA_DRIVER} (allocator --api dra) "
            f"for its memory (its cap plus {reserve} MiB for its CUDA context, which the "
            "scheduler rounds up to the driver's step) and for the percent of the GPU's "
            f"compute holding its busy share over the {target:.0%} utilisation target. The "
            "compute of the pods the plan put on one GPU sums to at most 100"
        )
    return (
        f"{what}, and the room the plan left on a GPU goes to the pods on it, so they ask for "
        "about the plan's GPUs. Pods the plan put on nodes of their own carry pod anti-affinity "
        "over nodes; those it put on different GPUs of one node, a topology spread over nodes "
        "the scheduler prefers: which GPU of a node a pod gets is the allocator's (its --policy "
        "spread puts it on the least used GPU, bundle on the fullest that holds it)."
    )


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
    reserve, target = fleet.context_reserve_mib, fleet.utilization_target
    workloads = _workloads(plan, reserve)
    gpus = _on_gpus(plan)
    size: VgpuSize | ClaimSize
    if fleet.kubernetes.dra:
        size = ClaimSize(fleet.gpu.memory_mib)
        shares = apportion(gpus, _needs(workloads, DRA_COMPUTE_UNITS, target, None),
                           DRA_COMPUTE_UNITS)  # fmt: skip
    else:
        size, shares = _vgpus(fleet, workloads, gpus)
    node_of = {g.index: g.node for g in plan.gpus}
    entries: list[MixModel] = []

    def add(name: str, cpu_limit: float | None, directory: str | None, where: str,
            server: SharedServerPods | None = None) -> None:  # fmt: skip
        w = workloads[name]
        placed = _spread(w.gpus, node_of)
        deployment = _deployment(fleet, name, w.pods, cpu_limit, directory)
        note = (
            f"; planned {w.mib / fleet.gpu.memory_mib:.1%} of a GPU's memory, {w.busy:.1%} of "
            f"its time (target {target:.0%})"
        )
        if placed is not PodSpread.NONE:
            note += f"; kept apart ({placed.value})"
        entries.append(MixModel(dataclasses.replace(deployment, spread=placed), w.mib - reserve,
                                where, server, shares.units[name], note))  # fmt: skip

    for m in plan.models:
        if m.server is None:
            add(m.name, m.cpu_limit, directories.get(m.name), f"fleet model {m.name}")
    models = {m.name: m for m in plan.models}
    for s in plan.servers:
        first = s.models[0]
        pods = _server_pods(fleet, s, models, directories, files)
        add(s.name, s.cpu_limit, directories.get(first, first), f"shared server {s.name}", pods)
    spread = sum(e.deployment.spread is not PodSpread.NONE for e in entries)
    units = sum(shares.units[name] * w.pods for name, w in workloads.items())
    vgpus = isinstance(size, VgpuSize)
    kubernetes = PlanKubernetes(
        manifests="k8s.yaml",
        allocator_flag=size.allocator_flag if isinstance(size, VgpuSize) else "--api dra",
        vgpu_memory_mib=size.vgpu_memory_mib if isinstance(size, VgpuSize) else None,
        vgpus_per_gpu=size.per_gpu if isinstance(size, VgpuSize) else None,
        vgpus=units if vgpus else None,
        gpus_worth=round(units / size.units, 2),
        deployments=len(entries),
        pods=sum(w.pods for w in workloads.values()),
        spread=spread,
        compute_percent=None if vgpus else units,
        memory_mib=None if vgpus else sum(w.mib * w.pods for w in workloads.values()),
        under_share=round(shares.under / size.units, 4),
    )
    source = "the fleet plan" if fleet.source is None else f"the plan of {fleet.source}"
    summary = kubernetes_summary(dataclasses.replace(plan, kubernetes=kubernetes))
    text = render_mix_yaml(entries, size, context_reserve_mib=reserve, source=source,
                           command="sharedserve size --fleet", counts=summary,
                           asks=_asks(size, reserve, target),
                           # A plan is a file to keep, compare and commit: no key in it. Its pods
                           # read the Secret k8s render would emit; the header says how to make it.
                           admin_secret=False)  # fmt: skip
    unfit = []
    for index in shares.full:
        taken = sum(shares.units[name] * n for name, n in gpus[index].items())
        unfit.append(f"GPU {index} ({taken} vGPUs)")
    values = _values(entries, size, reserve, fleet.kubernetes.namespace, source)
    return PlanManifests(text, values, kubernetes, unfit)


def _values(entries: list[MixModel], size: VgpuSize | ClaimSize, reserve: int, namespace: str,
            source: str) -> str:  # fmt: skip
    """The chart's values for the same Deployments as k8s.yaml's, and the allocator's cut."""
    deployments = render_mix(entries, size, context_reserve_mib=reserve)
    if isinstance(size, VgpuSize):
        allocator = AllocatorValues(vgpus_per_gpu=size.per_gpu)
    else:
        allocator = AllocatorValues(mode=AllocatorMode.DRA)
    values = chart_values(
        [(d, e.shared_server) for d, e in zip(deployments, entries, strict=True)], allocator
    )
    header = (
        f"Values of the sharedserve Helm chart for {source} (sharedserve size --fleet): the "
        "allocator at the plan's cut and the Deployments of k8s.yaml beside this file, one per "
        "dedicated model and one per shared server. Install with: helm install sharedserve "
        f"charts/sharedserve --namespace {namespace} --create-namespace -f values.yaml"
    )
    lines = textwrap.wrap(header, 97, break_long_words=False, break_on_hyphens=False)
    # libyaml's emitter where there is one: a fleet's file holds thousands of servers.
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    body = yaml.dump(values, Dumper=dumper, sort_keys=False, width=100)
    return "".join(f"# {line}\n" for line in lines) + body

"""A fleet plan: the models' demands packed onto GPUs, its cost against the baseline, the pack
spec of each GPU's share. Pure. ``size.plan.build`` makes one; this module is its type.

``plan.json`` is ``Plan``, written by ``write_plan`` and read back by ``read_plan`` (``size
--verify`` holds a GPU's share to it); its JSON Schema is ``sharedserve schema plan``. A plan
has the GPU count, its lower bound (and each of the five bounds), the cost against the baseline
of one replica per GPU (the fleet without sharing), each model's demand and where its replicas
went, each GPU's replicas, and the ``warnings`` a reader must see (profiles from another GPU or
a CPU, models not spread). GPU ``i``'s share is the pack spec ``spec_name(i)`` beside it
(``size.plan.specs``). Models ``size.grouping`` gathers are placed as shared servers, a server's
replica one process: each model's ``serving`` says which it got and why, and the cost is told
three ways (one replica per GPU, a process per replica packed, this plan). A model whose
predictions verify runs corrected (``size --corrections``) has its ``correction``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic.dataclasses import dataclass

from sharedserve.documents import DOCUMENT, dump, json_schema, parse, read_document
from sharedserve.files import write_atomic
from sharedserve.k8s import held
from sharedserve.size.fleet import GpuType, NodeType

__all__ = [
    "LowerBound",
    "Plan",
    "PlanCorrection",
    "PlanGpu",
    "PlanKubernetes",
    "PlanModel",
    "PlanServer",
    "PlannedReplica",
    "kubernetes_summary",
    "plan_schema",
    "read_plan",
    "spec_index",
    "spec_name",
    "write_plan",
]


@dataclass(frozen=True, config=DOCUMENT)
class PlannedReplica:
    """A replica on a GPU."""

    model: str
    gpu_memory_mib: float
    """Its memory in MiB, without the context reserve."""
    busy_share: float
    """Its share of the GPU's time."""
    predicted_p99_ms: float | None = None
    """Its p99 beside this GPU's other replicas at its planned rate (``size.predict``)."""
    server: str | None = None
    """The shared server whose replica holds it (one entry per model of that replica); None:
    a process of its own."""
    predicted_p50_ms: float | None = None
    """Its p50 where ``predicted_p99_ms`` is; None: its profile row has none."""


@dataclass(frozen=True, config=DOCUMENT)
class PlanGpu:
    """A GPU of the plan and the replicas on it."""

    index: int
    node: int
    replicas: list[PlannedReplica]
    memory_used_mib: float
    """Its replicas' memory, context reserves included."""
    busy_share: float
    replica_limit: int
    """The most replicas it may hold: its models' least measured density."""

    def held(self) -> str:
        """Its processes in words: ``fraud x2, ranker, shared-0 (a, b)`` (plan.md's and
        plan.html's)."""
        models = Counter(r.model for r in self.replicas if r.server is None)
        servers: dict[str, list[str]] = {}
        for r in self.replicas:
            if r.server is not None and r.model not in servers.setdefault(r.server, []):
                servers[r.server].append(r.model)
        own = [f"{m} x{n}" if n > 1 else m for m, n in models.items()]
        shared = []
        for name, members in servers.items():
            n = sum(r.model == members[0] and r.server == name for r in self.replicas)
            shared.append(f"{name}{f' x{n}' if n > 1 else ''} ({', '.join(members)})")
        return ", ".join(own + shared)


@dataclass(frozen=True, config=DOCUMENT)
class PlanCorrection:
    """How a model's predictions were corrected by ``size --verify`` runs (``size --fleet
    --corrections``): each figure the plan predicts for it is the uncorrected one times its
    factor, measured over predicted on a verify run."""

    p99_factor: float
    p50_factor: float | None
    """None: no verify run gave both a predicted and a measured p50; p50 uncorrected."""
    source: str
    """The verify file(s) the factors come from."""
    predicted_p50_ms_before: float | None
    """``predicted_p50_ms`` before the correction (on the same GPU, at the same rate)."""
    predicted_p99_ms_before: float
    """``predicted_p99_ms`` before the correction."""
    replanned: str = ""
    """What the plan changed for the model to meet its objective as corrected, in words; empty:
    nothing."""


@dataclass(frozen=True, config=DOCUMENT)
class PlanModel:
    """A model's demand, the figures it came from, and the GPUs its replicas went to."""

    name: str
    replicas: int
    peak_qps: float
    rate_per_replica: float
    """Requests/s each replica carries at the peak: its pack spec weight."""
    capacity_qps_per_replica: float
    """The most QPS per replica at which its profile met its objective."""
    slo_p99_ms: float
    p99_at_capacity_ms: float
    predicted_p99_ms: float
    """On its worst GPU (the highest p99 beside that GPU's neighbours; of two as high, the more
    crowded): what its users see at worst, and what verify holds it to; from
    ``prediction_source``."""
    measured_at_density: int
    max_density: int
    gpu_memory_mib: float
    gpu_memory_source: str
    """nvml, cap or weights (its files on disk: not a cap)."""
    busy_share: float
    busy_source: str
    cpu_cores: float | None
    cpu_limit: float | None
    """The CPU limit its profile was measured under."""
    profile: str
    gpus: list[int]
    """The GPU of each replica."""
    predicted_p50_ms: float | None = None
    """Its p50 where ``predicted_p99_ms`` is; None: its profile row has none."""
    prediction_source: str = "profile row"
    """``queueing simulation`` (its service times, its planned rate, its slots) or ``profile
    row`` (the profile's sequential row at that density: its p99 as measured)."""
    prediction_error: str = ""
    """The error expected of the prediction and where that figure comes from, in words."""
    serving: str = "dedicated"
    """``dedicated`` (replicas of its own) or ``shared`` (a model of ``server``)."""
    server: str | None = None
    """The shared server holding it; None: dedicated."""
    serving_reason: str = ""
    """Why it is served as it is, in words (``size.grouping``)."""
    correction: PlanCorrection | None = None
    """Its predictions' correction by ``size --verify`` runs; None: uncorrected."""


@dataclass(frozen=True, config=DOCUMENT)
class PlanServer:
    """A shared server: each of its replicas is one process holding all its models."""

    name: str
    replicas: int
    models: list[str]
    gpu_memory_mib: float
    """Its models' memory, without the (one) context reserve."""
    busy_share: float
    load: float
    """Its models' loads summed: the share of one process's capacity its traffic takes."""
    cpu_limit: float | None
    gpus: list[int]
    """The GPU of each replica."""
    paging: str | None = None
    """``lru`` where it pages models (``serve --paging lru``); None: all stay in GPU memory."""
    paged: list[str] = Field(default_factory=list)
    """Its paged models: ``gpu_memory_mib`` holds room for the largest, not for each."""
    host_memory_mib: float = 0.0
    """One replica's host memory: one runtime and its models (``size.host``)."""


@dataclass(frozen=True, config=DOCUMENT)
class LowerBound:
    """The fewest GPUs by each measure: memory, busy share, density, spread, and replicas that
    share with none."""

    memory: int
    compute: int
    density: int
    spread: int
    large: int


@dataclass(frozen=True, config=DOCUMENT)
class PlanKubernetes:
    """The plan's k8s.yaml: what its pods ask of the allocator (``size.manifests``)."""

    manifests: str
    allocator_flag: str
    """How the allocator must run for it: ``--vgpus-per-gpu N`` (or ``--vgpu-memory-mib M``),
    or ``--api dra``."""
    vgpu_memory_mib: int | None
    """MiB per vGPU; None: DRA claims."""
    vgpus_per_gpu: int | None
    """vGPUs per GPU; None: DRA claims."""
    vgpus: int | None
    """vGPUs all pods ask for; None: DRA claims."""
    gpus_worth: float
    """GPUs' worth all pods ask for: their vGPUs (under DRA, their compute) over one GPU's."""
    deployments: int = 0
    """Deployments: one a dedicated model, one a shared server."""
    pods: int = 0
    spread: int = 0
    """Deployments whose pods carry a spread constraint (the plan put them on different GPUs)."""
    compute_percent: int | None = None
    """DRA: percent of a GPU's compute all claims ask for; None: vGPUs."""
    memory_mib: int | None = None
    """DRA: GPU memory all claims ask for, MiB; None: vGPUs."""
    under_share: float = 0.0
    """The most any pod asks under its planned busy share, as a share of a GPU (rounding to
    whole units on a GPU the plan filled); 0: none."""


@dataclass(frozen=True, config=DOCUMENT)
class Plan:
    """A fleet plan (``plan.json``, written by ``sharedserve size --fleet``)."""

    gpu_count: int
    lower_bound_gpus: int
    lower_bound: LowerBound
    above_bound: float | None
    """The GPU count over its lower bound."""
    node_count: int
    node_cpu_cores: list[float]
    """CPU cores each node's replicas need."""
    gpu_hours_per_month: float
    cost_per_month: float
    baseline_gpu_count: int
    """One replica per GPU: the fleet without sharing."""
    baseline_cost_per_month: float
    saving_factor: float | None
    gpu: GpuType
    node: NodeType
    utilization_target: float
    context_reserve_mib: int
    models: list[PlanModel]
    gpus: list[PlanGpu]
    warnings: list[str]
    process_per_replica_gpu_count: int | None = None
    """Every model's replicas processes of their own, packed: the plan without shared servers
    (``gpu_count`` where no model shares)."""
    servers: list[PlanServer] = Field(default_factory=list)
    """The shared servers (``size.grouping``)."""
    pack_specs: list[str] = Field(default_factory=list)
    """GPU i's pack spec, beside plan.json; none when a model has no files."""
    kubernetes: PlanKubernetes | None = None
    node_host_memory_mib: list[float] = Field(default_factory=list)
    """Host memory each node's processes need (``size.host``): one runtime a process."""


def kubernetes_summary(plan: Plan) -> str:
    """What k8s.yaml holds and asks for, in the words its header, plan.md and plan.html share:
    models, Deployments and pods, each counted as what it is, and the GPUs' worth they ask
    for beside the plan's GPUs."""
    kube = plan.kubernetes
    assert kube is not None
    shared = sum(len(s.models) for s in plan.servers)
    counts = held(len(plan.models), kube.deployments, kube.pods, len(plan.servers), shared)
    if kube.vgpus is not None:
        asked = f"{kube.vgpus:,} vGPUs of {kube.vgpu_memory_mib:,} MiB"
    else:
        asked = (
            f"{kube.memory_mib or 0:,} MiB of GPU memory and {kube.compute_percent or 0:,} "
            "percent of a GPU's compute"
        )
    return (
        f"{counts}; they ask for {asked}, {kube.gpus_worth:g} GPUs' worth against the plan's "
        f"{plan.gpu_count:,} GPUs (the allocator: `{kube.allocator_flag}`)"
    )


def write_plan(plan: Plan, path: Path) -> Path:
    """Write ``plan`` as ``plan.json`` says it."""
    return write_atomic(path, (json.dumps(dump(plan), indent=2) + "\n").encode())


def read_plan(path: Path) -> Plan:
    """Read a plan back; ConfigError says what in it is wrong."""
    return parse(Plan, read_document(path, "plan"), where=str(path))


def plan_schema() -> dict[str, Any]:
    """plan.json's JSON Schema (``sharedserve schema plan``)."""
    return json_schema(Plan, "sharedserve fleet plan (plan.json)")


def spec_name(index: int) -> str:
    """The file name of GPU ``index``'s pack spec; ``spec_index`` reads it back."""
    return f"gpu-{index:03d}.yaml"


def spec_index(path: Path) -> int | None:
    """The GPU whose pack spec ``path`` is (``plan/gpu-007.yaml``: 7); None if it is not one."""
    match = re.fullmatch(r"gpu-(\d+)\.yaml", path.name)
    return None if match is None else int(match[1])

"""A fleet plan: the models' demands packed onto GPUs, its cost against the baseline, the pack
spec of each GPU's share. Pure.

``plan.json`` is ``Plan``, written by ``write_plan`` and read back by ``read_plan`` (``size
--verify`` holds a GPU's share to it); its JSON Schema is ``sharedserve schema plan``. A plan
has the GPU count, its lower bound (and each of the five bounds), the cost against the baseline
of one replica per GPU (the fleet without sharing), each model's demand and where its replicas
went, each GPU's replicas, and the ``warnings`` a reader must see (profiles from another GPU or
a CPU, models not spread). GPU ``i``'s share is the pack spec ``spec_name(i)`` beside it
(``size.plan_specs``). Models ``size.grouping`` gathers are placed as shared servers, a server's
replica one process: each model's ``serving`` says which it got and why, and the cost is told
three ways (one replica per GPU, a process per replica packed, this plan).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic.dataclasses import dataclass

from sharedserve.documents import DOCUMENT, dump, json_schema, parse, read_document
from sharedserve.files import write_atomic
from sharedserve.placement import Placement, PlannedGpu
from sharedserve.size.bounds import cost, lower_bound
from sharedserve.size.demand import Demand
from sharedserve.size.fleet import Fleet, FleetModel, GpuType, NodeType, listed
from sharedserve.size.grouping import Grouping, Serving, SharedServer
from sharedserve.size.host import process_host_mib
from sharedserve.size.predict import Predictor

__all__ = [
    "LowerBound",
    "Plan",
    "PlanGpu",
    "PlanKubernetes",
    "PlanModel",
    "PlanServer",
    "PlannedReplica",
    "build_plan",
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
    """On its most crowded GPU: what its users see at worst, and what verify holds it to;
    from ``prediction_source``."""
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
    """The plan's k8s.yaml and the allocator cut it asks for."""

    manifests: str
    allocator_flag: str
    vgpu_memory_mib: int
    vgpus_per_gpu: int
    vgpus: int
    """vGPUs all pods ask for."""
    gpus_worth: float


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


def _r(value: float, digits: int = 3) -> float:
    return round(value, digits)


def _gpu(
    gpu: PlannedGpu,
    demands: dict[str, Demand],
    servers: dict[str, SharedServer],
    predict: Predictor,
) -> PlanGpu:
    sharing = len(gpu.replicas)  # processes: a shared server's replica is one
    replicas = []
    for r in gpu.replicas:
        server = servers.get(r.model)
        held = [demands[r.model]] if server is None else server.models
        for d in held:
            predicted = predict(d, sharing, server)
            replicas.append(
                PlannedReplica(
                    d.model,
                    _r(d.memory_mib, 1),
                    _r(d.busy_share, 4),
                    _r(predicted.p99_ms),
                    None if server is None else server.name,
                    None if predicted.p50_ms is None else _r(predicted.p50_ms),
                )
            )
    return PlanGpu(gpu.index, gpu.node, replicas, _r(gpu.memory_mib, 1), _r(gpu.busy_share, 4),
                   gpu.densest)  # fmt: skip


def _model(
    entry: FleetModel,
    d: Demand,
    gpus: list[int],
    sharing: int,
    predict: Predictor,
    *,
    serving: Serving | None,
    server: SharedServer | None = None,
) -> PlanModel:
    """``sharing``: the most processes on a GPU holding one of its replicas."""
    predicted = predict(d, sharing, server)
    return PlanModel(
        name=d.model,
        replicas=d.replicas,
        peak_qps=entry.peak_qps,
        rate_per_replica=_r(d.rate_per_replica),
        capacity_qps_per_replica=_r(d.capacity_qps),
        slo_p99_ms=entry.slo_p99_ms,
        p99_at_capacity_ms=_r(d.predicted_p99_ms),
        predicted_p99_ms=_r(predicted.p99_ms),
        measured_at_density=d.point.density,
        max_density=d.max_density,
        gpu_memory_mib=_r(d.memory_mib, 1),
        gpu_memory_source=d.memory_source,
        busy_share=_r(d.busy_share, 4),
        busy_source=d.busy_source,
        cpu_cores=None if d.cpu_cores is None else _r(d.cpu_cores),
        cpu_limit=d.cpu_limit,
        profile=str(entry.profile),
        gpus=gpus,
        predicted_p50_ms=None if predicted.p50_ms is None else _r(predicted.p50_ms),
        prediction_source=predicted.source,
        prediction_error=predicted.error,
        serving="dedicated" if serving is None or serving.server is None else "shared",
        server=None if serving is None else serving.server,
        serving_reason="" if serving is None else serving.reason,
    )


def _nodes(
    packing: Placement,
    demands: dict[str, Demand],
    servers: dict[str, SharedServer],
    runtime_mib: float,
) -> tuple[list[float], list[float]]:
    """CPU cores and host MiB each node's processes need. Cores: the limit each was profiled
    under, else the cores it used (none measured: nothing counted); a shared server's, its
    limit, else its models' cores. Host memory: ``size.host``'s, one runtime a process."""
    nodes = max((g.node for g in packing.gpus), default=-1) + 1
    cores, host = [0.0] * nodes, [0.0] * nodes
    for g in packing.gpus:
        for r in g.replicas:
            server = servers.get(r.model)
            if server is not None:
                cores[g.node] += server.cpu_limit or sum(d.cpu_cores or 0.0 for d in server.models)
                host[g.node] += server.host_memory_mib
                continue
            d = demands[r.model]
            cores[g.node] += d.cpu_limit or d.cpu_cores or 0.0
            host[g.node] += process_host_mib([d], runtime_mib)
    return [round(c, 2) for c in cores], [round(h) for h in host]


def build_plan(
    fleet: Fleet,
    demands: list[Demand],
    packing: Placement,
    warnings: list[str],
    *,
    grouping: Grouping | None = None,
    process_per_replica_gpus: int | None = None,
) -> Plan:
    """The plan, without its pack specs and manifests (``size.run`` adds them). ``grouping``:
    the shared servers ``packing`` placed (none: every model dedicated);
    ``process_per_replica_gpus``: the GPUs with every model dedicated (none: ``packing``'s)."""
    price = fleet.gpu.price_per_hour
    requests = grouping.requests(demands) if grouping else [d.placed_as() for d in demands]
    bound = lower_bound(requests, fleet.gpu.memory_mib, fleet.context_reserve_mib,
                        fleet.utilization_target)  # fmt: skip
    servers = {s.name: s for s in grouping.servers} if grouping else {}
    planned = cost(len(packing.gpus), price)
    baseline = cost(sum(d.replicas for d in demands), price)
    # Looked up once: a fleet has thousands of models, a plan tens of thousands of replicas.
    entries = {m.name: m for m in fleet.models}
    gpus_of: dict[str, list[int]] = {d.model: [] for d in demands}
    sharing: Counter[str] = Counter()
    for g in packing.gpus:
        for r in g.replicas:
            server = servers.get(r.model)
            for name in [r.model] if server is None else [d.model for d in server.models]:
                gpus_of[name].append(g.index)
                sharing[name] = max(sharing[name], len(g.replicas))
    by_model = {d.model: d for d in demands}
    predict = Predictor(fleet.node.cpu_cores)
    serving = grouping.serving if grouping else {}
    server_of = {d.model: s for s in servers.values() for d in s.models}
    models = [
        _model(entries[d.model], d, gpus_of[d.model], sharing[d.model], predict,
               serving=serving.get(d.model), server=server_of.get(d.model))
        for d in demands
    ]  # fmt: skip
    notes = list(warnings)
    over = [m.name for m in models if m.predicted_p99_ms > m.slo_p99_ms]
    if over:
        notes.append(
            f"predicted p99 over the objective where replicas share a GPU (see each "
            f"model's prediction_source): {listed(over)}; profile at higher "
            "densities, or set max_replicas_per_gpu"
        )
    nodes, host = _nodes(packing, by_model, servers, fleet.host_memory_per_process_mib)
    crowded = [f"node {n} ({cores:g} cores)" for n, cores in enumerate(nodes)
               if cores > fleet.node.cpu_cores]  # fmt: skip
    if crowded:
        notes.append(
            f"the replicas' CPU (their profiles' limits, else what they used) is more than a "
            f"node's {fleet.node.cpu_cores:g} cores on {listed(crowded)}: give the nodes more "
            "cores, or fewer GPUs a node"
        )
    most = fleet.node.host_memory_mib
    full = [f"node {n} ({mib:,.0f} MiB)" for n, mib in enumerate(host) if most and mib > most]
    if full:
        notes.append(
            f"the processes' host memory (a {fleet.host_memory_per_process_mib} MiB runtime "
            f"each, and their models) is more than a node's {most:,} MiB on {listed(full)}: "
            "give the nodes more memory, or fewer GPUs a node"
        )
    if packing.unspread:
        notes.append(
            "replicas share a node although the plan has nodes enough for min_replicas: "
            + listed(packing.unspread)
        )
    return Plan(
        gpu_count=planned.gpus,
        lower_bound_gpus=bound.gpus,
        lower_bound=LowerBound(
            bound.by_memory, bound.by_compute, bound.by_density, bound.by_spread, bound.by_large
        ),
        above_bound=_r(planned.gpus / bound.gpus) if bound.gpus else None,
        node_count=math.ceil(planned.gpus / fleet.node.gpus),
        node_cpu_cores=nodes,
        node_host_memory_mib=host,
        gpu_hours_per_month=planned.gpu_hours_per_month,
        cost_per_month=_r(planned.per_month, 2),
        baseline_gpu_count=baseline.gpus,
        baseline_cost_per_month=_r(baseline.per_month, 2),
        saving_factor=_r(baseline.per_month / planned.per_month) if planned.per_month else None,
        gpu=fleet.gpu,
        node=fleet.node,
        utilization_target=fleet.utilization_target,
        context_reserve_mib=fleet.context_reserve_mib,
        models=models,
        gpus=[_gpu(g, by_model, servers, predict) for g in packing.gpus],
        warnings=notes,
        process_per_replica_gpu_count=(
            planned.gpus if process_per_replica_gpus is None else process_per_replica_gpus
        ),
        servers=[_server(s, gpus_of[s.models[0].model]) for s in servers.values()],
    )


def _server(s: SharedServer, gpus: list[int]) -> PlanServer:
    """``gpus``: those of its first model, which are its replicas'."""
    return PlanServer(s.name, s.replicas, [d.model for d in s.models], _r(s.memory_mib, 1),
                      _r(s.busy_share, 4), _r(s.load), s.cpu_limit, gpus,
                      "lru" if s.paged else None, list(s.paged),
                      _r(s.host_memory_mib, 1))  # fmt: skip


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

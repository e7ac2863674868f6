"""``build_plan``: the models' demands, their grouping and their packing made into a ``Plan``
(``size.plan.document``, the one type of ``plan.json``). Pure.

Each GPU's replicas with their predicted p50 and p99 beside their neighbours there (the models of
its other processes, at their planned rates), each model's demand, serving and where its
replicas went (its predictions at its worst GPU), the cost three ways and the lower bound, and
each node's CPU cores and host memory.
"""

from __future__ import annotations

import math

from sharedserve.placement import Placement, PlannedGpu
from sharedserve.size.bounds import cost, lower_bound
from sharedserve.size.demand import Demand
from sharedserve.size.fleet import Fleet, FleetModel, listed
from sharedserve.size.grouping import Grouping, Serving, SharedServer
from sharedserve.size.host import process_host_mib
from sharedserve.size.plan.document import (
    LowerBound,
    Plan,
    PlanCorrection,
    PlanGpu,
    PlanModel,
    PlannedReplica,
    PlanServer,
)
from sharedserve.size.predict import (
    MOST_REPLICAS,
    UNMEASURED,
    LatencyForecaster,
    PredictedLatency,
)

__all__ = ["build_plan"]


def _r(value: float, digits: int = 3) -> float:
    return round(value, digits)


def _predictions(
    gpu: PlannedGpu,
    demands: dict[str, Demand],
    servers: dict[str, SharedServer],
    predict: LatencyForecaster,
) -> dict[str, PredictedLatency]:
    """Each model's prediction on ``gpu``, beside the models of the GPU's other processes."""
    sharing = len(gpu.replicas)  # processes: a shared server's replica is one
    held = [
        [demands[r.model]] if r.model not in servers else servers[r.model].models
        for r in gpu.replicas
    ]
    out = {}
    for i, r in enumerate(gpu.replicas):
        others = [d for j, models in enumerate(held) if j != i for d in models]
        for d in held[i]:
            out[d.model] = predict(d, sharing, servers.get(r.model), others)
    return out


def _gpu(
    gpu: PlannedGpu,
    demands: dict[str, Demand],
    servers: dict[str, SharedServer],
    predictions: dict[str, PredictedLatency],
) -> PlanGpu:
    replicas = []
    for r in gpu.replicas:
        server = servers.get(r.model)
        held = [demands[r.model]] if server is None else server.models
        for d in held:
            predicted = predictions[d.model]
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


def _correction(predicted: PredictedLatency, replanned: str) -> PlanCorrection | None:
    c = predicted.correction
    if c is None or predicted.uncorrected_p99_ms is None:
        return None
    before = predicted.uncorrected_p50_ms
    return PlanCorrection(c.p99_factor, c.p50_factor, c.source,
                          None if before is None else _r(before),
                          _r(predicted.uncorrected_p99_ms), replanned)  # fmt: skip


def _model(
    entry: FleetModel,
    d: Demand,
    gpus: list[int],
    predicted: PredictedLatency,
    *,
    serving: Serving | None,
    replanned: str = "",
) -> PlanModel:
    """``predicted``: its prediction at its worst GPU; ``replanned``: what re-planning changed
    for its corrected p99, in words."""
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
        prediction_source="; ".join(filter(None, (predicted.source, predicted.interference))),
        prediction_error=predicted.error,
        serving="dedicated" if serving is None or serving.server is None else "shared",
        server=None if serving is None else serving.server,
        serving_reason="" if serving is None else serving.reason,
        correction=_correction(predicted, replanned),
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
    predict: LatencyForecaster | None = None,
    replanned: dict[str, str] | None = None,
) -> Plan:
    """The plan, without its pack specs and manifests (``size.run`` adds them). ``grouping``:
    the shared servers ``packing`` placed (none: every model dedicated);
    ``process_per_replica_gpus``: the GPUs with every model dedicated (none: ``packing``'s);
    ``predict``: a forecaster to reuse (none: a new one); ``replanned``: what re-planning
    changed for corrected models' objectives, by model (``size.run``)."""
    price = fleet.gpu.price_per_hour
    requests = grouping.requests(demands) if grouping else [d.placed_as() for d in demands]
    bound = lower_bound(requests, fleet.gpu.memory_mib, fleet.context_reserve_mib,
                        fleet.utilization_target)  # fmt: skip
    servers = {s.name: s for s in grouping.servers} if grouping else {}
    planned = cost(len(packing.gpus), price)
    baseline = cost(sum(d.replicas for d in demands), price)
    # Looked up once: a fleet has thousands of models, a plan tens of thousands of replicas.
    entries = {m.name: m for m in fleet.models}
    by_model = {d.model: d for d in demands}
    predict = predict or LatencyForecaster.for_fleet(fleet)
    on_gpu = {g.index: _predictions(g, by_model, servers, predict) for g in packing.gpus}
    gpus_of: dict[str, list[int]] = {d.model: [] for d in demands}
    worst: dict[str, tuple[float, int, PredictedLatency]] = {}
    unmeasured: set[str] = set()
    for g in packing.gpus:
        for r in g.replicas:
            server = servers.get(r.model)
            for name in [r.model] if server is None else [d.model for d in server.models]:
                gpus_of[name].append(g.index)
        for name, p in on_gpu[g.index].items():
            # Its worst GPU: the highest p99; of two as high, the more crowded.
            if name not in worst or (p.p99_ms, len(g.replicas)) > worst[name][:2]:
                worst[name] = (p.p99_ms, len(g.replicas), p)
            if p.interference == UNMEASURED.source:
                unmeasured.add(name)
    serving = grouping.serving if grouping else {}
    server_of = {d.model: s for s in servers.values() for d in s.models}

    def at_worst(d: Demand) -> PredictedLatency:
        """Its prediction at its worst GPU; on none (nothing placed), alone."""
        found = worst.get(d.model)
        return found[2] if found else predict(d, 0, server_of.get(d.model), [])

    models = [
        _model(
            entries[d.model],
            d,
            gpus_of[d.model],
            at_worst(d),
            serving=serving.get(d.model),
            replanned=(replanned or {}).get(d.model, ""),
        )
        for d in demands
    ]
    notes = list(warnings)
    if unmeasured:
        flagged = listed([d.model for d in demands if d.model in unmeasured])
        notes.append(
            "predicted beside other processes without a measured neighbourhood, so assuming "
            f"no interference: {flagged}; profile them with `profile --beside` (or at "
            "densities above 1)"
        )
    over = [m.name for m in models if m.predicted_p99_ms > m.slo_p99_ms and not m.correction]
    if over:
        notes.append(
            f"predicted p99 over the objective where replicas share a GPU (see each "
            f"model's prediction_source): {listed(over)}; profile at higher "
            "densities, or set max_replicas_per_gpu"
        )
    still = [m.name for m in models if m.predicted_p99_ms > m.slo_p99_ms and m.correction]
    if still:
        notes.append(
            f"predicted p99 over the objective as corrected by size --verify (see each "
            f"model's correction): {listed(still)}; no re-plan met it (a process of its own, "
            f"up to {MOST_REPLICAS}x its replicas, down to one process a GPU): relax its "
            "objective, or make the model faster"
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
        gpus=[_gpu(g, by_model, servers, on_gpu[g.index]) for g in packing.gpus],
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

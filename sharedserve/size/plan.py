"""A fleet plan: the models' demands packed onto GPUs, its cost against the baseline, the pack
spec of each GPU's share, and its Markdown. Pure.

``plan.json`` is the contract: ``gpu_count``, ``lower_bound_gpus`` (and each of its five
bounds), ``above_bound``, ``cost_per_month``, ``gpu_hours_per_month``, ``baseline_gpu_count``,
``baseline_cost_per_month`` (one replica per GPU: the fleet without sharing), ``saving_factor``,
``models`` (each model's demand and where its replicas went) and ``gpus`` (``{index, node,
replicas: [{model, gpu_memory_mib, busy_share}], memory_used_mib, busy_share, replica_limit}``),
with the ``warnings`` a reader must see (profiles from another GPU or a CPU, models not spread).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

from sharedserve.size.binpack import Packing, PlannedGpu
from sharedserve.size.bounds import cost, lower_bound
from sharedserve.size.demand import Demand
from sharedserve.size.fleet import Fleet, FleetModel, listed

__all__ = ["build_plan", "gpu_specs", "plan_markdown", "spec_name"]


def _r(value: float, digits: int = 3) -> float:
    return round(value, digits)


def _gpu(gpu: PlannedGpu, demands: dict[str, Demand]) -> dict[str, Any]:
    sharing = len(gpu.replicas)
    return {
        "index": gpu.index,
        "node": gpu.node,
        "replicas": [
            {
                "model": r.model,
                "gpu_memory_mib": _r(r.gpu_memory_mib, 1),
                "busy_share": _r(r.busy_share, 4),
                "predicted_p99_ms": _r(demands[r.model].p99_sharing(sharing)),
            }
            for r in gpu.replicas
        ],
        "memory_used_mib": _r(gpu.memory_mib, 1),
        "busy_share": _r(gpu.busy_share, 4),
        "replica_limit": gpu.densest,
    }


def _model(entry: FleetModel, d: Demand, gpus: list[int], sharing: int) -> dict[str, Any]:
    """``sharing``: the most replicas on a GPU holding one of its replicas."""
    return {
        "name": d.model,
        "replicas": d.replicas,
        "peak_qps": entry.peak_qps,
        "rate_per_replica": _r(d.rate_per_replica),
        "capacity_qps_per_replica": _r(d.capacity_qps),
        "slo_p99_ms": entry.slo_p99_ms,
        "p99_at_capacity_ms": _r(d.predicted_p99_ms),
        # On its most crowded GPU: what its users see at worst, and what verify holds it to.
        "predicted_p99_ms": _r(d.p99_sharing(sharing)),
        "measured_at_density": d.point.density,
        "max_density": d.max_density,
        "gpu_memory_mib": _r(d.memory_mib, 1),
        "gpu_memory_source": d.memory_source,
        "busy_share": _r(d.busy_share, 4),
        "busy_source": d.busy_source,
        "cpu_cores": None if d.cpu_cores is None else _r(d.cpu_cores),
        "cpu_limit": d.cpu_limit,
        "profile": str(entry.profile),
        "gpus": gpus,
    }


def _node_cpu(packing: Packing, demands: dict[str, Demand]) -> list[float]:
    """CPU cores each node's replicas need: the limit each was profiled under, else the cores it
    used (none measured: nothing counted)."""
    cores = [0.0] * (max((g.node for g in packing.gpus), default=-1) + 1)
    for g in packing.gpus:
        for r in g.replicas:
            d = demands[r.model]
            cores[g.node] += d.cpu_limit or d.cpu_cores or 0.0
    return [round(c, 2) for c in cores]


def build_plan(
    fleet: Fleet, demands: list[Demand], packing: Packing, warnings: list[str]
) -> dict[str, Any]:
    """The plan's JSON object."""
    price = fleet.gpu.price_per_hour
    bound = lower_bound(demands, fleet.gpu.memory_mib, fleet.context_reserve_mib,
                        fleet.utilization_target)  # fmt: skip
    planned = cost(len(packing.gpus), price)
    baseline = cost(sum(d.replicas for d in demands), price)
    # Looked up once: a fleet has thousands of models, a plan tens of thousands of replicas.
    entries = {m.name: m for m in fleet.models}
    gpus_of: dict[str, list[int]] = {d.model: [] for d in demands}
    sharing: Counter[str] = Counter()
    for g in packing.gpus:
        for r in g.replicas:
            gpus_of[r.model].append(g.index)
            sharing[r.model] = max(sharing[r.model], len(g.replicas))
    by_model = {d.model: d for d in demands}
    models = [_model(entries[d.model], d, gpus_of[d.model], sharing[d.model]) for d in demands]
    notes = list(warnings)
    over = [m["name"] for m in models if m["predicted_p99_ms"] > m["slo_p99_ms"]]
    if over:
        notes.append(
            f"predicted p99 over the objective where replicas share a GPU (its profile's "
            f"sequential row at that many replicas): {listed(over)}; profile at higher "
            "densities, or set max_replicas_per_gpu"
        )
    nodes = _node_cpu(packing, by_model)
    crowded = [f"node {n} ({cores:g} cores)" for n, cores in enumerate(nodes)
               if cores > fleet.node.cpu_cores]  # fmt: skip
    if crowded:
        notes.append(
            f"the replicas' CPU (their profiles' limits, else what they used) is more than a "
            f"node's {fleet.node.cpu_cores:g} cores on {listed(crowded)}: give the nodes more "
            "cores, or fewer GPUs a node"
        )
    if packing.unspread:
        notes.append(
            "replicas share a node although the plan has nodes enough for min_replicas: "
            + listed(packing.unspread)
        )
    return {
        "gpu_count": planned.gpus,
        "lower_bound_gpus": bound.gpus,
        "lower_bound": {
            "memory": bound.by_memory,
            "compute": bound.by_compute,
            "density": bound.by_density,
            "spread": bound.by_spread,
            "large": bound.by_large,
        },
        "above_bound": _r(planned.gpus / bound.gpus) if bound.gpus else None,
        "node_count": math.ceil(planned.gpus / fleet.node.gpus),
        "node_cpu_cores": nodes,
        "gpu_hours_per_month": planned.gpu_hours_per_month,
        "cost_per_month": _r(planned.per_month, 2),
        "baseline_gpu_count": baseline.gpus,
        "baseline_cost_per_month": _r(baseline.per_month, 2),
        "saving_factor": _r(baseline.per_month / planned.per_month) if planned.per_month else None,
        "gpu": {
            "name": fleet.gpu.name,
            "memory_mib": fleet.gpu.memory_mib,
            "price_per_hour": price,
            "max_gpus": fleet.gpu.max_gpus,
        },
        "node": {"gpus": fleet.node.gpus, "cpu_cores": fleet.node.cpu_cores},
        "utilization_target": fleet.utilization_target,
        "context_reserve_mib": fleet.context_reserve_mib,
        "models": models,
        "gpus": [_gpu(g, by_model) for g in packing.gpus],
        "warnings": notes,
    }


def spec_name(index: int) -> str:
    """The file name of GPU ``index``'s pack spec."""
    return f"gpu-{index:03d}.yaml"


def gpu_specs(plan: dict[str, Any], fleet: Fleet, out_dir: Path) -> list[dict[str, Any]]:
    """Each GPU's share as a pack spec (``pack --spec``) written in ``out_dir``: its models'
    replicas on one GPU, each with its planned memory as its cap (when measured: a
    model's files are not a cap), the CPU limit its profile was measured under, its objective
    and its share of the GPU's traffic as its weight. Needs every model's files (``model:``)."""
    models = {m["name"]: m for m in plan["models"]}
    files = {m.name: m.model for m in fleet.models}
    return [_spec(gpu, models, files, out_dir) for gpu in plan["gpus"]]


def _spec(
    gpu: dict[str, Any],
    models: dict[str, dict[str, Any]],
    files: dict[str, Path | None],
    out_dir: Path,
) -> dict[str, Any]:
    entries = []
    for name, count in Counter(r["model"] for r in gpu["replicas"]).items():
        model = models[name]
        path = files[name]
        if path is None:
            raise ValueError(f"model {name} has no files (model:) for a pack spec")
        entry: dict[str, Any] = {
            "model": os.path.relpath(path, out_dir),
            "name": name,
            "replicas": count,
        }
        # A measured figure (or the cap it ran under) is a cap; a model's files are only its
        # least need: pack then shares out what the GPU has, in proportion to them.
        if model["gpu_memory_source"] != "weights":
            entry["gpu_memory_mib"] = max(1, math.floor(model["gpu_memory_mib"]))
        entry |= {
            "slo_p99_ms": model["slo_p99_ms"],
            "weight": _r(model["rate_per_replica"] * count),
        }
        if model["cpu_limit"]:  # as its profile was measured
            entry["cpu_limit"] = model["cpu_limit"]
        entries.append(entry)
    # No `gpu:`: pack packs the share on the host's first GPU it fits (bundle), and runs it
    # without one too, caps recorded as not enforced, so a plan can be checked on a laptop.
    return {"models": entries}


def _money(value: float) -> str:
    return f"{value:,.0f}"


def plan_markdown(plan: dict[str, Any], specs: list[str]) -> str:
    """``plan.md``: the cost comparison first, then each model and each GPU."""
    gpu = plan["gpu"]
    lines = [
        "# Fleet plan",
        "",
        f"**{plan['gpu_count']} x {gpu['name']}** ({plan['node_count']} "
        f"node{'' if plan['node_count'] == 1 else 's'} of {plan['node']['gpus']}) at "
        f"{plan['utilization_target']:.0%} utilisation target, "
        f"{plan['context_reserve_mib']} MiB context reserve per replica.",
        "",
        "| | GPUs | GPU-hours / month | cost / month |",
        "|---|---|---|---|",
        f"| this plan | {plan['gpu_count']} | {plan['gpu_hours_per_month']:,.0f} | "
        f"{_money(plan['cost_per_month'])} |",
        f"| one replica per GPU | {plan['baseline_gpu_count']} | "
        f"{plan['baseline_gpu_count'] * 730:,} | {_money(plan['baseline_cost_per_month'])} |",
        "",
        f"Saving factor: **{plan['saving_factor']}x**. Lower bound: {plan['lower_bound_gpus']} "
        f"GPUs (memory {plan['lower_bound']['memory']}, compute {plan['lower_bound']['compute']}"
        f", density {plan['lower_bound']['density']}, spread {plan['lower_bound']['spread']}, "
        f"replicas that share with none {plan['lower_bound']['large']}); "
        f"this plan is {plan['above_bound']}x it.",
        "",
    ]
    kube = plan.get("kubernetes")
    if kube:
        lines += [
            f"Kubernetes: `{kube['manifests']}`, {kube['vgpus']} vGPUs of "
            f"{kube['vgpu_memory_mib']:,} MiB ({kube['gpus_worth']:g} GPUs' worth) with the "
            f"allocator at `{kube['allocator_flag']}`.",
            "",
        ]
    if plan["warnings"]:
        lines += ["## Warnings", "", *(f"- {w}" for w in plan["warnings"]), ""]
    lines += [
        "## Models",
        "",
        "| model | peak QPS | replicas | QPS / replica (capacity) | p99 objective ms | "
        "predicted p99 ms | memory MiB (source) | busy share (source) | densest |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in plan["models"]:
        lines.append(
            f"| {m['name']} | {m['peak_qps']:g} | {m['replicas']} | {m['rate_per_replica']:g} "
            f"({m['capacity_qps_per_replica']:g}) | {m['slo_p99_ms']:g} | "
            f"{m['predicted_p99_ms']:g} | {m['gpu_memory_mib']:g} ({m['gpu_memory_source']}) | "
            f"{m['busy_share']:.1%} ({m['busy_source']}) | {m['max_density']} |"
        )
    lines += [
        "",
        "## GPUs",
        "",
        "| GPU | node | replicas | memory MiB | busy | pack spec |",
        "|---|---|---|---|---|---|",
    ]
    for g in plan["gpus"]:
        models = Counter(r["model"] for r in g["replicas"])
        held = ", ".join(f"{m} x{n}" if n > 1 else m for m, n in models.items())
        spec = specs[g["index"]] if g["index"] < len(specs) else "-"
        lines.append(
            f"| {g['index']} | {g['node']} | {held} | {g['memory_used_mib']:,.0f} / "
            f"{gpu['memory_mib']:,} | {g['busy_share']:.1%} | {spec} |"
        )
    return "\n".join(lines) + "\n"

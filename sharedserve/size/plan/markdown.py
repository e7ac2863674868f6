"""``plan.md``: a fleet plan in Markdown, the cost comparison first, predicted against measured
last once ``size --verify`` has run some of its GPUs. Pure."""

from __future__ import annotations

from sharedserve.size.plan.document import Plan, PlanModel, kubernetes_summary
from sharedserve.size.plan.verified import Verified, verified_markdown

__all__ = ["plan_markdown"]


def _money(value: float) -> str:
    return f"{value:,.0f}"


def _predicted(m: PlanModel) -> str:
    p50 = "-" if m.predicted_p50_ms is None else f"{m.predicted_p50_ms:g}"
    return f"{p50} / {m.predicted_p99_ms:g} ({m.prediction_source})"


def _serving(m: PlanModel) -> str:
    return m.server if m.server is not None else m.serving


def plan_markdown(plan: Plan, specs: list[str], verified: Verified | None = None) -> str:
    """``plan.md``: the cost comparison first, then each model and each GPU, then the verify
    runs of it."""
    gpu, bound, nodes = plan.gpu, plan.lower_bound, plan.node_count
    lines = [
        "# Fleet plan",
        "",
        f"**{plan.gpu_count} x {gpu.name}** ({nodes} node{'' if nodes == 1 else 's'} of "
        f"{plan.node.gpus}) at {plan.utilization_target:.0%} utilisation target, "
        f"{plan.context_reserve_mib} MiB context reserve per process.",
        "",
        "| | GPUs | GPU-hours / month | cost / month |",
        "|---|---|---|---|",
        f"| this plan | {plan.gpu_count} | {plan.gpu_hours_per_month:,.0f} | "
        f"{_money(plan.cost_per_month)} |",
        f"| one replica per GPU | {plan.baseline_gpu_count} | "
        f"{plan.baseline_gpu_count * 730:,} | {_money(plan.baseline_cost_per_month)} |",
        *_per_process(plan),
        "",
        f"Saving factor: **{plan.saving_factor}x**. Lower bound: {plan.lower_bound_gpus} "
        f"GPUs (memory {bound.memory}, compute {bound.compute}, density {bound.density}, "
        f"spread {bound.spread}, replicas that share with none {bound.large}); "
        f"this plan is {plan.above_bound}x it.",
        "",
    ]
    kube = plan.kubernetes
    if kube:
        lines += [f"Kubernetes: `{kube.manifests}` holds {kubernetes_summary(plan)}.", ""]
    if plan.warnings:
        lines += ["## Warnings", "", *(f"- {w}" for w in plan.warnings), ""]
    lines += [
        "## Models",
        "",
        "| model | serving | peak QPS | replicas | QPS / replica (capacity) | p99 objective ms | "
        "predicted p50 / p99 ms (source) | memory MiB (source) | busy share (source) | densest |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in plan.models:
        lines.append(
            f"| {m.name} | {_serving(m)} | {m.peak_qps:g} | {m.replicas} | {m.rate_per_replica:g} "
            f"({m.capacity_qps_per_replica:g}) | {m.slo_p99_ms:g} | "
            f"{_predicted(m)} | {m.gpu_memory_mib:g} ({m.gpu_memory_source}) | "
            f"{m.busy_share:.1%} ({m.busy_source}) | {m.max_density} |"
        )
    if plan.servers:
        lines += [
            "",
            "## Shared servers",
            "",
            "| server | replicas | models | memory MiB (one reserve beside) | busy | load "
            "| host MiB (one runtime) | paged (paging: lru) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {s.name} | {s.replicas} | {', '.join(s.models)} | {s.gpu_memory_mib:,.0f} | "
            f"{s.busy_share:.1%} | {s.load:.0%} | {s.host_memory_mib:,.0f} | "
            f"{', '.join(s.paged) or '-'} |"
            for s in plan.servers
        ]
    if plan.node_host_memory_mib:
        most = f" of {plan.node.host_memory_mib:,}" if plan.node.host_memory_mib else ""
        lines += [
            "",
            "Host memory each node's processes need, MiB (a runtime a process, and their "
            f"models){most}: {', '.join(f'{h:,.0f}' for h in plan.node_host_memory_mib)}.",
        ]
    lines += _corrections(plan)
    lines += ["", "## Why each model is served as it is", ""]
    lines += [f"- {m.name}: {m.serving_reason or 'not stated'}" for m in plan.models]
    lines += ["", "## Predictions' expected error", ""]
    lines += [f"- {m.name}: {m.prediction_error or 'not stated'}" for m in plan.models]
    lines += [
        "",
        "## GPUs",
        "",
        "| GPU | node | replicas | memory MiB | busy | pack spec |",
        "|---|---|---|---|---|---|",
    ]
    for g in plan.gpus:
        spec = specs[g.index] if g.index < len(specs) else "-"
        lines.append(
            f"| {g.index} | {g.node} | {g.held()} | {g.memory_used_mib:,.0f} / "
            f"{gpu.memory_mib:,} | {g.busy_share:.1%} | {spec} |"
        )
    shown = verified_markdown(verified or Verified())
    if shown:
        lines += ["", *shown]
    return "\n".join(lines) + "\n"


def _per_process(plan: Plan) -> list[str]:
    """The cost row of a process per replica, packed: what the shared servers save."""
    gpus = plan.process_per_replica_gpu_count
    if gpus is None:
        return []
    per_gpu = plan.cost_per_month / plan.gpu_count if plan.gpu_count else 0.0
    return [
        f"| a process per replica, packed | {gpus} | {gpus * 730:,} | {_money(gpus * per_gpu)} |"
    ]


def _figures(p50: float | None, p99: float) -> str:
    return f"{'-' if p50 is None else f'{p50:g}'} / {p99:g}"


def _corrections(plan: Plan) -> list[str]:
    """The models ``size --verify`` runs corrected: by how much, from where, and what changed."""
    corrected = [m for m in plan.models if m.correction is not None]
    if not corrected:
        return []
    lines = [
        "",
        "## Corrections",
        "",
        "Predictions multiplied by what `size --verify` measured over what it predicted "
        "(`size --corrections`).",
        "",
        "| model | factor p50 | factor p99 | from | predicted p50 / p99 ms before -> after "
        "| re-planned |",
        "|---|---|---|---|---|---|",
    ]
    for m in corrected:
        c = m.correction
        assert c is not None
        p50 = "-" if c.p50_factor is None else f"{c.p50_factor:g}"
        lines.append(
            f"| {m.name} | {p50} | {c.p99_factor:g} | {c.source} | "
            f"{_figures(c.predicted_p50_ms_before, c.predicted_p99_ms_before)} -> "
            f"{_figures(m.predicted_p50_ms, m.predicted_p99_ms)} | {c.replanned or '-'} |"
        )
    return lines

"""``plan.html``: a fleet plan as one self-contained page. Pure.

The cost comparison comes first (what finance asks), then the models with where each figure came
from, then a bar per GPU for its memory and its busy share, each against its limit, so a reader
sees at a glance which resource fills the GPUs; last, once ``size --verify`` has run some of its
GPUs, predicted against measured (``verified``). Styles are ``report.html``'s, inlined.
"""

from __future__ import annotations

import re
from html import escape

from sharedserve.bench.report import CSS
from sharedserve.size.plan.document import Plan, PlanModel, kubernetes_summary
from sharedserve.size.plan.verified import VERIFIED_CSS, Verified, verified_html

__all__ = ["plan_html"]

_BARS = """
.meter {
  position: relative; width: 16rem; height: 0.9rem; background: var(--head); border-radius: 3px;
}
.models td:first-child, .models th:first-child, .bars td:nth-child(3), .bars th:nth-child(3) {
  text-align: left;
}
.meter > span {
  position: absolute; inset: 0 auto 0 0; background: var(--accent); border-radius: 3px;
}
.meter.busy > span { background: var(--warn); }
.meter > i { position: absolute; top: -2px; bottom: -2px; border-left: 2px dashed var(--bad); }
.cost td, .cost th { text-align: right; } .cost td:first-child { text-align: left; }
"""


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    cells = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>'


def _code(text: str) -> str:
    """Markdown's `code` spans as HTML, the rest escaped."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", escape(text))


def _meter(share: float, limit: float | None, kind: str) -> str:
    width = max(0.0, min(share, 1.0)) * 100
    mark = "" if limit is None else f'<i style="left:{limit * 100:.1f}%"></i>'
    return f'<div class="meter {kind}"><span style="width:{width:.1f}%"></span>{mark}</div>'


def _predicted(m: PlanModel) -> str:
    """p50 / p99 with their source; the error expected as the cell's tooltip."""
    p50 = "-" if m.predicted_p50_ms is None else f"{m.predicted_p50_ms:g}"
    return (
        f'<span title="{escape(m.prediction_error)}">{p50} / {m.predicted_p99_ms:g} '
        f"({escape(m.prediction_source)})</span>"
    )


def _serving(m: PlanModel) -> str:
    """Dedicated, or its server's name; why, as the cell's tooltip."""
    shown = m.server if m.server is not None else m.serving
    return f'<span title="{escape(m.serving_reason)}">{escape(shown)}</span>'


def _per_process(plan: Plan) -> list[list[str]]:
    """The cost row of a process per replica, packed: what the shared servers save."""
    gpus = plan.process_per_replica_gpu_count
    if gpus is None:
        return []
    per_gpu = plan.cost_per_month / plan.gpu_count if plan.gpu_count else 0.0
    return [["a process per replica, packed", f"{gpus:,}", f"{gpus * 730:,}",
             f"{gpus * per_gpu:,.0f}"]]  # fmt: skip


def _servers(plan: Plan) -> str:
    if not plan.servers:
        return ""
    rows = [[escape(s.name), str(s.replicas), escape(", ".join(s.models)),
             f"{s.gpu_memory_mib:,.0f}", f"{s.busy_share:.1%}", f"{s.load:.0%}",
             f"{s.host_memory_mib:,.0f}", escape(", ".join(s.paged)) or "-"]
            for s in plan.servers]  # fmt: skip
    head = ["server", "replicas", "models", "memory MiB", "busy", "load", "host MiB", "paged"]
    return (
        "<h2>Shared servers</h2><p>Each replica one process holding its models, with one "
        f"context reserve. Hover a model's serving for why.</p>{_table(head, rows)}"
    )


def plan_html(plan: Plan, verified: Verified | None = None) -> str:
    """The page, from the plan ``plan.json`` holds, and the verify runs of it (none: the page
    as before any)."""
    verified = verified or Verified()
    memory, target = float(plan.gpu.memory_mib), plan.utilization_target
    bound = plan.lower_bound
    cost = _table(
        ["", "GPUs", "GPU-hours / month", "cost / month"],
        [
            [
                "this plan",
                f"{plan.gpu_count:,}",
                f"{plan.gpu_hours_per_month:,.0f}",
                f"{plan.cost_per_month:,.0f}",
            ],
            [
                "one replica per GPU",
                f"{plan.baseline_gpu_count:,}",
                f"{plan.baseline_gpu_count * 730:,}",
                f"{plan.baseline_cost_per_month:,.0f}",
            ],
            *_per_process(plan),
        ],
        "cost",
    )
    verdict = (
        f"<h2>{plan.gpu_count:,} x {escape(plan.gpu.name)}, saving factor "
        f"{plan.saving_factor}x</h2><p>Lower bound {plan.lower_bound_gpus:,} GPUs (memory "
        f"{bound.memory}, compute {bound.compute}, density {bound.density}, spread "
        f"{bound.spread}, replicas that share with none {bound.large}): "
        f"this plan is {plan.above_bound}x it. "
        f"{target:.0%} utilisation target, {plan.context_reserve_mib} MiB context reserve per "
        "process, 730 hours a month.</p>"
    )
    kube = plan.kubernetes
    kubernetes = ""
    if kube:
        kubernetes = (
            f"<p>Kubernetes: <code>{escape(kube.manifests)}</code> holds "
            f"{_code(kubernetes_summary(plan))}.</p>"
        )
    warnings = "".join(f"<li>{escape(w)}</li>" for w in plan.warnings)
    models = _table(
        ["model", "serving", "peak QPS", "replicas", "QPS / replica", "capacity",
         "p99 objective ms", "predicted p50 / p99 ms", "memory MiB", "busy share", "densest"],
        [
            [escape(m.name), _serving(m), f"{m.peak_qps:g}", str(m.replicas),
             f"{m.rate_per_replica:g}", f"{m.capacity_qps_per_replica:g}",
             f"{m.slo_p99_ms:g}", _predicted(m),
             f"{m.gpu_memory_mib:g} ({escape(m.gpu_memory_source)})",
             f"{m.busy_share:.1%} ({escape(m.busy_source)})", str(m.max_density)]
            for m in plan.models
        ],
        "models",
    )  # fmt: skip
    gpus = _table(
        ["GPU", "node", "replicas", "memory", "", "busy", ""],
        [
            [str(g.index), str(g.node),
             escape(g.held()),
             f"{g.memory_used_mib:,.0f} MiB", _meter(g.memory_used_mib / memory, None, "mem"),
             f"{g.busy_share:.1%}", _meter(g.busy_share, target, "busy")]
            for g in plan.gpus
        ],
        "bars",
    )  # fmt: skip
    body = [
        "<h1>sharedserve fleet plan</h1>",
        f'<div class="verdict good">{verdict}{cost}{kubernetes}</div>',
        f"<h2>Warnings</h2><ul>{warnings}</ul>" if warnings else "",
        f"<h2>Models</h2>{models}",
        _servers(plan),
        f"<h2>GPUs</h2><p>Memory against the GPU's {memory:,.0f} MiB; busy share against the "
        f"{target:.0%} target (dashed).</p>{gpus}",
        verified_html(verified),
    ]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>sharedserve fleet plan</title><style>{CSS}{_BARS}"
        f"{VERIFIED_CSS if verified.runs else ''}</style></head>"
        f"<body><main>{''.join(body)}</main></body></html>\n"
    )

"""report.html's parts for a mix of models: the verdict by scale, a table of each model at each
scale beside the plot of each model's P99 against its own objective, and one of each real GPU.

The mix is judged model by model, each against its own objective, so the verdict names the
objectives and the model that missed first rather than one SLO for the page. Pure: it renders
parts of a report dict for ``page``.
"""

from __future__ import annotations

from typing import Any

from sharedserve.bench.judging import model_p99
from sharedserve.bench.mix import (
    GPU_COLUMNS,
    MODEL_COLUMNS,
    MODEL_PLOT,
    gpu_lines,
    model_lines,
    objectives,
    row_label,
    scale_of,
    several_patterns,
)
from sharedserve.bench.report.sigfig import count, sig3
from sharedserve.bench.report.table import NONE, Col, card, figure, over, table

__all__ = ["mix_sections", "mix_verdict"]

_KINDS: dict[str, Any] = {
    "weight": "setting", "slo_p99_ms": "setting", "cpu_limit": "setting", "slo_met": "yesno",
    "gpu_memory_fraction": "pct", "cpu_throttled_share": "pct", "uuid": "text", "name": "text",
}  # fmt: skip
_MODEL = [Col(k, h, _KINDS.get(k, "num")) for k, h in MODEL_COLUMNS]
_GPU = [Col(k, h, _KINDS.get(k, "num")) for k, h in GPU_COLUMNS]


def _lead(lines: list[dict[str, Any]], *names: Col) -> list[Col]:
    pattern = [Col("pattern", "pattern", "text")] if several_patterns(lines) else []
    return [Col("scale", "scale"), *pattern, *names]


def _severity(m: dict[str, Any]) -> float:
    """How badly a model missed: failing requests first, then P99 as a multiple of its SLO."""
    p99, slo = m.get("p99_ms"), m.get("slo_p99_ms")
    if m.get("errors") or m.get("dropped") or p99 is None or not slo:
        return float("inf")
    return float(p99) / float(slo)


def _failing(row: dict[str, Any], named: Any) -> str | None:
    """The model of a row that missed: the recommendation's when it names one of this row's,
    else the one that missed worst."""
    missed = {n: m for n, m in (row.get("models") or {}).items() if m.get("slo_met") is False}
    if named in missed:
        return str(named)
    return max(missed, key=lambda n: _severity(missed[n])) if missed else None


def _miss(m: dict[str, Any]) -> str:
    """How one model missed its objective, in words."""
    p99, slo = m.get("p99_ms"), m.get("slo_p99_ms")
    requests, dropped = m.get("requests") or 0, m.get("dropped") or 0
    failed = (m.get("errors") or 0) + dropped
    if not requests:
        return "completed no requests"
    if p99 is not None and slo and p99 > slo:
        return f"{model_p99(m)}, {over(p99, slo)} its {slo:g} ms SLO"
    if failed:
        share = sig3(100 * failed / (requests + dropped))
        return f"{count(failed)} of {count(requests + dropped)} failed ({share}%)"
    return "no request succeeded" if p99 is None else "missed its SLO"


def mix_verdict(report: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """The verdict's headline and cards: the recommended scale and what it gives, each model's
    objective, and the model that missed first above the recommendation."""
    rec = report.get("recommendation") or {}
    best = rec.get("scale")
    several = several_patterns(rows)
    cards = []
    for row in [r for r in rows if best is not None and scale_of(r) == best]:
        detail = [f"{count(row['density'])} replicas"] if row.get("density") is not None else []
        if row.get("scaling_efficiency") is not None:
            detail.append(f"scaling efficiency {sig3(row['scaling_efficiency'])}")
        qps = f"{sig3(row['qps'])} requests/s" if row.get("qps") is not None else NONE
        label = row_label(row, mix=True, pattern=several)
        cards.append(card(f"At {label}", qps, ", ".join(detail)))
    slos = objectives(rows)
    if all(s is None for s in slos.values()):
        cards.append(card("SLO", "none given", "slo_p99_ms in the spec, or --slo-p99-ms"))
    else:
        each = [f"{n} \u2264 {s:g} ms" if s is not None else f"{n}: none" for n, s in slos.items()]
        cards.append(card("SLO", "p99 per model", ", ".join(each) + "; errors under the limit"))
        missed = sorted(
            (r for r in rows
             if r.get("slo_met") is False and (best is None or (scale_of(r) or 0) > best)),
            key=lambda r: (scale_of(r) or 0, str(r.get("pattern"))),
        )  # fmt: skip
        name = _failing(missed[0], rec.get("failing_model")) if missed else None
        if missed and name is not None:
            value = f"{name} at {row_label(missed[0], mix=True, pattern=several)}"
            cards.append(card("First to miss the SLO", value, _miss(missed[0]["models"][name])))
        elif missed:
            label = row_label(missed[0], mix=True, pattern=several)
            cards.append(card("First to miss the SLO", label, "SLO missed"))
        elif rows:
            cards.append(card("First to miss the SLO", "none", "every scale measured met it"))
    if best is None:
        return "Recommended scale: none", cards
    density = rec.get("density")
    replicas = f" ({density} replica{'' if density == 1 else 's'})" if density is not None else ""
    return f"Recommended scale: {best}{replicas}", cards


def mix_sections(
    rows: list[dict[str, Any]], best: Any, images: dict[str, bytes]
) -> tuple[list[str], set[str]]:
    """The per-model section (with its plot) and, with a real GPU, the per-GPU one; and the
    names of the plots placed in them."""
    lines = model_lines(rows)
    marks = [
        "miss" if ln.get("slo_met") is False else "rec" if best is not None and ln["scale"] == best
        else ""
        for ln in lines
    ]  # fmt: skip
    lead = _lead(lines, Col("model", "model", "text"))
    parts = [f'<div class="table">{table(_MODEL, lines, lead, marks)}</div>']
    placed = set()
    if MODEL_PLOT in images:
        parts.append(figure(MODEL_PLOT, images[MODEL_PLOT]))
        placed.add(MODEL_PLOT)
    out = [
        "<section><h2>Per model (each against its own SLO)</h2>"
        f'<div class="pair">{"".join(parts)}</div></section>'
    ]
    gpus = gpu_lines(rows)
    if gpus:
        body = table(_GPU, gpus, _lead(gpus), [""] * len(gpus))
        out.append(f"<section><h2>Per GPU</h2>{body}</section>")
    return out, placed

"""The verdict on a report's rows: the scale to run, why, and which tails a CPU quota sets. Pure.

The recommendation is the largest scale whose every row met every model's own objective and can
be trusted (not unstable, load generator neither the limit nor late); its reason names the
scale above that missed and its models, worst first. Rows are ``bench.summary``'s, as
``report.json`` has them; each is read through its type (``bench.row.ReportRow``) before it is
judged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sharedserve.bench.judging import loadgen_trouble, pct, typed_model_miss
from sharedserve.bench.mix import typed_is_mix, typed_row_label, typed_several_patterns
from sharedserve.bench.row import ModelFigures, ReportRow, parse_row
from sharedserve.bench.windows import STABILITY_TOLERANCE

__all__ = ["TAIL_RATIO_NOTE", "THROTTLED_SHARE_NOTE", "recommend", "throttle_notes"]

#: A replica throttled by its CPU quota in at least this share of the CFS periods it ran in...
THROTTLED_SHARE_NOTE = 0.2
#: ...whose P99 is at least this many times its P50 has a tail its quota sets: the server's
#: threads stall until the next period (100 ms by default) whatever its neighbours do.
TAIL_RATIO_NOTE = 3.0


def _typed(rows: Sequence[Mapping[str, Any]]) -> list[ReportRow]:
    """Rows read into their type. A row from before mixes has no ``models``: it reads as a sweep
    of one model, as every view of a report reads it (``bench.mix``), so an old report's notes
    still render."""
    return [parse_row({"models": {}, **row}, f"rows[{i}]") for i, row in enumerate(rows)]


def _miss_severity(model: ModelFigures) -> float:
    """How far a model missed: failures first, then P99 over its objective (for ordering)."""
    if not model.requests or model.p99_ms is None or model.slo_p99_ms is None:
        return math.inf
    return math.inf if model.failed else model.p99_ms / model.slo_p99_ms


def _failing(row: ReportRow, max_error_rate: float) -> list[tuple[str, str]]:
    """The models of a row that missed their objective, worst first: (name, why)."""
    missed = [
        (name, m, m.slo_p99_ms)
        for name, m in row.models.items()
        if m.slo_met is False and m.slo_p99_ms is not None
    ]
    missed.sort(key=lambda item: -_miss_severity(item[1]))
    out = []
    for name, m, slo in missed:
        why = typed_model_miss(name, m, slo, max_error_rate)
        out.append((name, why or f"model {name} missed its objective"))
    return out


def _row_misses(row: ReportRow, max_error_rate: float) -> list[str]:
    """Why a row missed, model by model, worst first."""
    misses = [why for _, why in _failing(row, max_error_rate)]
    if not misses:
        misses.append("the SLO was not evaluated" if row.slo_met is None else "SLO missed")
    if len(misses) > 3:
        misses = [*misses[:3], f"and {len(misses) - 3} more"]
    return misses


def _label(rows: list[ReportRow], row: ReportRow) -> str:
    # One model: its replicas say it all; a mix: its scale and how many replicas that is.
    return typed_row_label(
        row, mix=typed_is_mix(rows), pattern=typed_several_patterns(rows), replicas=True
    )


def _objective(rows: list[ReportRow], slo_p99_ms: float | None, errors: str) -> str | None:
    """The objective in words: one figure when every model has the same, else "its own"."""
    slos = {m.slo_p99_ms for r in rows for m in r.models.values()}
    slos.discard(None)
    if not slos and slo_p99_ms is None:
        return None
    if len(slos) <= 1:
        slo = next(iter(slos)) if slos else slo_p99_ms
        return f"p99 <= {slo:g} ms with < {errors} errors"
    return f"its own p99 objective with < {errors} errors"


def recommend(
    rows: Sequence[Mapping[str, Any]],
    slo_p99_ms: float | None = None,
    max_error_rate: float = 0.001,
) -> dict[str, Any]:
    """The scale to run: ``{"scale", "density", "reason", "failing_model"}``.

    ``scale`` is the largest scale whose every row (one per pattern measured) has ``slo_met``
    True, is not ``unreliable`` and not unstable (``stable`` False; None, not judged, passes);
    ``density`` the replicas at that scale (for a density sweep of one model, the same number).
    The reason says what the objective was (``slo_p99_ms``, the run's, where every model has the
    same), which scale above it missed and which of its models missed worst (``failing_model``),
    and which rows were set aside because the load generator was CPU-bound or their windows never
    agreed. ``rows`` are read through ``ReportRow``; one not in its format is a ConfigError.
    """
    return _recommend(_typed(rows), slo_p99_ms, max_error_rate)


def _recommend(
    rows: list[ReportRow], slo_p99_ms: float | None, max_error_rate: float
) -> dict[str, Any]:
    none = {"scale": None, "density": None, "failing_model": None}
    slo = _objective(rows, slo_p99_ms, pct(max_error_rate))
    if slo is None:
        return {**none, "reason": "no SLO given (--slo-p99-ms, or slo_p99_ms in the spec)"}
    if not rows:
        return {**none, "reason": "nothing was measured"}
    ordered = sorted(rows, key=lambda r: (r.scale_or_density, r.pattern))
    unreliable = [r for r in ordered if r.unreliable]
    unstable = [r for r in ordered if r.stable is False]
    failed = [r for r in ordered if r.slo_met is not True]
    good = sorted(
        {r.scale_or_density for r in ordered}
        - {r.scale_or_density for r in unreliable}
        - {r.scale_or_density for r in unstable}
        - {r.scale_or_density for r in failed}
    )
    best = good[-1] if good else None
    sweep = not typed_is_mix(rows)
    noun = "density" if sweep else "scale"

    def why(row: ReportRow) -> str:
        return f"{_label(rows, row)} missed it: " + ", ".join(_row_misses(row, max_error_rate))

    notes = []
    next_failed = None
    if best is None:
        met = [r for r in ordered if r.slo_met is True]
        reason = (
            f"no {noun} met {slo}"
            if not met
            else f"no {noun} can be recommended: every one that met {slo} was set aside"
        )
        if failed:
            next_failed = failed[0]
            notes.append(why(failed[0]))
    else:
        best_row = next(r for r in ordered if r.scale_or_density == best)
        if sweep:
            reason = f"density {best} is the largest whose every model met {slo}"
        else:
            reason = (
                f"scale {best} ({best_row.density} replicas) is the largest at which every "
                f"model met {slo}"
            )
        above = [r for r in failed if r.scale_or_density > best]
        below = [r for r in failed if r.scale_or_density < best]
        if above:
            next_failed = above[0]
            notes.append(why(above[0]))
        elif not any(r.scale_or_density > best for r in ordered):
            notes.append(f"no larger {noun} was measured")
        if below:
            notes.append(f"though smaller {why(below[0])}, so the runs may be noisy")
    for row in unreliable:
        if best is None or row.scale_or_density > best:
            trouble = (
                loadgen_trouble(
                    {"loadgen_cpu_util": row.loadgen_cpu_util, "late_share": row.late_share}
                )
                or "the load generator lagged"
            )
            notes.append(
                f"{_label(rows, row)} is not trustworthy, so not recommended: {trouble}; the "
                "load generator's own delay is in its latencies"
            )
    for row in unstable:
        if best is None or row.scale_or_density > best:
            judged = len(row.windows)
            notes.append(
                f"{_label(rows, row)} is not recommended: unstable, its last windows never agreed "
                f"within {pct(STABILITY_TOLERANCE)} on QPS and p99 ({judged} windows measured); "
                "a longer --max-duration or --duration may let it settle"
            )
    unjudged = sorted({n for r in rows for n, m in r.models.items() if m.slo_p99_ms is None})
    if unjudged:
        notes.append(f"not judged, no objective: model {', '.join(unjudged)}")
    failing = _failing(next_failed, max_error_rate) if next_failed is not None else []
    return {
        "scale": best,
        "density": None if best is None else best_row.density,
        "reason": "; ".join([reason, *notes]),
        "failing_model": failing[0][0] if failing else None,
    }


def throttle_notes(rows: Sequence[Mapping[str, Any]], most: int = 5) -> list[str]:
    """Models whose P99 their own CPU quota sets: throttled in at least ``THROTTLED_SHARE_NOTE``
    of their CFS periods with a P99 at least ``TAIL_RATIO_NOTE`` times their P50. At most
    ``most`` notes, then how many more. ``rows`` are read through ``ReportRow``."""
    typed = _typed(rows)
    notes = []
    for row in typed:
        for m in row.per_model:
            share, p50, p99 = m.cpu_throttled_share, m.p50_ms, m.p99_ms
            if share is None or p50 is None or p99 is None or p50 <= 0:
                continue
            if share >= THROTTLED_SHARE_NOTE and p99 >= TAIL_RATIO_NOTE * p50:
                notes.append(
                    f"{_label(typed, row)}, model {m.name}: p99 {p99:.3g} ms (p50 {p50:.3g} ms) "
                    f"with its CPU quota throttling {share * 100:.0f}% of periods: the quota, not "
                    "its neighbours, sets the tail; try a larger --cpu-limit"
                )
    if len(notes) > most:
        notes = [*notes[:most], f"and {len(notes) - most} more models throttled likewise"]
    return notes

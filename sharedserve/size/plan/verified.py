"""The plan's "Predicted against measured" section: what ``size --verify`` runs of the plan's GPUs
measured, beside what the plan predicted. Pure: it takes the runs' ``verify.json`` contents.

A line per model per verified GPU: its predicted p50 and p99 on that GPU, each run's measured
ones, the first run's errors (``(predicted - measured) / measured``), how far later runs moved
from the first (``spread``), and whether it was within its targets, or that the measurement was
not one to trust. ``plan.md`` gets the table; ``plan.html`` the table and, above it, predicted p99
against measured p99 as a scatter plot: a point per line (a ``<title>`` each, the browser's
tooltip), the line where prediction meets measurement, the band of the p99 target around it, and
the runs' measured min..max as a horizontal bar. The targets are the ones each ``verify.json``
was judged by (its ``targets``), not this version's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sharedserve.size.plan.document import spec_index

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "VERIFIED_CSS",
    "Verified",
    "VerifyRun",
    "verified_html",
    "verified_lines",
    "verified_markdown",
]

TITLE = "Predicted against measured"
VERIFIED_CSS = """
figure.verified { margin: 1rem 0; } figure.verified svg { max-width: 100%; height: auto; }
.verified td:first-child, .verified th:first-child { text-align: left; }
"""
"""The section's styles, added to the page's only when it has the section."""
_P99_TARGET = 0.25
"""The band when no ``verify.json`` names its p99 target (``size.verify.advice.TARGETS``)."""
_WIDE = 10.0
"""Figures spanning more than this factor are plotted on log axes, or the small ones would sit
on the floor."""


@dataclass(frozen=True)
class VerifyRun:
    """One ``verify.json`` and where it was read (for the reader, as the plan's files name it)."""

    where: str
    result: Mapping[str, Any]


@dataclass(frozen=True)
class Verified:
    """The verify runs a plan's pages show, and how many files found were left out."""

    runs: tuple[VerifyRun, ...] = ()
    left_out: int = 0
    """``verify.json`` files found but not of this plan (or unreadable); said, not shown."""


@dataclass(frozen=True)
class VerifiedLine:
    """One model on one verified GPU."""

    model: str
    gpu: int | None
    """The plan's GPU the verify ran (its spec's number); None if its spec is not a GPU's."""
    predicted_p50_ms: float | None
    predicted_p99_ms: float | None
    p50_runs: tuple[float | None, ...]
    """Each run's measured p50, in order: the first is the one the errors are of."""
    p99_runs: tuple[float | None, ...]
    p50_error: float | None
    p99_error: float | None
    spread_p50: float | None
    spread_p99: float | None
    within_targets: bool | None
    """None: not judged (the measurement was not trustworthy, or an older run said nothing)."""
    trustworthy: bool

    def label(self, gpu: bool = True) -> str:
        """Its model, and its GPU where ``gpu`` (lines of several GPUs)."""
        return self.model if self.gpu is None or not gpu else f"{self.model} (GPU {self.gpu})"

    @property
    def judged(self) -> str:
        if not self.trustworthy:
            return "not trustworthy"
        return {True: "yes", False: "no", None: "-"}[self.within_targets]


def _runs(line: Mapping[str, Any], key: str) -> tuple[float | None, ...]:
    runs = line.get("runs") or [line]  # a verify.json from before repeats: its one run
    return tuple(run.get(key) for run in runs)


def verified_lines(verifies: Sequence[VerifyRun]) -> list[VerifiedLine]:
    """Every model line of every run, by GPU then model."""
    out = []
    for v in verifies:
        spec = v.result.get("spec")
        gpu = None if spec is None else spec_index(Path(str(spec)))
        trustworthy = v.result.get("trustworthy", True) is not False
        for line in v.result.get("models", []):
            out.append(
                VerifiedLine(
                    model=line["model"],
                    gpu=gpu,
                    predicted_p50_ms=line.get("predicted_p50_ms"),
                    predicted_p99_ms=line.get("predicted_p99_ms"),
                    p50_runs=_runs(line, "measured_p50_ms"),
                    p99_runs=_runs(line, "measured_p99_ms"),
                    p50_error=line.get("p50_error"),
                    p99_error=line.get("p99_error"),
                    spread_p50=line.get("spread_p50"),
                    spread_p99=line.get("spread_p99"),
                    within_targets=line.get("within_targets") if trustworthy else None,
                    trustworthy=trustworthy,
                )
            )
    return sorted(out, key=lambda ln: (math.inf if ln.gpu is None else ln.gpu, ln.model))


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


def _spread(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _cells(ln: VerifiedLine) -> list[str]:
    """The table's cells of a line, as text (the page escapes them)."""
    return [
        ln.model,
        "-" if ln.gpu is None else str(ln.gpu),
        f"{_figure(ln.predicted_p50_ms)} / {_figure(ln.predicted_p99_ms)}",
        ", ".join(_figure(v) for v in ln.p50_runs),
        ", ".join(_figure(v) for v in ln.p99_runs),
        f"{_share(ln.p50_error)} / {_share(ln.p99_error)}",
        f"{_spread(ln.spread_p50)} / {_spread(ln.spread_p99)}",
        ln.judged,
    ]


HEAD = [
    "model",
    "GPU",
    "predicted p50 / p99 ms",
    "measured p50 ms (each run)",
    "measured p99 ms (each run)",
    "error p50 / p99",
    "spread p50 / p99",
    "within target",
]


def _targets(verifies: Sequence[VerifyRun]) -> tuple[dict[str, float], dict[str, float]]:
    """The targets the first run was judged by, and its repeat targets."""
    first = verifies[0].result
    return dict(first.get("targets") or {}), dict(first.get("repeat_targets") or {})


def _about(verifies: Sequence[VerifyRun], left_out: int) -> str:
    """What the section shows, in words (Markdown and HTML alike, before escaping)."""
    targets, repeat = _targets(verifies)
    said = ", ".join(f"{'QPS' if k == 'qps' else k} within {v:.0%}" for k, v in targets.items())
    repeats = " and ".join(f"{k} {v:.0%}" for k, v in repeat.items())
    text = (
        f"From {len(verifies)} `size --verify` run{'s' if len(verifies) != 1 else ''} of this "
        "plan's GPUs. Error = (predicted - measured) / measured, of each verify's first run: "
        "negative, the plan was optimistic. Spread: how far later runs (`--repeat`) moved from "
        f"the first{f' (the measurement repeats within {repeats})' if repeats else ''}."
    )
    if said:
        text += f" Targets: {said}."
    if left_out:
        text += (
            f" {left_out} verify.json file{'s' if left_out != 1 else ''} left out: written "
            "against another plan.json, or unreadable."
        )
    return text


def verified_markdown(verified: Verified) -> list[str]:
    """The section's Markdown lines (none without a verify run)."""
    verifies = verified.runs
    if not verifies:
        return []
    lines = [f"## {TITLE}", "", _about(verifies, verified.left_out), ""]
    lines += [f"- {v.where}: {v.result.get('verdict', 'no verdict recorded')}" for v in verifies]
    lines += ["", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(_cells(ln)) + " |" for ln in verified_lines(verifies)]
    return lines


def verified_html(verified: Verified) -> str:
    """The section's HTML: the plot, then each run's verdict and the table (empty without a
    verify run)."""
    verifies = verified.runs
    if not verifies:
        return ""
    lines = verified_lines(verifies)
    targets, _ = _targets(verifies)
    about = escape(_about(verifies, verified.left_out)).replace("`", "")
    verdicts = "".join(
        f"<li>{escape(v.where)}: {escape(str(v.result.get('verdict', 'no verdict recorded')))}</li>"
        for v in verifies
    )
    head = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in _cells(ln)) + "</tr>" for ln in lines
    )
    plot = p99_plot(lines, targets.get("p99", _P99_TARGET))
    return (
        f'<h2 id="verified">{TITLE}</h2><p>{about}</p>'
        + (f'<figure class="verified">{plot}</figure>' if plot else "")
        + f'<ul>{verdicts}</ul><table class="verified"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def _plotted(lines: Sequence[VerifiedLine]) -> list[tuple[VerifiedLine, float, float, list[float]]]:
    """The lines with a p99 predicted and a first run measured: (line, measured, predicted,
    every run's measured)."""
    out = []
    for ln in lines:
        first, predicted = ln.p99_runs[0] if ln.p99_runs else None, ln.predicted_p99_ms
        if first is None or predicted is None or first <= 0 or predicted <= 0:
            continue
        out.append((ln, float(first), float(predicted), [float(v) for v in ln.p99_runs if v]))
    return out


_KINDS: dict[str, dict[str, Any]] = {
    "within target": {"color": "C2", "marker": "o"},
    "outside target": {"color": "C3", "marker": "o"},
    "not trustworthy": {"color": "0.5", "marker": "o", "markerfacecolor": "none"},
    "not judged": {"color": "0.5", "marker": "s", "markerfacecolor": "none"},
}


def _kind(ln: VerifiedLine) -> str:
    if not ln.trustworthy:
        return "not trustworthy"
    return {True: "within target", False: "outside target", None: "not judged"}[ln.within_targets]


def _tooltip(ln: VerifiedLine, measured: float, predicted: float) -> str:
    runs = ", ".join(_figure(v) for v in ln.p99_runs)
    spread = "" if ln.spread_p99 is None else f", spread {ln.spread_p99:.0%}"
    return (
        f"{ln.label()}: predicted p99 {predicted:g} ms, measured {measured:g} ms "
        f"(runs: {runs}{spread}), error {_share(ln.p99_error)}; {_kind(ln)}"
    )


def _axes(ax: Axes, low: float, high: float, band: float) -> None:
    """Both axes over the same range (log when it is wide), the y = x line and the band of
    predictions within ``band`` of the measurement."""
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    if high / low > _WIDE:
        ax.set_xscale("log")
        ax.set_yscale("log")
        # Milliseconds as a reader writes them (5, 20, 300), not as powers of ten.
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        low, high = low / 1.5, high * 1.5
        xs = np.geomspace(low, high, 64)
    else:
        low, high = 0.0, high * 1.2
        xs = np.linspace(low, high, 64)
    ax.fill_between(
        xs,
        xs * (1 - band),
        xs * (1 + band),
        color="C0",
        alpha=0.15,
        linewidth=0,
        label=f"predicted within ±{band:.0%} of measured",
        gid="verify-band",
    )
    ax.plot(
        [low, high],
        [low, high],
        "--",
        color="0.3",
        linewidth=1,
        label="predicted = measured",
        gid="verify-diagonal",
    )
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)


def p99_plot(lines: Sequence[VerifiedLine], band: float) -> str:
    """The scatter as an inline ``<svg>``; empty when no line has both figures."""
    from sharedserve.bench.report.plots import figure, legend, svg

    points = _plotted(lines)
    if not points:
        return ""
    values = [v for _, m, p, runs in points for v in (m, p, *runs)]
    fig, ax = figure(f"{TITLE}: p99 per model", size=(7.5, 6.0))
    _axes(ax, min(values), max(values), band)
    seen: set[str] = set()
    tooltips = {}
    several = len({ln.gpu for ln, *_ in points}) > 1
    for i, (ln, measured, predicted, runs) in enumerate(points):
        kind = _kind(ln)
        style = _KINDS[kind]
        if len(runs) > 1 and min(runs) < max(runs):
            ax.plot(
                [min(runs), max(runs)],
                [predicted, predicted],
                "-",
                color=style["color"],
                linewidth=1.5,
                gid=f"verify-spread-{i}",
            )
            tooltips[f"verify-spread-{i}"] = (
                f"{ln.label()}: measured p99 over {len(runs)} runs, "
                f"{min(runs):g} to {max(runs):g} ms"
            )
        ax.plot(
            [measured],
            [predicted],
            linestyle="none",
            markersize=7,
            gid=f"verify-point-{i}",
            label=None if kind in seen else kind,
            **style,
        )
        seen.add(kind)
        tooltips[f"verify-point-{i}"] = _tooltip(ln, measured, predicted)
        ax.annotate(
            ln.label(several),
            (measured, predicted),
            xytext=(5, 4),
            textcoords="offset points",
            fontsize="x-small",
        )
    ax.set_xlabel("measured p99 (ms): the first run; bar: every run's, min to max")
    ax.set_ylabel("predicted p99 (ms)")
    ax.grid(True, alpha=0.3)
    legend(ax)
    text = svg(fig)
    for gid, tip in tooltips.items():
        # matplotlib writes an artist with a gid as a group of that id; its <title> is what a
        # browser shows on hover and a screen reader reads.
        text = text.replace(f'<g id="{gid}">', f'<g id="{gid}"><title>{escape(tip)}</title>', 1)
    described = (
        f"<title>{TITLE}: predicted p99 (y) against measured p99 (x) of {len(points)} "
        f"model{'s' if len(points) != 1 else ''}; the table below has every figure</title>"
    )
    end = text.index(">") + 1
    return text[:end] + described + text[end:]

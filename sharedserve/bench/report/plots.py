"""The report's PNG plots: latency, throughput and GPU use against packing density.

A mix of models is plotted against its scale (the multiple of the spec's replicas) instead, and
gets one more plot: each model's P99 against the objective it is judged by, its own.

matplotlib's ``Figure`` with an explicit Agg canvas, never pyplot: pyplot picks a backend and
keeps figures in global state, which a library should not touch. matplotlib is imported only when
a plot is drawn, as it takes a noticeable part of a second to import and most commands never plot.
``figure``, ``legend``, ``png`` and ``svg`` are the one way sharedserve draws a plot: the fleet
plan's page (``size.plan.verified``) draws its own with them, as SVG inlined in the page.
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

from sharedserve.bench.mix import MODEL_PLOT, is_mix, model_lines, objectives, scale_of

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "GPU_KEYS",
    "PLOT_NAMES",
    "density_label",
    "draw_plots",
    "figure",
    "legend",
    "png",
    "svg",
]

PLOT_NAMES = (
    "p99_vs_density.png",
    MODEL_PLOT,
    "qps_vs_density.png",
    "gpu_vs_density.png",
)
"""Every plot a report may have, in the order reports show them."""
GPU_KEYS = ("gpu_util_mean", "gpu_util_max", "gpu_mem_used_mib")
"""Row keys of the GPU figures; the GPU plot is drawn only when one of them has a value."""


def _x(rows: list[dict[str, Any]]) -> dict[int, int]:
    """Where each row sits on the x axis, by its id: its scale in a mix, else its density."""
    mix = is_mix(rows)
    return {id(r): int(scale_of(r) if mix else r["density"]) for r in rows}


def _series(rows: list[dict[str, Any]], key: str) -> dict[str, tuple[list[int], list[float]]]:
    """Per pattern, x ascending and the values (NaN where null); patterns with no value at all
    are left out, so nothing empty is drawn or put in a legend."""
    out = {}
    x = _x(rows)
    for pattern in dict.fromkeys(r["pattern"] for r in rows):
        mine = sorted((r for r in rows if r["pattern"] == pattern), key=lambda r: x[id(r)])
        values = [math.nan if r.get(key) is None else float(r[key]) for r in mine]
        if not all(math.isnan(v) for v in values):
            out[pattern] = ([x[id(r)] for r in mine], values)
    return out


def _density_axis(ax: Axes, rows: list[dict[str, Any]]) -> None:
    # Densities and scales double (1, 2, 4, 8): a base-2 log axis spaces them evenly, ticks only
    # at them.
    ticks = sorted(set(_x(rows).values()))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, labels=[str(t) for t in ticks])
    ax.set_xticks([], minor=True)
    ax.set_xlabel(density_label(rows))
    ax.grid(True, alpha=0.3)


def density_label(rows: list[dict[str, Any]]) -> str:
    """The x axis's label: the replicas, and the GPU they shared when the rows name one (a real
    one: rows never name a simulated GPU); on a CPU-only run there is no GPU to name. A mix is
    plotted against its scale, whose replicas may be spread over several GPUs."""
    if is_mix(rows):
        return "scale"
    names = {r.get("gpu_name") for r in rows} - {None}
    return f"replicas on GPU {names.pop()}" if len(names) == 1 else "replicas"


def _models_p99(ax: Axes, rows: list[dict[str, Any]]) -> None:
    """Each model's P99 against the scale, with its own objective as a dashed line of its colour
    (none without one), a model being judged against its own, not the others'; and the axes'
    label and legend."""
    lines = model_lines(rows)
    patterns = list(dict.fromkeys(ln["pattern"] for ln in lines))
    for i, (name, slo) in enumerate(objectives(rows).items()):
        colour = f"C{i % 10}"
        for j, pattern in enumerate(patterns):
            mine = sorted(
                (ln for ln in lines if ln["model"] == name and ln["pattern"] == pattern),
                key=lambda ln: int(ln["scale"]),
            )
            ys = [math.nan if ln.get("p99_ms") is None else float(ln["p99_ms"]) for ln in mine]
            if all(math.isnan(y) for y in ys):
                continue
            label = name if len(patterns) == 1 else f"{name} ({pattern})"
            style = ("o-", "s-", "^-", "v-")[j % 4]
            ax.plot([int(ln["scale"]) for ln in mine], ys, style, color=colour, label=label)
        if slo is not None:
            ax.axhline(
                slo, color=colour, linestyle="--", linewidth=1, label=f"{name} SLO {slo:g} ms"
            )
    ax.set_ylabel("p99 latency (ms)")
    # Objectives of one mix span orders of magnitude (a classifier's 50 ms beside a ResNet's
    # second): on a linear axis the small model's line and objective would sit on the floor.
    ax.set_yscale("log")
    legend(ax)


def _draw(
    ax: Axes, rows: list[dict[str, Any]], key: str, label: str, *, style: str, colour: int
) -> None:
    """Plot one figure of the rows, a line per pattern that has any value of it."""
    patterns = list(dict.fromkeys(r["pattern"] for r in rows))
    several = len(patterns) > 1
    for pattern, (xs, ys) in _series(rows, key).items():
        # With several patterns the colour tells the pattern and the style the figure; with one,
        # each figure gets a colour of its own.
        c = f"C{patterns.index(pattern) if several else colour}"
        ax.plot(xs, ys, style, color=c, label=f"{label} ({pattern})" if several else label)


def _right(ax: Axes, rows: list[dict[str, Any]], key: str, label: str, colour: int) -> list[Axes]:
    """A second y axis with one more figure on it; none when the rows have no such figure."""
    values = [v for _, ys in _series(rows, key).values() for v in ys if not math.isnan(v)]
    if not values:
        return []
    right = ax.twinx()
    _draw(right, rows, key, label, style="^:", colour=colour)
    right.set_ylabel(label)
    # Autoscaling puts the highest point on the frame (a scaling efficiency of 1.0, hidden by it).
    right.set_ylim(0, max(values) * 1.15 or 1.0)
    return [right]


def figure(title: str, size: tuple[float, float] = (7.5, 4.5)) -> tuple[Figure, Axes]:
    """A figure of one plot (``size`` in inches) with its title, on its own Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(title)
    return fig, ax


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def svg(fig: Figure) -> str:
    """The figure as an ``<svg>`` element to inline in a page: its text as text (readable,
    searchable, a tenth of the size of glyph outlines), no XML prologue, and the same bytes for
    the same figure (no date, fixed ids), so a page re-rendered from the same files is the same."""
    import matplotlib

    buf = io.StringIO()
    # rc_context restores the settings on leaving: svg's text and id settings are only read from
    # rcParams, and nothing else here is changed.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "sharedserve"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]


def legend(*axes: Axes) -> None:
    """The axes' lines in one legend, below the plot."""
    handles, labels = [], []
    for ax in axes:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    if handles:
        # Below the plot, not on it: inside, it would sit over some line of one of the axes.
        axes[0].figure.legend(
            handles,
            labels,
            loc="outside lower center",
            ncols=min(3, len(handles)),
            fontsize="small",
        )


def draw_plots(rows: list[dict[str, Any]], slo_p99_ms: float | None) -> dict[str, bytes]:
    """PNG bytes by file name (``PLOT_NAMES``), for the plots the rows have data for: none
    without rows, no GPU plot without GPU figures, the per-model one only for a mix."""

    def against_rows(title: str) -> tuple[Figure, Axes]:
        fig, ax = figure(title)
        _density_axis(ax, rows)
        return fig, ax

    mix = is_mix(rows)
    against = "scale" if mix else "packing density"
    x = _x(rows)
    out: dict[str, bytes] = {}
    if any(r.get(k) is not None for r in rows for k in ("p50_ms", "p99_ms")):
        fig, ax = against_rows(f"Latency vs {against} (all models merged)")
        _draw(ax, rows, "p99_ms", "p99", style="o-", colour=0)
        _draw(ax, rows, "p50_ms", "p50", style="s--", colour=1)
        bad = [r for r in rows if r.get("unreliable") and r.get("p99_ms") is not None]
        if bad:
            ax.plot([x[id(r)] for r in bad], [r["p99_ms"] for r in bad], "x", color="red",
                    markersize=12, label="load generator CPU-bound")  # fmt: skip
        if slo_p99_ms is not None:
            ax.axhline(slo_p99_ms, color="red", linestyle=":", label=f"SLO p99 {slo_p99_ms:g} ms")
        ax.set_ylabel("latency (ms)")
        ax.set_ylim(bottom=0)
        legend(ax)
        out["p99_vs_density.png"] = png(fig)
    if mix and any(ln.get("p99_ms") is not None for ln in model_lines(rows)):
        fig, ax = against_rows("P99 per model vs scale (each against its own SLO)")
        _models_p99(ax, rows)
        out[MODEL_PLOT] = png(fig)
    if any(r.get("qps") is not None for r in rows):
        fig, ax = against_rows(f"Throughput vs {against}")
        _draw(ax, rows, "qps", "QPS", style="o-", colour=0)
        ax.set_ylabel("requests/s (all models)")
        ax.set_ylim(bottom=0)
        legend(ax, *_right(ax, rows, "scaling_efficiency", "scaling efficiency", 1))
        out["qps_vs_density.png"] = png(fig)
    if any(r.get(k) is not None for r in rows for k in GPU_KEYS):
        fig, ax = against_rows(f"GPU vs {against}")
        _draw(ax, rows, "gpu_util_mean", "util mean", style="o-", colour=0)
        _draw(ax, rows, "gpu_util_max", "util max", style="s--", colour=1)
        ax.set_ylabel("GPU utilization (%)")
        ax.set_ylim(0, 105)
        legend(ax, *_right(ax, rows, "gpu_mem_used_mib", "GPU memory used (MiB)", 2))
        out["gpu_vs_density.png"] = png(fig)
    return out

"""Report writers: JSON, CSV, Markdown, PNG plots and a self-contained HTML page.

``report.json`` is the contract (rows as built by ``summary.build_row``); every other file is a
view of it, written so that a report from a sweep cut short (zero or one row, null columns)
still reads well. The plots are drawn by ``plots``; the HTML page, laid out
for reading rather than as a dump, by ``page``, with the Markdown's
notes so the two say the same.

A mix of models (``sharedserve.bench.mix``) is reported by scale, with a line per model per scale
judged against that model's own objective (``report_models.csv``, a per-model table and plot) and,
with a real GPU, a line per GPU sampled. A sweep of one model reads as it always has.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sharedserve.bench.judging import LATE_LIMIT, LOADGEN_CPU_LIMIT, loadgen_trouble
from sharedserve.bench.limits import LIMITS_HEADERS, limits_table, without_limits
from sharedserve.bench.mix import (
    GPU_COLUMNS,
    MODEL_COLUMNS,
    gpu_lines,
    is_mix,
    model_lines,
    objectives,
    row_label,
    scale_of,
    several_patterns,
)
from sharedserve.bench.report.page import render_html
from sharedserve.bench.report.plots import GPU_KEYS, PLOT_NAMES, draw_plots
from sharedserve.bench.report.sigfig import as_recorded, row_cell
from sharedserve.bench.summary import MODEL_KEYS, PER_MODEL_KEYS, ROW_KEYS
from sharedserve.bench.verdict import throttle_notes
from sharedserve.files import write_atomic

__all__ = ["MODELS_COLUMNS", "PER_MODEL_COLUMNS", "ROW_COLUMNS", "write_report"]


def _old_first(keys: tuple[str, ...], added: tuple[str, ...]) -> tuple[str, ...]:
    # Keys added with mixes of models go last, so that a reader of an older report's CSV by
    # position still finds its columns where they were.
    return (*(k for k in keys if k not in added), *(k for k in keys if k in added))


# Lists and objects, null when not measured: no CSV column.
_HIST = "latency_histogram_ms"
_NESTED = ("per_model", "windows", "models", "gpus", _HIST)
ROW_COLUMNS = _old_first(tuple(k for k in ROW_KEYS if k not in _NESTED), ("scale",))
"""First columns of ``report.csv``: the scalar fields of a row. Any other scalar key the rows
carry follows, in the order first seen."""
PER_MODEL_COLUMNS = ("density", "pattern", *_old_first(PER_MODEL_KEYS, ("model", "dropped")))
"""First columns of ``report_per_model.csv`` (one line per replica per row); other keys follow."""
MODELS_COLUMNS = ("scale", "density", "pattern", "model", *(k for k in MODEL_KEYS if k != _HIST))
"""First columns of ``report_models.csv``, written for a mix of models only: one line per model
per row, its replicas' figures together; other keys follow."""

_TABLE = [  # (row key, heading) of the Markdown / HTML results table
    ("density", "density"), ("pattern", "pattern"), ("requests", "requests"),
    ("errors", "errors"), ("dropped", "dropped"), ("qps", "QPS"), ("p50_ms", "p50 ms"),
    ("p90_ms", "p90 ms"), ("p99_ms", "p99 ms"), ("p999_ms", "p99.9 ms"), ("max_ms", "max ms"),
    ("scaling_efficiency", "scaling eff."), ("gpu_util_mean", "GPU util mean %"),
    ("gpu_util_max", "GPU util max %"), ("gpu_mem_used_mib", "GPU mem MiB"),
    ("cpu_util_mean", "server CPU cores"), ("loadgen_cpu_util", "loadgen CPU"),
    ("stable", "stable"), ("late_share", "late share"), ("slo_met", "SLO met"),
]  # fmt: skip
_MODEL_HEADINGS = {  # per-model keys whose table heading is not the key itself
    "name": "model", "qps": "QPS", "p50_ms": "p50 ms", "p99_ms": "p99 ms",
    "gpu_mem_mib": "GPU mem MiB", "gpu_memory_fraction": "GPU mem cap",  # added by the sweep
    "cpu_throttled_share": "CPU throttled share", "cpu_throttled_ms": "CPU throttled ms",
}  # fmt: skip
_MIX_ROW = [("scale", "scale"), ("density", "replicas"), *_TABLE[1:]]  # a mix's results table


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _columns(base: tuple[str, ...], lines: list[dict[str, Any]]) -> tuple[str, ...]:
    """``base``, then every other scalar key in ``lines`` in the order first seen: the sweep adds
    figures of its own (a model's GPU memory), and a report should not silently drop them."""
    extra = dict.fromkeys(
        k for line in lines for k, v in line.items()
        if k not in base and k not in _NESTED and not isinstance(v, (list, dict))
    )  # fmt: skip
    return (*base, *extra)


def _model_lines(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per replica per row; in a mix, with the row's scale."""
    mix = is_mix(rows)
    return [
        {**({"scale": scale_of(r)} if mix else {}), "density": r.get("density"),
         "pattern": r.get("pattern"), **m}
        for r in rows
        for m in r.get("per_model") or []
    ]  # fmt: skip


def _csv(header: tuple[str, ...], lines: list[dict[str, Any]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([_cell(line.get(k)) for k in header] for line in lines)
    return buf.getvalue().encode()


# Blocks: what the Markdown and HTML renderers both draw from.
@dataclass(frozen=True)
class _Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class _Text:
    text: str
    banner: bool = False


@dataclass(frozen=True)
class _Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class _Bullets:
    items: list[str]


@dataclass(frozen=True)
class _Image:
    name: str
    alt: str


_Block = _Heading | _Text | _Table | _Bullets | _Image


def _mapping(data: Any) -> list[str]:
    if not isinstance(data, dict) or not data:
        return ["(none recorded)"]
    return [
        f"{k}: {v if isinstance(v, str) else json.dumps(v, default=str)}" for k, v in data.items()
    ]


def _notes(report: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    notes = []
    mix = is_mix(rows)
    limit = f"{LOADGEN_CPU_LIMIT * 100:.0f}% of a core"
    bad = [
        f"{row_label(r, mix=mix, pattern=True)} ({loadgen_trouble(r)})"
        for r in rows
        if loadgen_trouble(r)
    ]
    if bad:
        notes.append(
            "Not trustworthy (the load generator's own delay is in these rows' latencies; "
            f"never recommended): {'; '.join(bad)}."
        )
    elif any(r.get("loadgen_cpu_util") is not None for r in rows):
        late = f"; at most {LATE_LIMIT:.0%} of requests sent over 1 ms late"
        opened = any(r.get("late_share") is not None for r in rows)
        notes.append(
            f"No row was limited by the load generator (all under {limit}{late if opened else ''})."
        )
    unstable = [row_label(r, mix=mix, pattern=True) for r in rows
                if r.get("stable") is False]  # fmt: skip
    if unstable:
        notes.append(
            "Unstable rows (their last windows never agreed within 10% on QPS and p99 before "
            f"--max-duration; never recommended): {', '.join(unstable)}."
        )
    notes += throttle_notes(rows)
    gpu = "GPU columns are null without a real GPU: simulated GPUs are never reported as measured."
    if rows and not any(r.get(k) is not None for r in rows for k in GPU_KEYS):
        gpu += " No real GPU was sampled in this report, so there is no GPU plot."
    notes.append(gpu)
    notes.append(str(report.get("latency_resolution") or "Latency resolution not recorded."))
    unit = "scale" if mix else "density"
    notes.append(
        "QPS counts every request completed in the measured window, failed ones included; "
        f"scaling efficiency is QPS / ({unit} x QPS at {unit} 1) for the same pattern."
    )
    if mix:
        notes.append(
            "Scale s runs s times each model's replicas in the spec. Each model is judged by its "
            "replicas' latencies merged, against its own SLO; its throttled share and GPU memory "
            "are its highest replica's."
        )
    if any(r.get("pattern") == "poisson" for r in rows):
        notes.append(
            "Poisson (open loop) latencies count from each request's scheduled send time; "
            "requests dropped because too many were in flight count as failures for the SLO; "
            "late share is the share of requests sent more than 1 ms after their scheduled time."
        )
    return notes


def _recommendation(report: dict[str, Any], rows: list[dict[str, Any]]) -> list[_Block]:
    rec = report.get("recommendation") or {}
    reason = _Text(f"Reason: {rec.get('reason', 'no recommendation was made')}.")
    if not is_mix(rows):
        slo = report.get("slo_p99_ms")
        density = rec.get("density")
        return [
            _Text(f"Recommended density: {density if density is not None else 'none'}."),
            reason,
            _Text(f"SLO: p99 <= {slo:g} ms per model." if slo is not None else "SLO: none given."),
        ]
    scale, density = rec.get("scale"), rec.get("density")
    text = f"Recommended scale: {scale if scale is not None else 'none'}"
    if scale is not None and density is not None:
        text += f" ({density} replica{'' if density == 1 else 's'})"
    out = [_Text(text + ".")]
    if rec.get("failing_model"):
        out.append(_Text(f"First model to miss its SLO: **{rec['failing_model']}**."))
    slos = objectives(rows)
    each = [f"{n} <= {v:g} ms" if v is not None else f"{n} none" for n, v in slos.items()]
    return [*out, reason, _Text(f"SLO: p99 per model: {', '.join(each)}.")]


def _mix_tables(rows: list[dict[str, Any]]) -> list[_Block]:
    """A mix's per-model table (each model at each scale) and, with real GPUs, its per-GPU one."""
    lines = model_lines(rows)
    lead = ["scale", *(["pattern"] if several_patterns(lines) else []), "model"]
    keys = [*lead, *(k for k, _ in MODEL_COLUMNS)]
    headers = [*lead, *(h for _, h in MODEL_COLUMNS)]
    table = [[as_recorded(ln.get(k)) for k in keys] for ln in lines]
    blocks: list[_Block] = [_Heading("Per model"), _Table(headers, table)]
    gpus = gpu_lines(rows)
    if gpus:
        lead = ["scale", *(["pattern"] if several_patterns(gpus) else [])]
        keys = [*lead, *(k for k, _ in GPU_COLUMNS)]
        table = [[as_recorded(g.get(k)) for k in keys] for g in gpus]
        blocks += [_Heading("Per GPU"), _Table([*lead, *(h for _, h in GPU_COLUMNS)], table)]
    return blocks


def _replicas(rows: list[dict[str, Any]]) -> list[_Block]:
    """Each replica of each row: "Per model" for a sweep of one model (each replica was counted
    as a model of its own, and the one model's name on every line would say nothing), "Per
    replica" in a mix, led by its scale and model."""
    lines = _model_lines(rows)
    if not lines:
        return []
    columns = _columns(PER_MODEL_COLUMNS, lines)
    if not is_mix(rows):
        columns = tuple(k for k in columns if k != "model")
        headers = [_MODEL_HEADINGS.get(k, k) for k in columns]
        title = "Per model"
    else:
        pattern = ("pattern",) if several_patterns(lines) else ()
        lead = ("scale", *pattern, "model", "name")
        columns = (*lead, *(k for k in columns if k not in (*lead, "density", "pattern")))
        headers = [{"name": "replica"}.get(k) or _MODEL_HEADINGS.get(k, k) for k in columns]
        title = "Per replica"
    table = [[as_recorded(m.get(k)) for k in columns] for m in lines]
    return [_Heading(title), _Table(headers, table)]


def _blocks(report: dict[str, Any], plots: list[str]) -> list[_Block]:
    rows: list[dict[str, Any]] = list(report.get("rows") or [])
    mix = is_mix(rows)
    blocks: list[_Block] = [_Heading("sharedserve bench report", 1)]
    if report.get("partial"):
        blocks.append(
            _Text(
                "PARTIAL: the sweep has not finished (interrupted, or still running); only the "
                "rows below were measured.",
                True,
            )
        )
    blocks += [_Heading("Recommendation"), *_recommendation(report, rows), _Heading("Results")]
    if rows:
        cols = _MIX_ROW if mix else _TABLE
        table = [[row_cell(r, k, unreliable=" (unreliable)") for k, _ in cols] for r in rows]
        blocks.append(_Table([h for _, h in cols], table))
    else:
        blocks.append(_Text("No density was measured."))
    if mix:
        blocks += _mix_tables(rows)
    blocks += _replicas(rows)
    if plots:
        blocks.append(_Heading("Plots"))
        blocks += [_Image(name, name.removesuffix(".png").replace("_", " ")) for name in plots]
    blocks += [
        _Heading("Notes"),
        _Bullets(_notes(report, rows)),
        _Heading("Environment"),
        _Bullets(_mapping(report.get("environment"))),
        _Heading("Settings"),
        _Bullets(_mapping(without_limits(report.get("settings")))),
    ]
    limits = limits_table((report.get("settings") or {}).get("replica_limits"))
    if limits:
        blocks += [_Heading("Replica limits"), _Table(LIMITS_HEADERS, limits)]
    return blocks


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _markdown(blocks: list[_Block]) -> str:
    out = []
    for b in blocks:
        if isinstance(b, _Heading):
            out.append(f"{'#' * b.level} {b.text}")
        elif isinstance(b, _Text):
            out.append(f"> **{b.text}**" if b.banner else b.text)
        elif isinstance(b, _Table):
            lines = [b.headers, ["---"] * len(b.headers), *b.rows]
            out.append("\n".join("| " + " | ".join(map(_md_cell, ln)) + " |" for ln in lines))
        elif isinstance(b, _Bullets):
            out.append("\n".join(f"- {item}" for item in b.items))
        else:
            out.append(f"![{b.alt}]({b.name})")
    return "\n\n".join(out) + "\n"


def write_report(out_dir: Path, report: dict[str, Any]) -> list[Path]:
    """Write every report file into ``out_dir`` (created if needed); return the paths written.

    ``report.json`` is ``report`` as is (anything not JSON-native, such as a Path in the settings,
    as its string); ``report.csv`` has one line per row (``ROW_COLUMNS``, empty cells for null),
    ``report_per_model.csv`` one per replica per row and, for a mix of models only,
    ``report_models.csv`` one per model per row (``MODELS_COLUMNS``); ``report.md`` and
    ``report.html`` say the same, the HTML with its plots embedded so it is one self-contained
    file. A plot is drawn only when it has data: no GPU plot without GPU figures, none at all
    without rows.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = list(report.get("rows") or [])
    text = json.dumps(report, indent=2, default=str) + "\n"
    written = [write_atomic(out_dir / "report.json", text.encode())]
    written.append(write_atomic(out_dir / "report.csv", _csv(_columns(ROW_COLUMNS, rows), rows)))
    models = _model_lines(rows)
    per_model = _csv(_columns(PER_MODEL_COLUMNS, models), models)
    written.append(write_atomic(out_dir / "report_per_model.csv", per_model))
    # As with the plots: one left by an earlier report here must not pass for this one's.
    if is_mix(rows):
        mix = model_lines(rows)
        data = _csv(_columns(MODELS_COLUMNS, mix), mix)
        written.append(write_atomic(out_dir / "report_models.csv", data))
    else:
        (out_dir / "report_models.csv").unlink(missing_ok=True)
    images = draw_plots(rows, report.get("slo_p99_ms"))
    for name in PLOT_NAMES:
        # A plot left by an earlier report in this directory must not pass for this one's.
        if name in images:
            written.append(write_atomic(out_dir / name, images[name]))
        else:
            (out_dir / name).unlink(missing_ok=True)
    blocks = _blocks(report, list(images))
    written.append(write_atomic(out_dir / "report.md", _markdown(blocks).encode()))
    page = render_html(report, images, _notes(report, rows))
    written.append(write_atomic(out_dir / "report.html", page.encode()))
    return written

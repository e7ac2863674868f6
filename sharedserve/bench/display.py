"""What ``bench`` prints when it ends: the results table, the recommendation, where the report is.

A ``rich`` table on a terminal wide enough for it, as ``pack`` shows its replicas. Otherwise
plain text that is never cut: rich shrinks a table that does not fit by truncating its cells
(``58…``), which loses the numbers the table is for. Narrower terminals get the columns in
blocks that each fit, every block led by the density; output that is not a terminal (a log
file, CI, a pipe) has no width to fit, so it gets one aligned line per row, as ``kubectl get``
prints, whatever ``COLUMNS`` says. Prose (the recommendation) is never cut either: word-wrapped
on a terminal, one line each elsewhere so that a log can be searched for it.

A mix of models is led by its scale, and each model gets a line per scale under the table: its
QPS and P99 against its own objective, as it is judged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sharedserve.bench.judging import loadgen_trouble
from sharedserve.bench.mix import is_mix, model_lines, row_label, several_patterns
from sharedserve.bench.report import as_recorded, row_cell
from sharedserve.bench.verdict import throttle_notes

__all__ = [
    "COLUMNS",
    "MODEL_COLUMNS",
    "model_cells",
    "plain_table",
    "print_summary",
    "summary_cells",
]

COLUMNS = {
    "density": "density",
    "qps": "QPS",
    "p50_ms": "p50 ms",
    "p99_ms": "p99 ms",
    "p999_ms": "p99.9 ms",
    "errors": "errors",
    "dropped": "dropped",
    "scaling_efficiency": "scaling",
    "gpu_util_mean": "GPU %",
    "cpu_util_mean": "CPU cores",
    "loadgen_cpu_util": "loadgen",
    "slo_met": "SLO",
}
"""Row key -> heading of the columns printed, in order; the first leads every block."""
MIX_COLUMNS = {"scale": "scale", "density": "replicas"} | {
    k: v for k, v in COLUMNS.items() if k != "density"
}
"""``COLUMNS`` for a mix of models: led by the scale, the density (all replicas) after it."""
MODEL_COLUMNS = {
    "scale": "scale",
    "model": "model",
    "qps": "QPS",
    "p99_ms": "p99 ms",
    "slo_p99_ms": "SLO ms",
    "slo_met": "met",
}
"""A mix's line per model per scale: key -> heading."""

_GAP = "  "
_UNRELIABLE = " (!)"
_UNBOUNDED = 1 << 16


def _columns(report: dict[str, Any]) -> dict[str, str]:
    return MIX_COLUMNS if is_mix(list(report.get("rows") or [])) else COLUMNS


def summary_cells(report: dict[str, Any]) -> list[list[str]]:
    """One list of cells per row of the report, in ``COLUMNS`` order (a mix's, led by scale)."""
    return [
        [row_cell(row, key, unreliable=_UNRELIABLE, no="NO") for key in _columns(report)]
        for row in report.get("rows") or []
    ]


def model_cells(report: dict[str, Any]) -> list[list[str]]:
    """A mix's line per model per row, in ``MODEL_COLUMNS`` order; none for one model."""
    rows = list(report.get("rows") or [])
    if not is_mix(rows):
        return []
    return [[as_recorded(ln.get(k), no="NO") for k in MODEL_COLUMNS] for ln in model_lines(rows)]


def plain_table(headers: list[str], rows: list[list[str]], width: int | None) -> list[str]:
    """Right-aligned columns two spaces apart, no cell ever cut.

    With a ``width``, the columns after the first go into blocks (a blank line between them),
    each as wide as fits with the first column repeated at its head; a column too wide to fit
    even alone with the first gets a block of its own and overflows. Without, one block.
    """
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    blocks: list[list[int]] = []
    for i in range(1, len(headers)):
        used = sum(widths[j] + len(_GAP) for j in blocks[-1]) if blocks else 0
        if blocks and (width is None or widths[0] + used + len(_GAP) + widths[i] <= width):
            blocks[-1].append(i)
        else:
            blocks.append([i])
    lines: list[str] = []
    for block in blocks or [[]]:
        if lines:
            lines.append("")
        for cells in (headers, *rows):
            lines.append(_GAP.join(cells[j].rjust(widths[j]) for j in [0, *block]))
    return lines


def _rich_table(title: str, headers: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for header in headers:
        table.add_column(header, justify="right", no_wrap=True)
    for cells in rows:
        table.add_row(*cells)
    return table


def _line(console: Console, text: str, *, prose: bool = False) -> None:
    """Print ``text`` as it is. Prose on a terminal is wrapped at word boundaries; anything else
    is left for the terminal to fold (or the log to keep on one line), never cut by rich."""
    wrap = prose and console.is_terminal
    console.print(text, soft_wrap=not wrap, markup=False, highlight=False)


def _table(console: Console, title: str, headers: list[str], rows: list[list[str]]) -> None:
    table = _rich_table(title, headers, rows)
    # Measured without room to spare, the table reports the width it needs, not the one it has.
    natural = console.measure(table, options=console.options.update_width(_UNBOUNDED)).maximum
    if console.is_terminal and natural <= console.width:
        console.print(table)
    else:
        _line(console, title)
        width = console.width if console.is_terminal else None
        for line in plain_table(headers, rows, width):
            _line(console, line.rstrip())


def _unjudged(report: dict[str, Any]) -> bool:
    """Whether no row had an objective to judge (a row's ``slo_met`` is None then)."""
    rows = list(report.get("rows") or [])
    return bool(rows) and all(row.get("slo_met") is None for row in rows)


def print_summary(
    console: Console,
    report: dict[str, Any],
    out_dir: Path,
    objective_hint: str | None = None,
) -> None:
    """Print the results table (and a mix's per-model lines), the recommendation and the
    report's path on ``console``. Without any objective there is nothing to recommend, which is
    no failure: the line says so, and ``objective_hint`` what would judge the rows."""
    objective_hint = objective_hint or "pass --slo-p99-ms to judge the rows and recommend one"
    title = "sharedserve bench" + (" (PARTIAL)" if report.get("partial") else "")
    _table(console, title, list(_columns(report).values()), summary_cells(report))
    mix = is_mix(list(report.get("rows") or []))
    if mix:
        _table(console, "per model", list(MODEL_COLUMNS.values()), model_cells(report))
    rows = list(report.get("rows") or [])
    for row in rows:
        trouble = loadgen_trouble(row)
        if trouble is not None:
            label = row_label(row, mix=mix, pattern=several_patterns(rows))
            _line(
                console,
                f"(!) NOT TRUSTWORTHY, {label}: {trouble}; its "
                "own delay is in the latencies, so the row is never recommended",
                prose=True,
            )
    for row in report.get("rows") or []:
        if row.get("stable") is False:
            _line(
                console,
                f"(!) {row_label(row, mix=mix)} is unstable: its last windows never agreed within "
                "10% on QPS and p99 before --max-duration; never recommended",
                prose=True,
            )
    for note in throttle_notes(list(report.get("rows") or [])):
        _line(console, f"note: {note}", prose=True)
    recommendation = report.get("recommendation") or {}
    if _unjudged(report) and recommendation.get("density") is None:
        judged = f"objective: none given; measured, not judged ({objective_hint})"
        _line(console, judged, prose=True)
        _line(console, f"report: {out_dir / 'report.html'}")
        return
    density = recommendation.get("density")
    reason = recommendation.get("reason") or "no recommendation was made"
    chosen = "none" if density is None else str(density)
    if mix and recommendation.get("scale") is not None:
        chosen = f"scale {recommendation['scale']}"
        if density is not None:
            chosen += f" ({density} replica{'' if density == 1 else 's'})"
    _line(console, f"recommendation: {chosen} — {reason}", prose=True)
    _line(console, f"report: {out_dir / 'report.html'}")

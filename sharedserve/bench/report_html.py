"""``report.html``: the bench report as a page to forward, not a dump of ``report.json``.

The verdict comes first: the recommended density, the SLO, and which model missed it first and by
how much. Then one section per question (latency, throughput, GPU), each a narrow table beside the
plot drawn from it, so the page fits 1280 px with no horizontal scrolling. Measurements are shown
to three significant figures and counts exactly; a column with no value in any row (GPU figures
on a CPU run, the SLO without one) is left out. One self-contained file: CSS inline, plots as
base64 PNG, no script and no link out, and a print stylesheet.

Pure: it renders a report dict; ``sharedserve.bench.report`` writes it.
"""

from __future__ import annotations

import base64
import html
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sharedserve.bench.limits import LIMITS_HEADERS, limits_table, without_limits
from sharedserve.bench.report_css import CSS
from sharedserve.bench.sigfig import count, sig3

__all__ = ["render_html"]

_esc = html.escape
_NONE = "\u2014"  # an em dash: this figure was not measured in this row
_DOT = " \u00b7 "


@dataclass(frozen=True)
class _Col:
    """A table column: the key of the row (or per-model line) it shows, and its heading."""

    key: str
    heading: str
    kind: Literal["num", "pct", "loadgen", "yesno", "text"] = "num"
    """``num``: three significant figures, counts exact; ``pct``: a fraction, as a percentage;
    ``loadgen``: ``pct``, marked when the row is unreliable; ``yesno``; ``text``: left-aligned."""


_LATENCY = (
    _Col("p50_ms", "p50"), _Col("p90_ms", "p90"), _Col("p99_ms", "p99"),
    _Col("p999_ms", "p99.9"), _Col("max_ms", "max"), _Col("late_share", "sent late", "pct"),
    _Col("stable", "stable", "yesno"), _Col("slo_met", "SLO met", "yesno"),
)  # fmt: skip
_THROUGHPUT = (
    _Col("requests", "requests"), _Col("errors", "errors"), _Col("dropped", "dropped"),
    _Col("qps", "QPS"), _Col("scaling_efficiency", "scaling eff."),
    _Col("cpu_util_mean", "server CPU cores"), _Col("loadgen_cpu_util", "loadgen CPU", "loadgen"),
)  # fmt: skip
_GPU = (
    _Col("gpu_name", "GPU", "text"), _Col("gpu_util_mean", "util mean %"),
    _Col("gpu_util_max", "util max %"), _Col("gpu_mem_used_mib", "memory used MiB"),
)  # fmt: skip
_SECTIONS = (  # (heading, table columns, the plot drawn from the same figures)
    ("Latency (ms, all models merged)", _LATENCY, "p99_vs_density.png"),
    ("Throughput and CPU", _THROUGHPUT, "qps_vs_density.png"),
    ("GPU", _GPU, "gpu_vs_density.png"),
)
# Row keys said elsewhere on the page (or derived from what is); any other scalar key a row
# carries goes in "Other figures", so a figure added to the rows is never silently dropped.
_SAID = {"density", "pattern", "duration_s", "error_rate", "unreliable", "per_model"}
_MODEL = (
    _Col("name", "model", "text"), _Col("requests", "requests"), _Col("errors", "errors"),
    _Col("qps", "QPS"), _Col("p50_ms", "p50 ms"), _Col("p99_ms", "p99 ms"),
)  # fmt: skip
_MODEL_EXTRA = {  # per-model keys the sweep adds
    "gpu_mem_mib": _Col("gpu_mem_mib", "GPU mem MiB"),
    "gpu_memory_fraction": _Col("gpu_memory_fraction", "GPU mem cap", "pct"),
    "cpu_throttled_share": _Col("cpu_throttled_share", "CPU throttled", "pct"),
    "cpu_throttled_ms": _Col("cpu_throttled_ms", "throttled ms"),
}


def _number(value: Any) -> str:
    if value is None:
        return _NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return count(value)
    if isinstance(value, float):
        return sig3(value)
    return str(value)


def _cell(col: _Col, line: dict[str, Any]) -> str:
    """One ``<td>``; a failed SLO or an unreliable row is marked by class, not colour alone."""
    value = line.get(col.key)
    if value is None:
        return f'<td class="none">{_NONE}</td>'
    if col.kind == "yesno":
        return f'<td class="{"ok" if value else "bad"}">{"yes" if value else "no"}</td>'
    if col.kind in ("pct", "loadgen"):
        text = f"{sig3(float(value) * 100)}%"
        if col.kind == "loadgen" and line.get("unreliable"):
            return f'<td class="bad">{text} <span class="tag">unreliable</span></td>'
        return f"<td>{text}</td>"
    if col.kind == "text":
        return f'<td class="text">{_esc(str(value))}</td>'
    return f"<td>{_esc(_number(value))}</td>"


def _applies(col: _Col, lines: list[dict[str, Any]]) -> bool:
    """Whether a column says anything: some line has a value, drops only where a loop can drop
    (an open loop) or some were counted, and the GPU's name only when it differs between rows
    (else the section's heading names it)."""
    if all(line.get(col.key) is None for line in lines):
        return False
    if col.key == "gpu_name":
        return len({ln.get("gpu_name") for ln in lines}) > 1
    if col.key == "dropped":
        return any(ln.get("pattern") == "poisson" or ln.get("dropped") for ln in lines)
    return True


def _table(
    cols: Sequence[_Col], lines: list[dict[str, Any]], lead: Sequence[_Col], marks: list[str]
) -> str:
    """A table of the columns that apply, after the ``lead`` columns that name each line;
    ``marks`` is each line's CSS class ("" for none)."""
    shown = [*lead, *(c for c in cols if _applies(c, lines))]
    left = ' class="text"'
    head = "".join(
        f'<th scope="col"{left if c.kind == "text" else ""}>{_esc(c.heading)}</th>' for c in shown
    )
    body = "".join(
        (f'<tr class="{mark}">' if mark else "<tr>")
        + "".join(_cell(c, ln) for c in shown)
        + "</tr>"
        for ln, mark in zip(lines, marks, strict=True)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _lead(lines: Iterable[dict[str, Any]]) -> list[_Col]:
    several = len({ln.get("pattern") for ln in lines}) > 1
    return [_Col("density", "density"), *([_Col("pattern", "pattern", "text")] if several else [])]


def _row_mark(row: dict[str, Any], best: Any) -> str:
    if row.get("slo_met") is False:
        return "miss"
    if row.get("unreliable"):
        return "unreliable"
    return "rec" if best is not None and row.get("density") == best else ""


def _png_size(data: bytes) -> tuple[int, int] | None:
    # The IHDR chunk leads every PNG; its size lets the browser lay the page out before decoding.
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return width, height
    return None


def _figure(name: str, data: bytes) -> str:
    alt = name.removesuffix(".png").replace("_", " ")
    size = _png_size(data)
    dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
    src = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return f'<figure><img alt="{_esc(alt)}"{dims} src="{src}"></figure>'


def _by(value: float, limit: float) -> str:
    ratio = value / limit
    return f"{sig3((ratio - 1) * 100)}% over" if ratio < 2 else f"{sig3(ratio)} times"


def _worst_model(row: dict[str, Any], slo: float) -> str:
    """Which model of a row that missed the SLO missed it worst, and by how much."""
    models = list(row.get("per_model") or [])
    slow = [m for m in models if m.get("p99_ms") is not None and m["p99_ms"] > slo]
    if slow:
        m = max(slow, key=lambda m: float(m["p99_ms"]))
        return f"{m['name']}: p99 {sig3(m['p99_ms'])} ms, {_by(m['p99_ms'], slo)} the SLO"
    failing = [m for m in models if m.get("errors") and m.get("requests")]
    if failing:
        m = max(failing, key=lambda m: m["errors"] / m["requests"])
        share = sig3(100 * m["errors"] / m["requests"])
        return f"{m['name']}: {count(m['errors'])} of {count(m['requests'])} failed ({share}%)"
    for m in models:
        if not m.get("requests"):
            return f"{m['name']}: completed no requests"
        if m.get("p99_ms") is None:
            return f"{m['name']}: no request succeeded"
    dropped = row.get("dropped") or 0
    if dropped:
        attempted = count(dropped + (row.get("requests") or 0))
        return f"{count(dropped)} of {attempted} requests dropped (too many in flight)"
    return "missed the SLO"


def _label(row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    several = len({r.get("pattern") for r in rows}) > 1
    return f"density {row.get('density')}" + (f" ({row.get('pattern')})" if several else "")


def _card(label: str, value: str, detail: str) -> str:
    return (
        f'<div class="card"><div class="label">{_esc(label)}</div>'
        f'<div class="value">{_esc(value)}</div><div class="detail">{_esc(detail)}</div></div>'
    )


def _verdict(report: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The recommended density and what it gives, the SLO, and what missed it first above."""
    rec = report.get("recommendation") or {}
    best, slo = rec.get("density"), report.get("slo_p99_ms")
    cards = []
    at_best = [r for r in rows if best is not None and r.get("density") == best]
    for row in at_best:
        detail = [f"p99 {sig3(row['p99_ms'])} ms"] if row.get("p99_ms") is not None else []
        if row.get("scaling_efficiency") is not None:
            detail.append(f"scaling efficiency {sig3(row['scaling_efficiency'])}")
        qps = f"{sig3(row['qps'])} requests/s" if row.get("qps") is not None else _NONE
        cards.append(_card(f"At {_label(row, rows)}", qps, ", ".join(detail)))
    if slo is None:
        cards.append(_card("SLO", "none given", "set one with --slo-p99-ms"))
    else:
        cards.append(
            _card("SLO", f"p99 \u2264 {slo:g} ms", "for every model, and errors under the limit")
        )
        judged = sorted(
            (r for r in rows if r.get("slo_met") is False),
            key=lambda r: (r.get("density") or 0, str(r.get("pattern"))),
        )
        above = [r for r in judged if best is None or (r.get("density") or 0) > best]
        if above:
            cards.append(
                _card("First to miss the SLO", _label(above[0], rows), _worst_model(above[0], slo))
            )
        elif rows:
            cards.append(_card("First to miss the SLO", "none", "every density measured met it"))
    mark = "good" if best is not None else "bad"
    headline = f"Recommended density: {best if best is not None else 'none'}"
    if best is not None:
        headline += " replica" if best == 1 else " replicas"
        if any(r.get(k) is not None for r in rows for k in ("gpu_name", *(c.key for c in _GPU))):
            headline += " per GPU"
    reason = rec.get("reason", "no recommendation was made")
    return (
        f'<section id="verdict" class="verdict {mark}"><h2>{_esc(headline)}</h2>'
        f'<div class="cards">{"".join(cards)}</div>'
        f'<p class="reason"><strong>Why:</strong> {_esc(reason)}.</p></section>'
    )


def _plain(value: Any) -> str:
    """A setting or environment value in words."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {_plain(v)}" for k, v in value.items()) or _NONE
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value) or _NONE
    if isinstance(value, float):
        return f"{value:g}"  # as given: a setting, not a measurement
    return _number(value) if not isinstance(value, str) else value


def _pairs(title: str, data: Any) -> str:
    items = data.items() if isinstance(data, dict) and data else [("", "(none recorded)")]
    body = "".join(
        f'<tr><th scope="row">{_esc(str(k))}</th><td class="text">{_esc(_plain(v))}</td></tr>'
        for k, v in items
    )
    return f'<div><h3>{_esc(title)}</h3><table class="pairs"><tbody>{body}</tbody></table></div>'


def _limits(settings: Any) -> str:
    rows = limits_table((settings or {}).get("replica_limits"))
    if not rows:
        return ""
    head = "".join(f'<th class="text">{_esc(h)}</th>' for h in LIMITS_HEADERS)
    body = "".join(
        "<tr>" + "".join(f'<td class="text">{_esc(c)}</td>' for c in row) + "</tr>" for row in rows
    )
    return (
        "<section><h2>Replica limits</h2><p>As each server reported them once up, before any "
        f"load.</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>"
    )


def _subtitle(report: dict[str, Any]) -> str:
    settings = report.get("settings") or {}
    env = report.get("environment") or {}
    parts = []
    if settings.get("pattern"):
        load = str(settings["pattern"])
        if settings.get("concurrency"):
            load += f", {settings['concurrency']} users per model"
        if settings.get("rate"):
            load += f", {settings['rate']:g} requests/s per model"
        parts.append(load)
    if settings.get("protocol"):
        parts.append(str(settings["protocol"]).upper())
    if settings.get("duration_s"):
        parts.append(f"{settings['duration_s']:g} s measured per density")
    if "gpus" in env:
        gpus = env.get("gpus") or []
        names = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict)})
        parts.append(", ".join(names) if names else "no GPU measured")
    return f'<p class="meta">{_esc(_DOT.join(parts))}</p>' if parts else ""


def _sections(rows: list[dict[str, Any]], best: Any, images: dict[str, bytes]) -> list[str]:
    out = []
    lead, marks = _lead(rows), [_row_mark(r, best) for r in rows]
    placed = set()
    names = {r.get("gpu_name") for r in rows}
    gpu = f": {next(iter(names))}" if len(names) == 1 and None not in names else ""
    for title, cols, plot in _SECTIONS:
        shown = [c for c in cols if _applies(c, rows)]
        if not shown and plot not in images:
            continue
        parts = [f'<div class="table">{_table(cols, rows, lead, marks)}</div>']
        if plot in images:
            parts.append(_figure(plot, images[plot]))
            placed.add(plot)
        heading = title + gpu if cols is _GPU else title
        out.append(f'<section><h2>{_esc(heading)}</h2><div class="pair">{"".join(parts)}</div>'
                   "</section>")  # fmt: skip
    known = {c.key for _, cols, _ in _SECTIONS for c in cols} | _SAID
    other = dict.fromkeys(
        k for r in rows for k, v in r.items() if k not in known and not isinstance(v, list | dict)
    )
    extra = [_Col(k, k.replace("_", " ")) for k in other]
    if any(_applies(c, rows) for c in extra):
        out.append(f"<section><h2>Other figures</h2>{_table(extra, rows, lead, marks)}</section>")
    rest = [name for name in images if name not in placed]
    if rest:
        figures = "".join(_figure(name, images[name]) for name in rest)
        out.append(f'<section><h2>More plots</h2><div class="plots">{figures}</div></section>')
    return out


def _per_model(rows: list[dict[str, Any]], slo: float | None) -> str:
    lines = [
        {"density": r.get("density"), "pattern": r.get("pattern"), **m}
        for r in rows
        for m in r.get("per_model") or []
    ]
    if not lines:
        return ""
    base = {c.key for c in _MODEL} | {"density", "pattern"}
    keys = dict.fromkeys(
        k for ln in lines for k, v in ln.items() if k not in base and not isinstance(v, list | dict)
    )
    cols = [*_MODEL, *(_MODEL_EXTRA.get(k) or _Col(k, k.replace("_", " ")) for k in keys)]
    slow = ["miss" if slo is not None and (ln.get("p99_ms") or 0) > slo else "" for ln in lines]
    return f"<section><h2>Per model</h2>{_table(cols, lines, _lead(lines), slow)}</section>"


def render_html(report: dict[str, Any], images: dict[str, bytes], notes: Sequence[str]) -> str:
    """The page for ``report`` (as written to ``report.json``), with ``images`` (PNG bytes by
    file name, as ``plots.draw_plots`` returns them) embedded and ``notes`` (the Markdown
    report's notes, so both say the same) as a list."""
    rows: list[dict[str, Any]] = list(report.get("rows") or [])
    best = (report.get("recommendation") or {}).get("density")
    body = ["<header><h1>sharedserve bench report</h1>", _subtitle(report), "</header>"]
    if report.get("partial"):
        body.append(
            '<p class="banner">PARTIAL: the sweep has not finished (interrupted, or still '
            "running); only the rows below were measured.</p>"
        )
    body.append(_verdict(report, rows))
    if rows:
        body += _sections(rows, best, images)
        body.append(_per_model(rows, report.get("slo_p99_ms")))
    else:
        body.append("<section><h2>Results</h2><p>No density was measured.</p></section>")
    body.append(
        "<section><h2>Notes</h2><ul>" + "".join(f"<li>{_esc(n)}</li>" for n in notes) + "</ul>"
        '</section><section class="context">'
        + _pairs("Environment", report.get("environment"))
        + _pairs("Settings", without_limits(report.get("settings")))
        + "</section>"
        + _limits(report.get("settings"))
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>sharedserve bench report</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(b for b in body if b)
        + "\n</main>\n</body>\n</html>\n"
    )

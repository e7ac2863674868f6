"""``report.html``: the bench report as a page to forward, not a dump of ``report.json``.

The verdict comes first: the recommended density, the SLO, and which model missed it first and by
how much. Then one section per question (latency, throughput, GPU), each a narrow table beside the
plot drawn from it, so the page fits 1280 px with no horizontal scrolling. Measurements are shown
to three significant figures and counts exactly; a column with no value in any row (GPU figures
on a CPU run, the SLO without one) is left out. One self-contained file: CSS inline, plots as
base64 PNG, no script and no link out, and a print stylesheet.

A mix of models is led by its scale, and judged model by model against each one's own objective:
its verdict and its per-model and per-GPU sections are ``page_mix``'s.
The tables' cells and the embedded plots are ``table``'s.

Pure: it renders a report dict; ``write`` writes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from sharedserve.bench.judging import model_p99
from sharedserve.bench.limits import LIMITS_HEADERS, limits_table, without_limits
from sharedserve.bench.mix import is_mix, objectives, row_label, scale_of, several_patterns
from sharedserve.bench.report.css import CSS
from sharedserve.bench.report.page_mix import mix_sections, mix_verdict
from sharedserve.bench.report.sigfig import count, sig3
from sharedserve.bench.report.table import (
    NONE,
    Col,
    applies,
    card,
    esc,
    figure,
    number,
    over,
    table,
)

__all__ = ["render_html"]

_DOT = " \u00b7 "


_LATENCY = (
    Col("p50_ms", "p50"), Col("p90_ms", "p90"), Col("p99_ms", "p99"),
    Col("p999_ms", "p99.9"), Col("max_ms", "max"), Col("late_share", "sent late", "pct"),
    Col("stable", "stable", "yesno"), Col("slo_met", "SLO met", "yesno"),
)  # fmt: skip
_THROUGHPUT = (
    Col("requests", "requests"), Col("errors", "errors"), Col("dropped", "dropped"),
    Col("qps", "QPS"), Col("scaling_efficiency", "scaling eff."),
    Col("cpu_util_mean", "server CPU cores"), Col("loadgen_cpu_util", "loadgen CPU", "loadgen"),
)  # fmt: skip
_GPU = (
    Col("gpu_name", "GPU", "text"), Col("gpu_util_mean", "util mean %"),
    Col("gpu_util_max", "util max %"), Col("gpu_mem_used_mib", "memory used MiB"),
)  # fmt: skip
_SECTIONS = (  # (heading, table columns, the plot drawn from the same figures)
    ("Latency (ms, all models merged)", _LATENCY, "p99_vs_density.png"),
    ("Throughput and CPU", _THROUGHPUT, "qps_vs_density.png"),
    ("GPU", _GPU, "gpu_vs_density.png"),
)
# Row keys said elsewhere on the page (or derived from what is); any other scalar key a row
# carries goes in "Other figures", so a figure added to the rows is never silently dropped.
_SAID = {
    "density", "scale", "pattern", "duration_s", "error_rate", "unreliable", "per_model", "models",
    "gpus",
}  # fmt: skip
_MODEL = (
    Col("name", "model", "text"), Col("requests", "requests"), Col("errors", "errors"),
    Col("qps", "QPS"), Col("p50_ms", "p50 ms"), Col("p99_ms", "p99 ms"),
)  # fmt: skip
_MODEL_EXTRA = {  # per-model keys the sweep adds
    "gpu_mem_mib": Col("gpu_mem_mib", "GPU mem MiB"),
    "gpu_memory_fraction": Col("gpu_memory_fraction", "GPU mem cap", "pct"),
    "cpu_throttled_share": Col("cpu_throttled_share", "CPU throttled", "pct"),
    "cpu_throttled_ms": Col("cpu_throttled_ms", "throttled ms"),
}


def _lead(lines: Iterable[dict[str, Any]], mix: bool) -> list[Col]:
    several = len({ln.get("pattern") for ln in lines}) > 1
    if mix:  # its rows are its scales; the density, all its replicas, says how much was packed
        first = [Col("scale", "scale"), Col("density", "replicas")]
    else:
        first = [Col("density", "density")]
    return [*first, *([Col("pattern", "pattern", "text")] if several else [])]


def _row_mark(row: dict[str, Any], best: Any, mix: bool) -> str:
    if row.get("slo_met") is False:
        return "miss"
    if row.get("unreliable"):
        return "unreliable"
    at = scale_of(row) if mix else row.get("density")
    return "rec" if best is not None and at == best else ""


def _models(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A row's models over their replicas, each with its name."""
    if row.get("models"):
        return [{**m, "name": name} for name, m in row["models"].items()]
    # A report from before rows had ``models`` swept one model: its figures over all its
    # replicas are the row's, and its replicas are named NAME-N.
    replicas = list(row.get("per_model") or [])
    if not replicas:
        return []
    name = replicas[0].get("model") or re.sub(r"-\d+$", "", str(replicas[0]["name"]))
    figures = {k: row.get(k) for k in ("requests", "errors", "dropped", "p99_ms")}
    return [{**figures, "name": name, "replicas": len(replicas)}]


def _worst_model(row: dict[str, Any], slo: float) -> str:
    """Which model of a row that missed the SLO missed it worst, and by how much: each model
    over its replicas together (``models``), the p99 the reason under the cards quotes, never
    one replica's."""
    models = _models(row)
    slow = [m for m in models if m.get("p99_ms") is not None and m["p99_ms"] > slo]
    if slow:
        m = max(slow, key=lambda m: float(m["p99_ms"]))
        return f"{m['name']}: {model_p99(m)}, {over(m['p99_ms'], slo)} the SLO"
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


def _verdict(report: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The recommended density (a mix's scale) and what it gives, the SLO, and what missed it
    first above."""
    rec = report.get("recommendation") or {}
    if is_mix(rows):
        headline, cards = mix_verdict(report, rows)
        good = rec.get("scale") is not None
        return _verdict_section(headline, cards, good, rec)
    best, slo = rec.get("density"), report.get("slo_p99_ms")
    cards = []
    several = several_patterns(rows)
    at_best = [r for r in rows if best is not None and r.get("density") == best]
    for row in at_best:
        detail = [f"p99 {sig3(row['p99_ms'])} ms"] if row.get("p99_ms") is not None else []
        if row.get("scaling_efficiency") is not None:
            detail.append(f"scaling efficiency {sig3(row['scaling_efficiency'])}")
        qps = f"{sig3(row['qps'])} requests/s" if row.get("qps") is not None else NONE
        label = row_label(row, mix=False, pattern=several)
        cards.append(card(f"At {label}", qps, ", ".join(detail)))
    if slo is None:
        cards.append(card("SLO", "none given", "set one with --slo-p99-ms"))
    else:
        cards.append(
            card("SLO", f"p99 \u2264 {slo:g} ms", "for every model, and errors under the limit")
        )
        judged = sorted(
            (r for r in rows if r.get("slo_met") is False),
            key=lambda r: (r.get("density") or 0, str(r.get("pattern"))),
        )
        above = [r for r in judged if best is None or (r.get("density") or 0) > best]
        if above:
            cards.append(
                card(
                    "First to miss the SLO",
                    row_label(above[0], mix=False, pattern=several),
                    _worst_model(above[0], slo),
                )
            )
        elif rows:
            cards.append(card("First to miss the SLO", "none", "every density measured met it"))
    headline = f"Recommended density: {best if best is not None else 'none'}"
    if best is not None:
        headline += " replica" if best == 1 else " replicas"
        if any(r.get(k) is not None for r in rows for k in ("gpu_name", *(c.key for c in _GPU))):
            headline += " per GPU"
    return _verdict_section(headline, cards, best is not None, rec)


def _verdict_section(headline: str, cards: list[str], good: bool, rec: dict[str, Any]) -> str:
    mark = "good" if good else "bad"
    reason = rec.get("reason", "no recommendation was made")
    return (
        f'<section id="verdict" class="verdict {mark}"><h2>{esc(headline)}</h2>'
        f'<div class="cards">{"".join(cards)}</div>'
        f'<p class="reason"><strong>Why:</strong> {esc(reason)}.</p></section>'
    )


def _plain(value: Any) -> str:
    """A setting or environment value in words."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {_plain(v)}" for k, v in value.items()) or NONE
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value) or NONE
    if isinstance(value, float):
        return f"{value:g}"  # as given: a setting, not a measurement
    return number(value) if not isinstance(value, str) else value


def _pairs(title: str, data: Any) -> str:
    items = data.items() if isinstance(data, dict) and data else [("", "(none recorded)")]
    body = "".join(
        f'<tr><th scope="row">{esc(str(k))}</th><td class="text">{esc(_plain(v))}</td></tr>'
        for k, v in items
    )
    return f'<div><h3>{esc(title)}</h3><table class="pairs"><tbody>{body}</tbody></table></div>'


def _limits(settings: Any) -> str:
    rows = limits_table((settings or {}).get("replica_limits"))
    if not rows:
        return ""
    head = "".join(f'<th class="text">{esc(h)}</th>' for h in LIMITS_HEADERS)
    body = "".join(
        "<tr>" + "".join(f'<td class="text">{esc(c)}</td>' for c in row) + "</tr>" for row in rows
    )
    return (
        "<section><h2>Replica limits</h2><p>As each server reported them once up, before any "
        f"load.</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>"
    )


def _subtitle(report: dict[str, Any], mix: bool) -> str:
    settings = report.get("settings") or {}
    env = report.get("environment") or {}
    parts = []
    if settings.get("pattern"):
        load = str(settings["pattern"])
        # What --concurrency and --rate were (bench.offered): a spec's or running targets' total,
        # split by weight; per replica for a sweep of one model.
        if settings.get("spec"):
            unit = "for the mix at scale 1, split by weight"
        elif settings.get("targets_file"):
            unit = "in all, split by weight"
        else:
            unit = "per replica"
        if settings.get("concurrency"):
            load += f", {settings['concurrency']} users {unit}"
        if settings.get("rate"):
            load += f", {settings['rate']:g} requests/s {unit}"
        parts.append(load)
    if settings.get("protocol"):
        parts.append(str(settings["protocol"]).upper())
    if settings.get("duration_s"):
        parts.append(f"{settings['duration_s']:g} s measured per {'scale' if mix else 'density'}")
    if "gpus" in env:
        gpus = env.get("gpus") or []
        names = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict)})
        parts.append(", ".join(names) if names else "no GPU measured")
    return f'<p class="meta">{esc(_DOT.join(parts))}</p>' if parts else ""


def _sections(
    rows: list[dict[str, Any]], best: Any, images: dict[str, bytes], placed: set[str], mix: bool
) -> list[str]:
    """A section per question, each table beside its plot; then what the rows carry that none of
    them shows, and the plots not ``placed`` yet."""
    out = []
    lead, marks = _lead(rows, mix), [_row_mark(r, best, mix) for r in rows]
    names = {r.get("gpu_name") for r in rows}
    gpu = f": {next(iter(names))}" if len(names) == 1 and None not in names else ""
    for title, cols, plot in _SECTIONS:
        shown = [c for c in cols if applies(c, rows)]
        if not shown and plot not in images:
            continue
        parts = [f'<div class="table">{table(cols, rows, lead, marks)}</div>']
        if plot in images:
            parts.append(figure(plot, images[plot]))
            placed.add(plot)
        heading = title + gpu if cols is _GPU else title
        out.append(f'<section><h2>{esc(heading)}</h2><div class="pair">{"".join(parts)}</div>'
                   "</section>")  # fmt: skip
    known = {c.key for _, cols, _ in _SECTIONS for c in cols} | _SAID
    other = dict.fromkeys(
        k for r in rows for k, v in r.items() if k not in known and not isinstance(v, list | dict)
    )
    extra = [Col(k, k.replace("_", " ")) for k in other]
    if any(applies(c, rows) for c in extra):
        out.append(f"<section><h2>Other figures</h2>{table(extra, rows, lead, marks)}</section>")
    rest = [name for name in images if name not in placed]
    if rest:
        figures = "".join(figure(name, images[name]) for name in rest)
        out.append(f'<section><h2>More plots</h2><div class="plots">{figures}</div></section>')
    return out


def _per_model(rows: list[dict[str, Any]], slo: float | None, mix: bool) -> str:
    """Each replica of each row: "Per model" for a sweep of one model, where each replica was
    counted as a model of its own; "Per replica" in a mix, grouped by model."""
    lines = [
        {"scale": scale_of(r), "density": r.get("density"), "pattern": r.get("pattern"), **m}
        for r in rows
        for m in r.get("per_model") or []
    ]
    if not lines:
        return ""
    # One model's name on every line of a sweep says nothing the page has not.
    base = {c.key for c in _MODEL} | {"scale", "density", "pattern", "model"}
    keys = dict.fromkeys(
        k for ln in lines for k, v in ln.items() if k not in base and not isinstance(v, list | dict)
    )
    cols = [*_MODEL, *(_MODEL_EXTRA.get(k) or Col(k, k.replace("_", " ")) for k in keys)]
    if not mix:
        slow = ["miss" if slo is not None and (ln.get("p99_ms") or 0) > slo else "" for ln in lines]
        return f"<section><h2>Per model</h2>{table(cols, lines, _lead(lines, mix), slow)}</section>"
    own = objectives(rows)
    slow = [
        "miss" if (limit := own.get(str(ln.get("model")))) is not None
        and (ln.get("p99_ms") or 0) > limit else ""
        for ln in lines
    ]  # fmt: skip
    several = len({ln.get("pattern") for ln in lines}) > 1
    lead = [Col("scale", "scale"), *([Col("pattern", "pattern", "text")] if several else []),
            Col("model", "model", "text"), Col("name", "replica", "text")]  # fmt: skip
    return f"<section><h2>Per replica</h2>{table(cols[1:], lines, lead, slow)}</section>"


def render_html(report: dict[str, Any], images: dict[str, bytes], notes: Sequence[str]) -> str:
    """The page for ``report`` (as written to ``report.json``), with ``images`` (PNG bytes by
    file name, as ``plots.draw_plots`` returns them) embedded and ``notes`` (the Markdown
    report's notes, so both say the same) as a list."""
    rows: list[dict[str, Any]] = list(report.get("rows") or [])
    mix = is_mix(rows)
    best = (report.get("recommendation") or {}).get("scale" if mix else "density")
    body = ["<header><h1>sharedserve bench report</h1>", _subtitle(report, mix), "</header>"]
    if report.get("partial"):
        body.append(
            '<p class="banner">PARTIAL: the sweep has not finished (interrupted, or still '
            "running); only the rows below were measured.</p>"
        )
    body.append(_verdict(report, rows))
    if rows:
        placed: set[str] = set()
        if mix:
            # The mix is judged model by model: that table leads, before the merged figures.
            sections, placed = mix_sections(rows, best, images)
            body += sections
        body += _sections(rows, best, images, placed, mix)
        body.append(_per_model(rows, report.get("slo_p99_ms"), mix))
    else:
        body.append("<section><h2>Results</h2><p>No density was measured.</p></section>")
    body.append(
        "<section><h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"
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

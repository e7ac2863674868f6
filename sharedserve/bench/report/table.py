"""report.html's building blocks: tables of figures, embedded plots and the verdict's cards.

Measurements are shown to three significant figures and counts exactly; a column with no value in
any line is left out. Apart from ``page`` so that the page's sections for
a mix of models (``page_mix``) draw theirs the same way.

Pure: standard library and ``sigfig`` only.
"""

from __future__ import annotations

import base64
import html
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sharedserve.bench.report.sigfig import count, sig3

__all__ = ["NONE", "Col", "applies", "card", "esc", "figure", "number", "over", "table"]

esc = html.escape
NONE = "\u2014"
"""An em dash: this figure was not measured in this line."""


@dataclass(frozen=True)
class Col:
    """A table column: the key of the line it shows, and its heading."""

    key: str
    heading: str
    kind: Literal["num", "pct", "loadgen", "yesno", "text", "setting"] = "num"
    """``num``: three significant figures, counts exact; ``pct``: a fraction, as a percentage;
    ``loadgen``: ``pct``, marked when the row is unreliable; ``yesno``; ``text``: left-aligned;
    ``setting``: a number as it was given (``6``, not ``6.00``): not a measurement."""


def number(value: Any) -> str:
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return count(value)
    if isinstance(value, float):
        return sig3(value)
    return str(value)


def _cell(col: Col, line: dict[str, Any]) -> str:
    """One ``<td>``; a failed SLO or an unreliable row is marked by class, not colour alone."""
    value = line.get(col.key)
    if value is None:
        return f'<td class="none">{NONE}</td>'
    if col.kind == "yesno":
        return f'<td class="{"ok" if value else "bad"}">{"yes" if value else "no"}</td>'
    if col.kind in ("pct", "loadgen"):
        text = f"{sig3(float(value) * 100)}%"
        if col.kind == "loadgen" and line.get("unreliable"):
            return f'<td class="bad">{text} <span class="tag">unreliable</span></td>'
        return f"<td>{text}</td>"
    if col.kind == "text":
        return f'<td class="text">{esc(str(value))}</td>'
    if col.kind == "setting" and isinstance(value, float):
        return f"<td>{value:g}</td>"
    return f"<td>{esc(number(value))}</td>"


def applies(col: Col, lines: list[dict[str, Any]]) -> bool:
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


def table(
    cols: Sequence[Col], lines: list[dict[str, Any]], lead: Sequence[Col], marks: list[str]
) -> str:
    """A table of the columns that apply, after the ``lead`` columns that name each line;
    ``marks`` is each line's CSS class ("" for none)."""
    shown = [*lead, *(c for c in cols if applies(c, lines))]
    left = ' class="text"'
    head = "".join(
        f'<th scope="col"{left if c.kind == "text" else ""}>{esc(c.heading)}</th>' for c in shown
    )
    body = "".join(
        (f'<tr class="{mark}">' if mark else "<tr>")
        + "".join(_cell(c, ln) for c in shown)
        + "</tr>"
        for ln, mark in zip(lines, marks, strict=True)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _png_size(data: bytes) -> tuple[int, int] | None:
    # The IHDR chunk leads every PNG; its size lets the browser lay the page out before decoding.
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return width, height
    return None


def figure(name: str, data: bytes) -> str:
    """A plot, embedded as base64 PNG so the page stays one file."""
    alt = name.removesuffix(".png").replace("_", " ")
    size = _png_size(data)
    dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
    src = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return f'<figure><img alt="{esc(alt)}"{dims} src="{src}"></figure>'


def over(value: float, limit: float) -> str:
    """How far ``value`` is past ``limit``, as the verdict says it: a share, or a multiple."""
    ratio = value / limit
    return f"{sig3((ratio - 1) * 100)}% over" if ratio < 2 else f"{sig3(ratio)} times"


def card(label: str, value: str, detail: str) -> str:
    """One of the verdict's cards: what it is about, the figure, and what the figure means."""
    return (
        f'<div class="card"><div class="label">{esc(label)}</div>'
        f'<div class="value">{esc(value)}</div><div class="detail">{esc(detail)}</div></div>'
    )

"""Numbers as the reports show them: measurements to three significant figures (HTML), or as
report.json records them (Markdown, the terminal summary).

A latency printed to the microsecond (``1753.087`` ms) claims a precision the run does not have
and hides its size among the digits; ``1,750`` says what matters. Counts are not measurements
and stay exact. Pure: standard library only.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["as_recorded", "count", "row_cell", "sig3"]


def sig3(value: float) -> str:
    """``value`` to three significant figures, in positional notation with thousands separators:
    1753.087 -> ``1,750``, 323.071 -> ``323``, 4.5551 -> ``4.56``, 0.5 -> ``0.500``,
    0.0012345 -> ``0.00123``. Zeros that are significant stay (``1.00``), so a column of figures
    reads at one precision. Not finite: ``nan``, ``inf``, ``-inf``."""
    if not math.isfinite(value):
        return str(float(value))
    if value == 0:
        return "0"
    # Round through the exponent form, which rounds once and correctly; then the rounded value's
    # own magnitude (999.6 rounds to 1,000) says how many decimals three figures need.
    rounded = float(f"{value:.2e}")
    decimals = max(0, 2 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:,.{decimals}f}"


def count(value: int) -> str:
    """A count, exact, with thousands separators: 12345 -> ``12,345``."""
    return f"{value:,}"


def as_recorded(value: Any, *, no: str = "no") -> str:
    """A cell as report.json has it (rows are rounded to 3 decimals there): ``-`` for no data,
    floats without trailing zeros, ``yes``/``no`` (``no`` as given, to stand out or not)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else no
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return str(value)


def row_cell(row: dict[str, Any], key: str, *, unreliable: str, no: str = "no") -> str:
    """``row[key]`` as recorded; the load generator's CPU in percent, with ``unreliable``
    appended when the row was flagged for it."""
    if key != "loadgen_cpu_util":
        return as_recorded(row.get(key), no=no)
    cpu = row.get(key)
    text = "-" if cpu is None else f"{cpu * 100:.0f}%"
    return text + unreliable if row.get("unreliable") else text

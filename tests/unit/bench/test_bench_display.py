"""What ``bench`` prints at the end: whole at any width, on a terminal or not."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from sharedserve.bench.display import (
    COLUMNS,
    MODEL_COLUMNS,
    model_cells,
    plain_table,
    print_summary,
    summary_cells,
)
from tests.support.bench_mix import REASON as MIX_REASON
from tests.support.bench_mix import mix_report

REASON = (
    "no density met p99 <= 50 ms with < 0.1% errors; density 1 missed it: model tiny-0 p99 "
    "58.123 ms, model tiny-1 failed 0.2% (1 errors)"
)


def report(density: int | None = None, reason: str = REASON) -> dict[str, Any]:
    rows = [
        {
            "density": d, "pattern": "sequential", "qps": 12345.678 / d, "p50_ms": 12.345,
            "p99_ms": 58.123 * d, "p999_ms": 1234.567, "errors": 10 * d, "dropped": 0,
            "scaling_efficiency": 0.987 if d > 1 else 1.0, "gpu_util_mean": None,
            "cpu_util_mean": 0.456 * d, "loadgen_cpu_util": 0.9 if d == 8 else 0.123,
            "slo_met": d == 1, "unreliable": d == 8,
        }
        for d in (1, 2, 4, 8)
    ]  # fmt: skip
    return {
        "partial": False,
        "rows": rows,
        "recommendation": {"density": density, "reason": reason},
    }


def render(rep: dict[str, Any], *, width: int, terminal: bool) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=terminal, color_system=None)
    print_summary(console, rep, Path("out"))
    return out.getvalue()


def assert_rows_complete(text: str, rep: dict[str, Any]) -> None:
    """Every cell of every row is on a line of that row (led by its density), whole."""
    for row, cells in zip(rep["rows"], summary_cells(rep), strict=True):
        lines = [ln.strip("│ ") for ln in text.splitlines()]
        mine = " ".join(ln for ln in lines if ln.split(" ", 1)[0] == str(row["density"]))
        tokens = mine.replace("│", " ").split()
        for cell in cells:
            assert all(part in tokens for part in cell.split()), (cell, mine)


def test_cells_are_the_report_json_values_not_rounded_again() -> None:
    cells = summary_cells(report())
    assert cells[0][: len(COLUMNS) - 3] == [
        "1", "12345.678", "12.345", "58.123", "1234.567", "10", "0", "1", "-",
    ]  # fmt: skip
    assert cells[0][-3:] == ["0.456", "12%", "yes"]
    assert cells[3][-3:] == ["3.648", "90% (!)", "NO"]


@pytest.mark.parametrize("width", [80, 60, 40])
def test_a_narrow_terminal_gets_every_number_whole(width: int) -> None:
    rep = report()
    text = render(rep, width=width, terminal=True)
    assert "…" not in text
    assert all(len(line) <= width for line in text.splitlines()), text
    assert_rows_complete(text, rep)
    for heading in COLUMNS.values():
        assert heading in text
    # Word-wrapped to the terminal, but every word of it is there, in order.
    assert f"recommendation: none — {REASON}" in " ".join(text.split())


def test_a_wide_terminal_gets_the_rich_table() -> None:
    rep = report(density=1, reason="density 1 is the largest")
    text = render(rep, width=200, terminal=True)
    assert "┃ density ┃" in text and "…" not in text
    assert_rows_complete(text, rep)
    assert "recommendation: 1 — density 1 is the largest\n" in text


def test_not_a_terminal_gets_one_line_per_row_whatever_the_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "60")  # what CI systems set; a log has no width
    rep = report()
    out = io.StringIO()
    print_summary(Console(file=out), rep, Path("out"))
    lines = out.getvalue().splitlines()
    assert "…" not in out.getvalue() and "┃" not in out.getvalue()
    header = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["density"])
    for row, cells, line in zip(rep["rows"], summary_cells(rep), lines[header + 1 :], strict=False):
        assert line.split()[0] == str(row["density"])
        assert " ".join(line.split()) == " ".join(cells)
    assert f"recommendation: none — {REASON}" in lines
    assert "report: out/report.html" in lines
    assert any(
        line.startswith("(!) NOT TRUSTWORTHY, density 8: the load generator used 90% of a core")
        for line in lines
    )


def test_plain_table_blocks_fit_and_repeat_the_first_column() -> None:
    headers = ["density", "a", "b", "c"]
    rows = [["1", "x" * 10, "y" * 10, "z" * 30], ["16", "1", "2", "3"]]
    lines = plain_table(headers, rows, width=32)
    assert lines == [
        "density           a           b",
        "      1  xxxxxxxxxx  yyyyyyyyyy",
        "     16           1           2",
        "",
        # Too wide to fit even alone: its own block, overflowing, never cut.
        "density                               c",
        "      1  zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
        "     16                               3",
    ]
    assert plain_table(headers, rows, width=None)[0].split() == headers
    assert plain_table(["density"], [], width=10) == ["density"]


# A mix of models: tests/support/bench_mix.py's hand-built report.
def test_a_mix_prints_each_model_at_each_scale() -> None:
    rep = mix_report()
    out = io.StringIO()
    print_summary(Console(file=out), rep, Path("out"))
    lines = [" ".join(line.split()) for line in out.getvalue().splitlines()]
    header = lines.index("per model") + 1
    assert lines[header] == " ".join(MODEL_COLUMNS.values()) == "scale model QPS p99 ms SLO ms met"
    assert lines[header + 1 : header + 7] == [
        "1 tiny 812.345 31.234 50 yes",
        "1 mobilenet_v2 270.8 142.87 250 yes",
        "1 resnet50 135.4 688.9 1000 yes",
        "2 tiny 1510.9 47.9 50 yes",
        "2 mobilenet_v2 497 231.05 250 yes",
        "2 resnet50 240.2 1530.5 1000 NO",
    ]
    assert lines[1].startswith("scale replicas QPS") and lines[2].startswith("1 7 1218.533")
    assert f"recommendation: scale 1 (7 replicas) — {MIX_REASON}" in lines
    assert model_cells(report()) == []  # one model: no such lines


def test_a_mix_on_a_narrow_terminal_keeps_every_model_cell_whole() -> None:
    rep = mix_report()
    rep["rows"][1]["models"]["resnet50"]["p99_ms"] = None  # not measured: a dash, not a number
    text = render(rep, width=40, terminal=True)
    assert "…" not in text and all(len(line) <= 40 for line in text.splitlines())
    words = text.split()
    for cells in model_cells(rep):
        assert all(cell in words for cell in cells), cells
    assert model_cells(rep)[-1] == ["2", "resnet50", "240.2", "-", "1000", "NO"]


@pytest.mark.parametrize("terminal", [True, False])
def test_one_model_prints_as_it_always_has(terminal: bool) -> None:
    old = report(density=1, reason="density 1 is the largest")
    new = copy.deepcopy(old)
    for row in new["rows"]:
        row["scale"] = row["density"]
        row["gpus"] = None
        row["models"] = {"tiny": {"replicas": row["density"], "requests": 1000, "errors": 0,
                                  "qps": row["qps"], "slo_met": True}}  # fmt: skip
    new["recommendation"] |= {"scale": 1, "failing_model": None}
    for width in (200, 60):
        assert render(new, width=width, terminal=terminal) == render(
            old, width=width, terminal=terminal
        )


def test_no_objective_reads_as_measured_not_as_a_failure() -> None:
    rep = report(reason="no SLO given (--slo-p99-ms, or slo_p99_ms in the spec)")
    for row in rep["rows"]:
        row["slo_met"] = None  # nothing to judge against: what summary.py writes then
    out = io.StringIO()
    print_summary(Console(file=out), rep, Path("out"))
    lines = out.getvalue().splitlines()
    # "recommendation: none — no SLO given" read as a run that failed; nothing was judged.
    assert not any(line.startswith("recommendation:") for line in lines)
    assert (
        "objective: none given; measured, not judged (pass --slo-p99-ms to judge the rows and "
        "recommend one)"
    ) in lines
    out = io.StringIO()
    print_summary(Console(file=out), rep, Path("out"), objective_hint="size judges them")
    assert "objective: none given; measured, not judged (size judges them)" in out.getvalue()

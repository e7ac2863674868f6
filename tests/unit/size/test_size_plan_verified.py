"""The plan's "Predicted against measured" section, from its ``size --verify`` runs: a scatter
of predicted p99 against measured p99 in plan.html (a point per model and GPU, the y = x line,
the target's band, the runs' min..max as a bar) and the same as a table in both pages; which
``verify.json`` files it is made from."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from sharedserve.bench.report.plots import figure
from sharedserve.size.plan import (
    Verified,
    VerifyRun,
    find_verified,
    plan_digest,
    plan_html,
    plan_markdown,
    read_plan,
    show_verified,
)
from sharedserve.size.plan.verified import _axes, verified_html, verified_markdown

EXPECTED = Path(__file__).resolve().parents[2] / "data" / "plan" / "expected"
PLAN = read_plan(EXPECTED / "plan.json")
SVG = "{http://www.w3.org/2000/svg}"


def _line(model: str, predicted: float, runs: list[float | None], **more: Any) -> dict[str, Any]:
    first = runs[0]
    return {
        "model": model,
        "predicted_p50_ms": predicted / 2,
        "predicted_p99_ms": predicted,
        "measured_p50_ms": None if first is None else first / 2,
        "measured_p99_ms": first,
        "p50_error": 0.0,
        "p99_error": None if first is None else round((predicted - first) / first, 3),
        "runs": [
            {
                "measured_qps": 10.0,
                "measured_p50_ms": None if r is None else r / 2,
                "measured_p99_ms": r,
            }
            for r in runs
        ],
        "spread_p50": None,
        "spread_p99": None,
        "within_targets": True,
        **more,
    }


def _verify(spec: str, lines: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {
        "spec": spec,
        "trustworthy": True,
        "verdict": "within targets: every figure of every model",
        "targets": {"qps": 0.05, "p50": 0.15, "p99": 0.25},
        "repeat_targets": {"p50": 0.05, "p99": 0.1},
        "models": lines,
        **more,
    }


GPU0 = _verify(
    "plan/gpu-000.yaml",
    [
        _line("tiny", 6.0, [5.0, 5.5], spread_p99=0.1),
        _line("ranker", 6.0, [9.0, 9.0], within_targets=False),  # runs agree: no bar
        _line("fraud", 6.0, [None]),  # no success measured: in the table, not the plot
    ],
)
GPU1 = _verify(
    "plan/gpu-001.yaml",
    [_line("vision", 45.0, [40.0, 30.0, 44.0], spread_p99=0.25)],
    trustworthy=False,
    within_targets=None,
    verdict="not trustworthy: unstable",
)
VERIFIED = Verified((VerifyRun("verify-gpu-000/verify.json", GPU0),
                     VerifyRun("elsewhere/verify.json", GPU1)), left_out=2)  # fmt: skip


def _svg(page: str) -> ET.Element:
    start, end = page.index("<svg"), page.index("</svg>") + len("</svg>")
    return ET.fromstring(page[start:end])  # what the titles were put into still parses


def _groups(svg: ET.Element, prefix: str) -> dict[str, ET.Element]:
    return {g.get("id", ""): g for g in svg.iter(f"{SVG}g") if g.get("id", "").startswith(prefix)}


def _title(group: ET.Element) -> str:
    title = group.find(f"{SVG}title")
    assert title is not None and title.text is not None
    return title.text


def test_the_plot_has_a_point_per_model_measured_each_titled_with_its_model() -> None:
    svg = _svg(verified_html(VERIFIED))
    points = _groups(svg, "verify-point-")
    titles = sorted(_title(g) for g in points.values())
    assert len(points) == 3  # fraud measured nothing: no point
    assert [t.split(":")[0] for t in titles] == [
        "ranker (GPU 0)",
        "tiny (GPU 0)",
        "vision (GPU 1)",
    ]
    tiny = next(t for t in titles if t.startswith("tiny"))
    assert "predicted p99 6 ms, measured 5 ms (runs: 5, 5.5, spread 10%), error +20%" in tiny
    assert next(t for t in titles if t.startswith("vision")).endswith("; not trustworthy")
    # The whole plot says what it is, and where its figures are for who cannot see it.
    assert "the table below has every figure" in _title(svg)


def test_the_plot_has_the_line_the_band_and_a_bar_where_runs_differ() -> None:
    svg = _svg(verified_html(VERIFIED))
    assert set(_groups(svg, "verify-band")) == {"verify-band"}
    assert set(_groups(svg, "verify-diagonal")) == {"verify-diagonal"}
    bars = {_title(g).split(":")[0]: _title(g) for g in _groups(svg, "verify-spread-").values()}
    assert set(bars) == {
        "tiny (GPU 0)",
        "vision (GPU 1)",
    }  # ranker's two runs agree: nothing to draw
    assert bars["vision (GPU 1)"].endswith("over 3 runs, 30 to 44 ms")
    assert "predicted within ±25% of measured" in verified_html(VERIFIED)


@pytest.mark.parametrize(
    ("low", "high", "scale"),
    [(2.0, 19.0, "linear"), (2.0, 21.0, "log"), (5.0, 2000.0, "log")],
)
def test_a_wide_range_is_plotted_on_log_axes(low: float, high: float, scale: str) -> None:
    _, ax = figure("t")
    _axes(ax, low, high, 0.25)
    assert (ax.get_xscale(), ax.get_yscale()) == (scale, scale)
    assert ax.get_xlim() == ax.get_ylim()  # the same range both ways: y = x is the diagonal


def test_the_html_table_and_the_markdown_have_a_row_per_model_and_gpu() -> None:
    md = verified_markdown(VERIFIED)
    rows = [ln for ln in md if ln.startswith("| ") and not ln.startswith("| model")]
    assert rows == [
        "| fraud | 0 | 3 / 6 | - | - | +0% / - | - / - | yes |",
        "| ranker | 0 | 3 / 6 | 4.5, 4.5 | 9, 9 | +0% / -33% | - / - | no |",
        "| tiny | 0 | 3 / 6 | 2.5, 2.75 | 5, 5.5 | +0% / +20% | - / 10% | yes |",
        "| vision | 1 | 22.5 / 45 | 20, 15, 22 | 40, 30, 44 | +0% / +12% | - / 25% | "
        "not trustworthy |",
    ]
    assert "- elsewhere/verify.json: not trustworthy: unstable" in md
    assert any("2 verify.json files left out" in ln for ln in md)
    page = verified_html(VERIFIED)
    table = page[page.index('<table class="verified">') :]
    assert table.count("<tr>") == 1 + 4
    assert "<td>not trustworthy</td>" in table


def test_the_section_is_the_same_for_the_same_runs() -> None:
    # No date, no random ids: a plan re-rendered from the same files is the same file.
    assert verified_html(VERIFIED) == verified_html(VERIFIED)


def test_the_pages_have_the_section_last_and_nothing_of_it_without_runs() -> None:
    page = plan_html(PLAN, VERIFIED)
    assert page.index("<h2>GPUs</h2>") < page.index("Predicted against measured")
    md = plan_markdown(PLAN, [], VERIFIED)
    assert md.index("## GPUs") < md.index("## Predicted against measured")
    assert plan_html(PLAN, Verified()) == plan_html(PLAN)
    assert "figure.verified" not in plan_html(PLAN) and "<svg" not in plan_html(PLAN)
    assert plan_markdown(PLAN, [], Verified()) == plan_markdown(PLAN, [])
    assert "Predicted against measured" not in plan_markdown(PLAN, [])


def test_a_section_with_nothing_to_plot_has_the_table_alone() -> None:
    only = Verified(
        (VerifyRun("v/verify.json", _verify("plan/gpu-000.yaml", [_line("a", 5, [None])])),)
    )
    page = verified_html(only)
    assert "<svg" not in page and page.count("<tr>") == 2


@pytest.fixture
def plan_dir(tmp_path: Path) -> Path:
    shutil.copy(EXPECTED / "plan.json", tmp_path / "plan.json")
    return tmp_path


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_the_runs_found_are_those_of_this_plan_json(plan_dir: Path, tmp_path: Path) -> None:
    digest = plan_digest(plan_dir / "plan.json")
    _write(plan_dir / "verify-gpu-001" / "verify.json", {**GPU1, "plan_digest": digest})
    _write(plan_dir / "verify-gpu-000" / "verify.json", {**GPU0, "plan_digest": digest})
    _write(plan_dir / "verify-old" / "verify.json", {**GPU0, "plan_digest": "another plan"})
    _write(plan_dir / "verify-older" / "verify.json", GPU0)  # from before digests
    (plan_dir / "verify-broken").mkdir()
    (plan_dir / "verify-broken" / "verify.json").write_text("{")
    elsewhere = _write(tmp_path / "out" / "verify.json", {**GPU0, "plan_digest": digest})
    found = find_verified(plan_dir, also=elsewhere)
    assert [r.where for r in found.runs] == [
        "verify-gpu-000/verify.json",
        "verify-gpu-001/verify.json",
        "out/verify.json",
    ]
    assert found.left_out == 3
    # The one just written, if it is one of those found anyway, is not shown twice.
    again = find_verified(plan_dir, also=plan_dir / "verify-gpu-000" / "verify.json")
    assert len(again.runs) == 2


def test_show_verified_writes_both_pages_again_with_the_section(plan_dir: Path) -> None:
    digest = plan_digest(plan_dir / "plan.json")
    _write(plan_dir / "verify-gpu-000" / "verify.json", {**GPU0, "plan_digest": digest})
    shown = show_verified(plan_dir)
    assert len(shown.runs) == 1 and shown.left_out == 0
    md = (plan_dir / "plan.md").read_text()
    assert md.startswith((EXPECTED / "plan.md").read_text())  # the plan as it was, then:
    assert "## Predicted against measured" in md and "| tiny | 0 | 3 / 6 |" in md
    assert "verify-point-" in (plan_dir / "plan.html").read_text()

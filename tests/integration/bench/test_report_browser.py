"""report.html in a real browser (headless Chromium at 1280 x 900): it fits the width, with no
sideways scrolling anywhere, the verdict is on the first screen, and each plot sits beside the
table it is drawn from."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedserve.bench.report import write_report
from tests.support.bench_mix import mix_report
from tests.support.bench_reports import REPORTS, SLO
from tests.support.browser import HEIGHT, WIDTH, layout

pytestmark = [pytest.mark.browser]


@pytest.mark.parametrize("name", list(REPORTS))
def test_report_fits_1280_px_and_opens_on_the_verdict(name: str, tmp_path: Path) -> None:
    rep = REPORTS[name]()
    write_report(tmp_path / "report", rep)
    page = layout(tmp_path / "report" / "report.html", tmp_path)
    assert page["innerWidth"] == WIDTH and 0 < page["innerHeight"] <= HEIGHT
    # No horizontal overflow: not of the page, not of any element, not hidden behind a scrollbar.
    assert page["scrollWidth"] <= page["clientWidth"], page["scrollWidth"]
    assert page["outside"] == [], f"past the right edge at {WIDTH} px: {page['outside'][:10]}"
    assert page["sideways"] == [], f"scrolls sideways at {WIDTH} px: {page['sideways'][:10]}"
    # The verdict is on the first screen, whole.
    verdict = page["verdict"]
    assert verdict is not None, "no element with id 'verdict'"
    assert verdict["shown"] and verdict["top"] >= 0 and verdict["bottom"] <= page["innerHeight"]
    density = rep["recommendation"]["density"]
    assert f"Recommended density: {density if density is not None else 'none'}" in verdict["text"]
    assert f"p99 \u2264 {SLO:g} ms" in verdict["text"]
    if rep["rows"]:
        assert "first to miss the slo" in verdict["text"].lower()
    # Each plot beside its table: to its right, level with it.
    pairs = [s for s in page["sections"] if s["table"] and s["plot"]]
    assert len(pairs) == (3 if name == "gpu" else 2 if rep["rows"] else 0)
    for s in pairs:
        table, plot = s["table"], s["plot"]
        assert plot["left"] >= table["right"], f"{s['title']}: the plot is not beside its table"
        assert plot["top"] < table["bottom"] and table["top"] < plot["bottom"], s["title"]
        assert plot["right"] <= page["clientWidth"]


@pytest.mark.parametrize("gpu", [True, False])
def test_a_mix_fits_1280_px_and_opens_on_its_verdict(gpu: bool, tmp_path: Path) -> None:
    write_report(tmp_path / "report", mix_report(gpu=gpu))
    page = layout(tmp_path / "report" / "report.html", tmp_path)
    assert page["scrollWidth"] <= page["clientWidth"], page["scrollWidth"]
    assert page["outside"] == [], f"past the right edge at {WIDTH} px: {page['outside'][:10]}"
    assert page["sideways"] == [], f"scrolls sideways at {WIDTH} px: {page['sideways'][:10]}"
    verdict = page["verdict"]
    assert verdict["shown"] and verdict["top"] >= 0 and verdict["bottom"] <= page["innerHeight"]
    assert "Recommended scale: 1 (7 replicas)" in verdict["text"]
    assert "resnet50 at scale 2" in verdict["text"]
    titles = [s["title"] for s in page["sections"]]
    assert titles.index("Per model (each against its own SLO)") < titles.index(
        "Latency (ms, all models merged)"
    )
    assert ("Per GPU" in titles) is gpu
    # The per-model table is wide: its plot may go under it, but each row figure's goes beside.
    for s in page["sections"]:
        if s["table"] and s["plot"] and not s["title"].startswith("Per model"):
            assert s["plot"]["left"] >= s["table"]["right"], s["title"]

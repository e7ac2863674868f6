"""report.html's content: the verdict first, three significant figures, only the columns that
apply, a print stylesheet. Its layout in a real browser is
tests/integration/bench/test_report_browser.py.
"""

from __future__ import annotations

import html
import math
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from sharedserve.bench.report import count, render_html, sig3, write_report
from sharedserve.bench.summary import Pattern
from tests.support.bench_mix import mix_report
from tests.support.bench_reports import SLO, report, rows


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1753.087, "1,750"), (323.071, "323"), (47.359, "47.4"), (4.5551, "4.56"),
        (0.5, "0.500"), (1.0, "1.00"), (0.0012345, "0.00123"), (999.6, "1,000"),
        (0.9996, "1.00"), (99.95, "100"), (12_345_678.0, "12,300,000"), (-61.119, "-61.1"),
        (0.0, "0"), (100.0, "100"), (math.nan, "nan"), (math.inf, "inf"),
    ],
)  # fmt: skip
def test_three_significant_figures(value: float, text: str) -> None:
    assert sig3(value) == text


def test_counts_are_exact() -> None:
    assert count(91_234) == "91,234" and count(0) == "0"


class _Tables(HTMLParser):
    """Each ``<table>`` of figures (not the environment's and settings' pairs) as its column
    headings and its rows of cell text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict[str, Any]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append({"headings": [], "rows": [], "pairs": ("class", "pairs") in attrs})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("th", "td"):
            self._cell = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("th", "td") and self._cell is not None:
            text = " ".join("".join(self._cell).split())
            table = self.tables[-1]
            if tag == "th" and not table["rows"][-1] and len(table["rows"]) == 1:
                table["headings"].append(text)
            else:
                table["rows"][-1].append(text)
            self._cell = None


def tables(page: str) -> list[dict[str, Any]]:
    parser = _Tables()
    parser.feed(page)
    for t in parser.tables:
        t["rows"] = [r for r in t["rows"] if r]
    return [t for t in parser.tables if not t["pairs"]]


def page_of(rep: dict[str, Any], tmp_path: Path) -> str:
    write_report(tmp_path, rep)
    return (tmp_path / "report.html").read_text()


COUNTS = {"density", "requests", "errors", "dropped", "model", "pattern"}


def significant_digits(cell: str) -> int:
    number = re.sub(r"[,%]|UNRELIABLE|\s", "", cell, flags=re.I).lstrip("-")
    if "." in number:
        return len(number.replace(".", "").lstrip("0"))
    return len(number.lstrip("0").rstrip("0"))


def test_measurements_to_three_significant_figures(tmp_path: Path) -> None:
    page = page_of(report(rows((1, 2, 4, 8), Pattern.SEQUENTIAL, gpu=True)), tmp_path)
    checked = 0
    for table in tables(page):
        for line in table["rows"]:
            for heading, cell in zip(table["headings"], line, strict=True):
                if heading in COUNTS or not re.search(r"\d", cell):
                    continue
                assert significant_digits(cell) <= 3, f"{heading}: {cell}"
                checked += 1
    assert checked > 100
    assert "91,234" in page  # counts stay exact


def headings(page: str) -> set[str]:
    return {h for t in tables(page) for h in t["headings"]}


def test_columns_that_do_not_apply_are_left_out(tmp_path: Path) -> None:
    cpu_report = report(rows((1, 2), Pattern.SEQUENTIAL, gpu=False, slo=None), slo=None)
    cpu = page_of(cpu_report, tmp_path / "cpu")
    assert not [h for h in headings(cpu) if "GPU" in h or "util" in h or "memory" in h]
    assert "SLO met" not in headings(cpu)  # no SLO, nothing met or missed
    # One closed-loop pattern: no pattern column, no dropped column (nothing can be dropped).
    assert not {"pattern", "dropped"} & headings(cpu)
    assert "\u2014" not in "".join(c for t in tables(cpu) for r in t["rows"] for c in r)
    gpu = headings(page_of(report(rows((1, 2), Pattern.SEQUENTIAL, gpu=True)), tmp_path / "gpu"))
    assert {"util mean %", "util max %", "memory used MiB", "GPU mem MiB", "GPU mem cap"} <= gpu
    assert "SLO met" in gpu
    both = rows((1, 2), Pattern.SEQUENTIAL, gpu=False) + rows((1, 2), Pattern.POISSON, gpu=False)
    assert {"pattern", "dropped"} <= headings(page_of(report(both), tmp_path / "both"))


def test_the_gpu_is_named_once(tmp_path: Path) -> None:
    one = rows((1, 2), Pattern.SEQUENTIAL, gpu=True)
    page = page_of(report(one), tmp_path / "one")
    assert "<h2>GPU: NVIDIA H100 80GB HBM3</h2>" in page and "GPU" not in headings(page)
    one[1]["gpu_name"] = "NVIDIA A100-SXM4-40GB"
    page = page_of(report(one), tmp_path / "two")
    assert "<h2>GPU</h2>" in page and "GPU" in headings(page)


def verdict_of(page: str) -> str:
    assert 'id="verdict"' in page, "no verdict"
    section = page.split('id="verdict"', 1)[1].split("</section>", 1)[0]
    return re.sub(r"<[^>]+>", " ", section)


def test_the_verdict_comes_first_and_names_the_first_miss(tmp_path: Path) -> None:
    rep = report(rows((1, 2, 4, 8, 16, 32), Pattern.SEQUENTIAL, gpu=True))
    page = page_of(rep, tmp_path)
    verdict = verdict_of(page)
    assert page.index('id="verdict"') < page.index("<table")
    verdict = verdict_of(page)
    assert rep["recommendation"]["density"] == 8
    assert "Recommended density: 8 replicas per GPU" in verdict
    assert f"p99 \u2264 {SLO:g} ms" in verdict
    (miss,) = [r for r in rep["rows"] if r["slo_met"] is False]
    assert f"density {miss['density']}" in verdict
    # The card and the reason under it quote one p99, named: the model's over all its replicas
    # (what it is judged by), not its worst replica's, which is higher here.
    model = miss["models"]["resnet50"]
    assert max(m["p99_ms"] for m in miss["per_model"]) > model["p99_ms"]
    quoted = f"p99 {model['p99_ms']:g} ms (all {miss['density']} replicas)"
    over = sig3((model["p99_ms"] / SLO - 1) * 100)
    assert f"resnet50: {quoted}, {over}% over the SLO" in verdict  # the card
    assert f"missed it: model resnet50 {quoted} > {SLO:g} ms" in html.unescape(verdict)  # why
    (best,) = [r for r in rep["rows"] if r["density"] == 8]
    assert f"{sig3(best['qps'])} requests/s" in verdict


def test_verdict_without_a_recommendation_or_an_slo(tmp_path: Path) -> None:
    slow = report(rows((1, 2), Pattern.SEQUENTIAL, gpu=False, slo=2.0), slo=2.0)
    verdict = verdict_of(page_of(slow, tmp_path / "slow"))
    assert "Recommended density: none" in verdict and "density 1" in verdict
    assert re.search(r"p99 [\d.]+ ms, [\d.]+ times the SLO", verdict)
    cpu = verdict_of(page_of(report(rows((1, 2, 4), Pattern.SEQUENTIAL, gpu=False)), tmp_path))
    assert "Recommended density: 2 replicas" in cpu and "per GPU" not in cpu  # no GPU measured
    none = page_of(report(rows((1,), Pattern.SEQUENTIAL, gpu=False, slo=None), slo=None), tmp_path)
    assert "none given" in none and "--slo-p99-ms" in none


def test_print_stylesheet(tmp_path: Path) -> None:
    page = page_of(report(rows((1, 2), Pattern.SEQUENTIAL, gpu=True)), tmp_path)
    assert "@media print" in page, "no print stylesheet"
    rules = page[page.index("@media print") :]
    assert "break-inside: avoid" in rules and "table-header-group" in rules
    assert "print-color-adjust: exact" in rules


def test_figures_and_plots_the_page_does_not_know_are_still_shown() -> None:
    rep = report(rows((1, 2), Pattern.SEQUENTIAL, gpu=False))
    for r in rep["rows"]:
        r["cpu_throttled_s"] = 1.25 * r["density"]
    page = render_html(rep, {"new_plot.png": b"\x89PNG\r\n\x1a\n"}, ["a note"])
    other = next(t for t in tables(page) if "cpu throttled s" in t["headings"])
    assert [line[-1] for line in other["rows"]] == ["1.25", "2.50"]
    assert "More plots" in page and 'alt="new plot"' in page and "<li>a note</li>" in page


# A mix of models: tests/support/bench_mix.py's hand-built report.
MIX_HEADINGS = [
    "scale", "model", "replicas", "weight", "QPS", "p50 ms", "p99 ms", "p99.9 ms", "errors",
    "dropped", "SLO ms", "met", "GPU mem cap", "CPU limit", "CPU throttled share", "GPU mem MiB",
]  # fmt: skip


def table_with(page: str, *wanted: str) -> dict[str, Any]:
    return next(t for t in tables(page) if set(wanted) <= set(t["headings"]))


def section(page: str, title: str) -> str:
    return page.split(f"<h2>{title}</h2>", 1)[1].split("</section>", 1)[0]


def test_a_mix_gets_a_table_of_each_model_at_each_scale(tmp_path: Path) -> None:
    page = page_of(mix_report(), tmp_path)
    models = table_with(page, "model", "met")
    assert models["headings"] == MIX_HEADINGS
    assert [line[:2] for line in models["rows"]] == [
        [s, m] for s in ("1", "2") for m in ("tiny", "mobilenet_v2", "resnet50")
    ]
    cells = {(ln[0], ln[1]): dict(zip(MIX_HEADINGS, ln, strict=True)) for ln in models["rows"]}
    assert cells["1", "tiny"] == {
        "scale": "1", "model": "tiny", "replicas": "4", "weight": "6", "QPS": "812",
        "p50 ms": "9.87", "p99 ms": "31.2", "p99.9 ms": "44.5", "errors": "0", "dropped": "0",
        "SLO ms": "50", "met": "yes", "GPU mem cap": "8.00%", "CPU limit": "1",
        "CPU throttled share": "3.10%", "GPU mem MiB": "612",
    }  # fmt: skip
    resnet = cells["2", "resnet50"]
    assert resnet["p99 ms"] == "1,530" and resnet["met"] == "no" and resnet["SLO ms"] == "1000"
    assert (
        resnet["errors"] == "12" and resnet["dropped"] == "3" and resnet["GPU mem MiB"] == "3,390"
    )
    # Not measured, or no limit: a dash, never a number.
    for key in ("p99.9 ms", "CPU limit", "CPU throttled share"):
        assert resnet[key] == "\u2014", key
    assert cells["1", "resnet50"]["CPU limit"] == "\u2014"
    # The model that missed is marked, the recommended scale's lines stand out.
    body = section(page, "Per model (each against its own SLO)")
    assert body.count('<tr class="miss">') == 1 and body.count('<tr class="rec">') == 3
    assert 'alt="p99 by model vs scale"' in body  # its plot beside it, not under "More plots"
    assert "More plots" not in page


def test_a_mix_gets_a_table_of_each_gpu(tmp_path: Path) -> None:
    page = page_of(mix_report(), tmp_path)
    gpus = table_with(page, "GPU", "util max %")
    assert gpus["headings"] == [
        "scale",
        "GPU",
        "name",
        "util mean %",
        "util max %",
        "memory used MiB",
    ]
    assert len(gpus["rows"]) == 4
    assert gpus["rows"][0][1] == "GPU-8f2c6a1e-3b7d-4c0a-9e51-2d6f7a8b9c01"
    assert [line[4] for line in gpus["rows"]] == ["72.5", "\u2014", "73.5", "\u2014"]
    cpu = page_of(mix_report(gpu=False), tmp_path / "cpu")
    assert "<h2>Per GPU</h2>" not in cpu
    # Simulated GPUs: no cap, no GPU memory measured, so no such columns.
    assert table_with(cpu, "model", "met")["headings"] == [
        h for h in MIX_HEADINGS if h not in ("GPU mem cap", "GPU mem MiB")
    ]


def test_a_mix_is_led_by_its_scale(tmp_path: Path) -> None:
    page = page_of(mix_report(), tmp_path)
    latency = table_with(page, "p99", "SLO met")
    assert latency["headings"][:2] == ["scale", "replicas"]
    assert [line[:2] for line in latency["rows"]] == [["1", "7"], ["2", "14"]]
    replicas = table_with(page, "replica")
    assert replicas["headings"][:3] == ["scale", "model", "replica"]
    assert len(replicas["rows"]) == 7 + 14
    assert "30 s measured per scale" in page
    # --rate was the mix's total at scale 1 (bench.offered), not each model's.
    assert "200 requests/s for the mix at scale 1, split by weight" in page


def test_the_load_of_a_one_model_sweep_is_per_replica(tmp_path: Path) -> None:
    rep = report(rows((1, 2), Pattern.PARALLEL, gpu=False))
    rep["settings"] |= {"pattern": "parallel", "concurrency": 4}
    assert "parallel, 4 users per replica" in page_of(rep, tmp_path / "model")
    rep["settings"]["targets_file"] = "targets.json"
    assert "parallel, 4 users in all, split by weight" in page_of(rep, tmp_path / "targets")


def test_a_mix_verdict_names_the_scale_and_the_model_that_missed(tmp_path: Path) -> None:
    page = page_of(mix_report(), tmp_path)
    verdict = " ".join(html.unescape(verdict_of(page)).split())
    assert "Recommended scale: 1 (7 replicas)" in verdict
    assert "At scale 1 1,220 requests/s 7 replicas, scaling efficiency 1.00" in verdict
    assert "tiny \u2264 50 ms, mobilenet_v2 \u2264 250 ms, resnet50 \u2264 1000 ms" in verdict
    over = sig3((1530.5 / 1000 - 1) * 100)
    quoted = "p99 1530.5 ms (all 2 replicas)"  # one figure, named, in the card and the reason
    assert f"resnet50 at scale 2 {quoted}, {over}% over its 1000 ms SLO" in verdict
    assert f"scale 2 (14 replicas) missed it: model resnet50 {quoted} > 1000 ms" in verdict


def test_a_mix_measurements_to_three_significant_figures(tmp_path: Path) -> None:
    page = page_of(mix_report(), tmp_path)
    # Settings as given, names, and GPU memory in whole MiB as NVML reports it: exact.
    given = COUNTS | {"scale", "replicas", "weight", "SLO ms", "CPU limit", "GPU", "name"}
    given |= {"replica", "GPU mem MiB"}
    checked = 0
    for table in tables(page):
        for line in table["rows"]:
            for heading, cell in zip(table["headings"], line, strict=True):
                if heading in given or not re.search(r"\d", cell):
                    continue
                assert significant_digits(cell) <= 3, f"{heading}: {cell}"
                checked += 1
    assert checked > 100
    assert "None" not in page and "nan" not in page

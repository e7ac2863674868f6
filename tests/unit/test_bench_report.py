"""Report writers: every file, from a full sweep down to a report cut short with no rows."""

from __future__ import annotations

import csv
import html
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.report import PER_MODEL_COLUMNS, ROW_COLUMNS, write_report
from sharedserve.bench.summary import (
    Pattern,
    Samples,
    TargetResult,
    build_row,
    finalize_rows,
    recommend,
)

SLO = 50.0
NO_GPU = Samples(None, None, None, None)


def sweep(
    densities: tuple[int, ...] = (1, 2, 4, 8),
    pattern: Pattern = Pattern.SEQUENTIAL,
    gpu: bool = True,
    slo: float | None = SLO,
) -> list[dict[str, Any]]:
    """Rows as the sweep builds them: latency grows with density, density 8 is loadgen-bound."""
    rnd = random.Random(sum(densities))
    rows = []
    for d in densities:
        targets = []
        for i in range(d):
            hist = LatencyHistogram()
            for _ in range(500):
                hist.record(int(rnd.lognormvariate(9.0 + 0.3 * d, 0.4)))
            errors = 1 if d == 8 else 0
            targets.append(TargetResult(f"tiny-{i}", 500 + errors, errors, 0, hist))
        samples = Samples(20.0 * d**0.5, 30.0 * d**0.5, 900.0 * d, 0.8 * d) if gpu else NO_GPU
        rows.append(
            build_row(
                density=d, pattern=pattern, window_s=30.0, targets=targets, samples=samples,
                loadgen_cpu_util=0.9 if d == 8 else 0.1 * d, slo_p99_ms=slo,
            )
        )  # fmt: skip
    finalize_rows(rows)
    return rows


def report(
    rows: list[dict[str, Any]], *, partial: bool = False, slo: float | None = SLO
) -> dict[str, Any]:
    return {
        "rows": rows,
        "recommendation": recommend(rows, slo),
        "environment": {"gpu": "NVIDIA H100 80GB HBM3", "driver": "550.54", "python": "3.11"},
        "partial": partial,
        "slo_p99_ms": slo,
        "settings": {"densities": [1, 2, 4, 8], "pattern": "sequential", "duration_s": 30},
        "latency_resolution": LatencyHistogram.RESOLUTION,
    }


def names(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


BASE_FILES = ["report.json", "report.csv", "report_per_model.csv", "report.md", "report.html"]
PLOTS = ["p99_vs_density.png", "qps_vs_density.png", "gpu_vs_density.png"]


def test_full_report_writes_every_file(tmp_path: Path) -> None:
    rep = report(sweep())
    out = tmp_path / "new" / "dir"
    paths = write_report(out, rep)
    assert sorted(names(paths)) == sorted(BASE_FILES + PLOTS)
    assert all(p.parent == out and p.stat().st_size > 0 for p in paths)
    assert sorted(p.name for p in out.iterdir()) == sorted(BASE_FILES + PLOTS)  # no temporaries
    for plot in PLOTS:
        assert (out / plot).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert json.loads((out / "report.json").read_text()) == rep


def test_csv_files(tmp_path: Path) -> None:
    rows = sweep()
    write_report(tmp_path, report(rows))
    with (tmp_path / "report.csv").open(newline="") as f:
        lines = list(csv.reader(f))
    assert tuple(lines[0]) == ROW_COLUMNS
    assert "per_model" not in lines[0] and {"density", "p99_ms", "slo_met"} <= set(lines[0])
    assert len(lines) == 1 + len(rows)
    first = dict(zip(lines[0], lines[1], strict=True))
    assert first["density"] == "1" and first["pattern"] == "sequential"
    assert float(first["p99_ms"]) == rows[0]["p99_ms"]
    assert first["slo_met"] == "true" and first["unreliable"] == "false"
    with (tmp_path / "report_per_model.csv").open(newline="") as f:
        models = list(csv.DictReader(f))
    assert tuple(models[0]) == PER_MODEL_COLUMNS
    assert len(models) == 1 + 2 + 4 + 8
    assert models[-1]["density"] == "8" and models[-1]["name"] == "tiny-7"


def test_keys_the_sweep_adds_are_kept(tmp_path: Path) -> None:
    rows = sweep((1, 2))
    for r in rows:
        r["gpu_clock_mhz"] = 1980
        for m in r["per_model"]:
            m.update(gpu_mem_mib=812, gpu_memory_fraction=0.25)
    write_report(tmp_path, report(rows))
    with (tmp_path / "report.csv").open(newline="") as f:
        assert next(csv.reader(f)) == [*ROW_COLUMNS, "gpu_clock_mhz"]
    with (tmp_path / "report_per_model.csv").open(newline="") as f:
        lines = list(csv.DictReader(f))
    assert list(lines[0]) == [*PER_MODEL_COLUMNS, "gpu_mem_mib", "gpu_memory_fraction"]
    assert lines[0]["gpu_mem_mib"] == "812"
    assert "| GPU mem MiB | GPU mem cap |" in (tmp_path / "report.md").read_text()


def test_markdown_and_html_say_the_same(tmp_path: Path) -> None:
    rep = report(sweep(), partial=True)
    write_report(tmp_path, rep)
    md = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    reason = rep["recommendation"]["reason"]
    assert rep["recommendation"]["density"] == 2  # density 4 misses p99, 8 is loadgen-bound
    for text in (md, html.unescape(page)):
        assert "PARTIAL" in text
        assert "Recommended density: 2" in text
        assert reason in text
        assert LatencyHistogram.RESOLUTION in text
        assert "unreliable" in text.lower() and "density 8 (sequential)" in text
        assert "null without a real GPU" in text
        assert "NVIDIA H100 80GB HBM3" in text and "tiny-7" in text
    assert md.count("\n| 8 | sequential |") == 1 + 8  # the results row and one per model
    assert "![p99 vs density](p99_vs_density.png)" in md


def test_html_is_self_contained(tmp_path: Path) -> None:
    rep = report(sweep())
    rep["environment"]["targets"] = "http://10.0.0.7:8501"  # text, not a link
    write_report(tmp_path, rep)
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("data:image/png;base64,") == 3
    assert "<style>" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
    assert "<script" not in page and "<link" not in page
    assert "http://10.0.0.7:8501" in page  # escaped text only


def test_no_partial_banner_when_complete(tmp_path: Path) -> None:
    write_report(tmp_path, report(sweep()))
    assert "PARTIAL" not in (tmp_path / "report.md").read_text()
    assert "PARTIAL" not in (tmp_path / "report.html").read_text()


def test_no_gpu_plot_without_gpu_figures(tmp_path: Path) -> None:
    rows = sweep(gpu=False)
    paths = write_report(tmp_path, report(rows))
    assert "gpu_vs_density.png" not in names(paths)
    assert not (tmp_path / "gpu_vs_density.png").exists()
    assert {"p99_vs_density.png", "qps_vs_density.png"} <= set(names(paths))
    assert (tmp_path / "report.html").read_text().count("data:image/png;base64,") == 2
    md = (tmp_path / "report.md").read_text()
    assert "no GPU plot" in md
    with (tmp_path / "report.csv").open(newline="") as f:
        assert {line["gpu_util_mean"] for line in csv.DictReader(f)} == {""}
    assert json.loads((tmp_path / "report.json").read_text())["rows"][0]["gpu_util_mean"] is None


def test_one_row_with_gpu_figures_gets_a_gpu_plot(tmp_path: Path) -> None:
    paths = write_report(tmp_path, report(sweep((1,))))
    assert sorted(names(paths)) == sorted(BASE_FILES + PLOTS)


def test_a_stale_gpu_plot_from_an_earlier_report_is_removed(tmp_path: Path) -> None:
    write_report(tmp_path, report(sweep()))
    assert (tmp_path / "gpu_vs_density.png").exists()
    write_report(tmp_path, report(sweep(gpu=False)))
    assert not (tmp_path / "gpu_vs_density.png").exists()


def test_zero_rows_partial_report(tmp_path: Path) -> None:
    rep = report([], partial=True)
    paths = write_report(tmp_path, rep)
    assert sorted(names(paths)) == sorted(BASE_FILES)  # nothing to plot
    assert json.loads((tmp_path / "report.json").read_text()) == rep
    assert (tmp_path / "report.csv").read_text().splitlines() == [",".join(ROW_COLUMNS)]
    assert (tmp_path / "report_per_model.csv").read_text().splitlines() == [
        ",".join(PER_MODEL_COLUMNS)
    ]
    md = (tmp_path / "report.md").read_text()
    assert "PARTIAL" in md and "No density was measured" in md
    assert "Recommended density: none" in md and "no density was measured" in md
    assert "data:image/png" not in (tmp_path / "report.html").read_text()


def test_nulls_everywhere_and_no_slo(tmp_path: Path) -> None:
    """Every request failed: no latency anywhere, no GPU, no loadgen CPU, no SLO."""
    failed = [TargetResult(f"m{i}", 10, 10, 0, LatencyHistogram()) for i in range(2)]
    row = build_row(density=2, pattern=Pattern.POISSON, window_s=5.0, targets=failed,
                    samples=NO_GPU, loadgen_cpu_util=None, slo_p99_ms=None)  # fmt: skip
    finalize_rows([row])
    paths = write_report(tmp_path, report([row], slo=None))
    assert names(paths).count("qps_vs_density.png") == 1  # qps is 4/s, errors included
    assert "p99_vs_density.png" not in names(paths)
    md = (tmp_path / "report.md").read_text()
    assert "no SLO given (--slo-p99-ms)" in md and "SLO: none given" in md
    assert "| 2 | poisson | 20 | 20 | 0 | 4 | - | - |" in md
    assert "scheduled send time" in md


def test_several_patterns_and_missing_optional_sections(tmp_path: Path) -> None:
    rows = sweep((1, 2)) + sweep((1, 2), Pattern.POISSON, gpu=False)
    finalize_rows(rows)
    rep = {"rows": rows, "recommendation": recommend(rows, SLO), "partial": False,
           "slo_p99_ms": SLO, "latency_resolution": LatencyHistogram.RESOLUTION}  # fmt: skip
    paths = write_report(tmp_path, rep)
    assert sorted(names(paths)) == sorted(BASE_FILES + PLOTS)
    md = (tmp_path / "report.md").read_text()
    assert md.count("(none recorded)") == 2  # environment and settings absent


def test_values_not_native_to_json_are_written_as_text(tmp_path: Path) -> None:
    rep = report(sweep((1,)))
    rep["settings"]["out"] = tmp_path / "out"
    write_report(tmp_path, rep)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["settings"]["out"] == str(tmp_path / "out")


def test_markup_in_names_is_escaped(tmp_path: Path) -> None:
    hist = LatencyHistogram()
    hist.record(1000)
    odd = TargetResult("a|b<i>", 1, 0, 0, hist)
    row = build_row(density=1, pattern=Pattern.SEQUENTIAL, window_s=1.0, targets=[odd],
                    samples=NO_GPU, loadgen_cpu_util=0.1, slo_p99_ms=SLO)  # fmt: skip
    write_report(tmp_path, report([row]))
    assert "| a\\|b<i> |" in (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    assert "<i>" not in page and "a|b&lt;i&gt;" in page


def test_import_and_write_leave_pyplot_alone(tmp_path: Path) -> None:
    # pyplot would choose a backend and keep figures in global state; a fresh interpreter shows
    # what importing and writing pull in, whatever other tests in this one have imported.
    code = (
        "import sys; from pathlib import Path\n"
        "import sharedserve.bench.report as r\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported at import time'\n"
        f"r.write_report(Path({str(tmp_path)!r}), {report(sweep((1, 2)))!r})\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "p99_vs_density.png").exists()

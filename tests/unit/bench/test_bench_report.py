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
from sharedserve.bench.report import MODELS_COLUMNS, PER_MODEL_COLUMNS, ROW_COLUMNS, write_report
from sharedserve.bench.summary import (
    Pattern,
    Samples,
    TargetResult,
    build_row,
    finalize_rows,
)
from sharedserve.bench.verdict import recommend
from tests.support.bench_mix import mix_report

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
            targets.append(TargetResult(f"tiny-{i}", 500 + errors, errors, 0, hist, model="tiny"))
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
            m.update(gpu_mem_mib=812, gpu_memory_fraction=0.25, queue_ms=1.5)
    write_report(tmp_path, report(rows))
    with (tmp_path / "report.csv").open(newline="") as f:
        assert next(csv.reader(f)) == [*ROW_COLUMNS, "gpu_clock_mhz"]
    with (tmp_path / "report_per_model.csv").open(newline="") as f:
        lines = list(csv.DictReader(f))
    assert list(lines[0]) == [*PER_MODEL_COLUMNS, "queue_ms"]
    assert lines[0]["gpu_mem_mib"] == "812" and lines[0]["queue_ms"] == "1.5"
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
    assert "Recommended density: none" in md and rep["recommendation"]["reason"] in md
    assert "data:image/png" not in (tmp_path / "report.html").read_text()


def test_nulls_everywhere_and_no_slo(tmp_path: Path) -> None:
    """Every request failed: no latency anywhere, no GPU, no loadgen CPU, no SLO."""
    failed = [TargetResult(f"m-{i}", 10, 10, 0, LatencyHistogram(), model="m") for i in range(2)]
    row = build_row(density=2, pattern=Pattern.POISSON, window_s=5.0, targets=failed,
                    samples=NO_GPU, loadgen_cpu_util=None, slo_p99_ms=None)  # fmt: skip
    finalize_rows([row])
    paths = write_report(tmp_path, report([row], slo=None))
    assert names(paths).count("qps_vs_density.png") == 1  # qps is 4/s, errors included
    assert "p99_vs_density.png" not in names(paths)
    md = (tmp_path / "report.md").read_text()
    assert "no SLO given (--slo-p99-ms" in md and "SLO: none given" in md
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


# A mix of models: tests/support/bench_mix.py's hand-built report.
MIX_PLOTS = [*PLOTS, "p99_by_model_vs_scale.png"]


def md_table(md: str, heading: str) -> list[list[str]]:
    """The Markdown table under ``## heading``: its heading line, then its rows, as cells."""
    section = md.split(f"\n## {heading}\n\n", 1)[1].split("\n\n", 1)[0]
    lines = [ln.strip("|").split(" | ") for ln in section.splitlines()]
    return [[c.strip() for c in ln] for ln in lines if not ln[0].strip().startswith("---")]


def test_a_mix_writes_its_models_csv_and_plot(tmp_path: Path) -> None:
    rep = mix_report()
    paths = write_report(tmp_path, rep)
    assert sorted(names(paths)) == sorted([*BASE_FILES, "report_models.csv", *MIX_PLOTS])
    png = (tmp_path / "p99_by_model_vs_scale.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    with (tmp_path / "report_models.csv").open(newline="") as f:
        lines = list(csv.DictReader(f))
    assert tuple(lines[0]) == MODELS_COLUMNS
    assert [(ln["scale"], ln["model"]) for ln in lines] == [
        (str(s), m) for s in (1, 2) for m in ("tiny", "mobilenet_v2", "resnet50")
    ]
    resnet = lines[-1]
    assert resnet["density"] == "14" and resnet["replicas"] == "2" and resnet["weight"] == "1.0"
    assert resnet["p99_ms"] == "1530.5" and resnet["slo_met"] == "false"
    assert resnet["p999_ms"] == resnet["cpu_limit"] == resnet["cpu_throttled_share"] == ""
    # The per-replica CSV keeps its columns, with the scale after them.
    with (tmp_path / "report_per_model.csv").open(newline="") as f:
        replicas = list(csv.DictReader(f))
    assert list(replicas[0]) == [*PER_MODEL_COLUMNS, "scale"]
    assert len(replicas) == 7 + 14 and replicas[-1]["model"] == "resnet50"
    with (tmp_path / "report.csv").open(newline="") as f:
        assert next(csv.reader(f)) == list(ROW_COLUMNS)  # no models or GPUs in a cell


def test_a_mix_in_markdown(tmp_path: Path) -> None:
    write_report(tmp_path, mix_report())
    md = (tmp_path / "report.md").read_text()
    assert "Recommended scale: 1 (7 replicas)." in md
    assert "First model to miss its SLO: **resnet50**." in md
    assert "missed it: model resnet50 p99 1530.5 ms (all 2 replicas) > 1000 ms" in md
    assert "SLO: p99 per model: tiny <= 50 ms, mobilenet_v2 <= 250 ms, resnet50 <= 1000 ms." in md
    assert md_table(md, "Results")[0][:3] == ["scale", "replicas", "pattern"]
    table = md_table(md, "Per model")
    assert table[0] == [
        "scale", "model", "replicas", "weight", "QPS", "p50 ms", "p99 ms", "p99.9 ms", "errors",
        "dropped", "SLO ms", "met", "GPU mem cap", "CPU limit", "CPU throttled share",
        "GPU mem MiB",
    ]  # fmt: skip
    assert table[1:] == [
        ["1", "tiny", "4", "6", "812.345", "9.871", "31.234", "44.5", "0", "0", "50", "yes",
         "0.08", "1", "0.031", "612"],
        ["1", "mobilenet_v2", "2", "2", "270.8", "61.2", "142.87", "201.3", "0", "0", "250", "yes",
         "0.15", "2", "0", "1480"],
        ["1", "resnet50", "1", "1", "135.4", "402.1", "688.9", "910.2", "0", "0", "1000", "yes",
         "0.3", "-", "-", "3105"],
        ["2", "tiny", "8", "6", "1510.9", "14.2", "47.9", "63", "2", "0", "50", "yes", "0.08",
         "1", "0.12", "640"],
        ["2", "mobilenet_v2", "4", "2", "497", "98.6", "231.05", "288.4", "0", "0", "250", "yes",
         "0.15", "2", "0.05", "1502"],
        ["2", "resnet50", "2", "1", "240.2", "744", "1530.5", "-", "12", "3", "1000", "no", "0.3",
         "-", "-", "3390"],
    ]  # fmt: skip
    gpus = md_table(md, "Per GPU")
    assert gpus[0] == ["scale", "GPU", "name", "util mean %", "util max %", "memory used MiB"]
    assert len(gpus) == 1 + 4 and gpus[2][4] == "-"  # a peak not sampled is not a number
    replicas = md_table(md, "Per replica")
    assert replicas[0][:4] == ["scale", "model", "replica", "requests"]
    assert len(replicas) == 1 + 7 + 14
    assert "![p99 by model vs scale](p99_by_model_vs_scale.png)" in md
    assert "QPS / (scale x QPS at scale 1)" in md
    assert "None" not in md and "nan" not in md


def test_a_mix_on_simulated_gpus_has_no_gpu_table(tmp_path: Path) -> None:
    paths = write_report(tmp_path, mix_report(gpu=False))
    assert "gpu_vs_density.png" not in names(paths)
    md = (tmp_path / "report.md").read_text()
    assert "## Per GPU" not in md
    for line in md_table(md, "Per model")[1:]:
        assert line[12] == "-" and line[15] == "-"  # no cap, no GPU memory: never 0


def test_one_model_reads_as_it_always_has(tmp_path: Path) -> None:
    """The keys a mix brought (scale, models, gpus) change nothing for a sweep of one model, and
    a report from before them still renders."""
    rows = sweep()
    assert all(len(r["models"]) == 1 and r["scale"] == r["density"] for r in rows)
    write_report(tmp_path / "new", report(rows))
    old = [
        {k: v for k, v in r.items() if k not in ("scale", "models", "gpus")}
        | {"per_model": [{k: v for k, v in m.items() if k != "model"} for m in r["per_model"]]}
        for r in rows
    ]
    rec = {k: v for k, v in report(rows)["recommendation"].items() if k in {"reason", "density"}}
    write_report(tmp_path / "old", report(old) | {"recommendation": rec})
    for name in ("report.md", "report.html"):
        assert (tmp_path / "new" / name).read_text() == (tmp_path / "old" / name).read_text()
    md = (tmp_path / "new" / "report.md").read_text()
    assert "## Per replica" not in md and "## Per GPU" not in md and "scale" not in md
    assert md_table(md, "Per model")[0][:3] == ["density", "pattern", "model"]
    assert not (tmp_path / "new" / "report_models.csv").exists()
    assert not (tmp_path / "new" / "p99_by_model_vs_scale.png").exists()


def test_a_models_csv_from_an_earlier_mix_is_removed(tmp_path: Path) -> None:
    write_report(tmp_path, mix_report())
    assert (tmp_path / "report_models.csv").exists()
    write_report(tmp_path, report(sweep((1, 2))))
    assert not (tmp_path / "report_models.csv").exists()
    assert not (tmp_path / "p99_by_model_vs_scale.png").exists()

"""Bench reports as the sweep builds them, with figures as wide as real ones get, for the tests
of report.html (tests/unit/bench/test_bench_report_html.py,
tests/integration/bench/test_report_browser.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.summary import Pattern, Samples, TargetResult, build_row
from sharedserve.bench.summary import finalize_rows as finalize
from sharedserve.bench.verdict import recommend

SLO = 50.0


def rows(
    densities: tuple[int, ...],
    pattern: Pattern,
    *,
    gpu: bool,
    seed: int = 7,
    slo: float | None = SLO,
) -> list[dict[str, Any]]:
    """Rows as the sweep builds them, with figures as wide as real ones get: thousands of
    requests per second, latency growing with density, errors and a CPU-bound load generator
    at the top."""
    rnd = random.Random(seed)
    out = []
    for d in densities:
        targets = []
        for i in range(d):
            hist = LatencyHistogram()
            for _ in range(300):
                hist.record(int(rnd.lognormvariate(8.0 + 0.35 * d**0.5, 0.5)))
            errors = 3 if d == densities[-1] else 0
            targets.append(
                TargetResult(f"resnet50-v1-{i}", 91_234 + errors, errors, 0, hist, model="resnet50")
            )
        gpu_figures = (min(99.0, 21.7 * d**0.5), min(100.0, 33.3 * d**0.5), 1234.5 * d)
        samples = Samples(*(gpu_figures if gpu else (None, None, None)), 0.873 * d)
        loadgen = 0.93 if d == densities[-1] else 0.071 * d
        out.append(
            build_row(density=d, pattern=pattern, window_s=30.0, targets=targets,
                      samples=samples, loadgen_cpu_util=loadgen, slo_p99_ms=slo)
        )  # fmt: skip
    for row in out:
        row["gpu_name"] = "NVIDIA H100 80GB HBM3" if gpu else None
        for model in row["per_model"]:
            model["gpu_mem_mib"] = 812 if gpu else None
            model["gpu_memory_fraction"] = 0.125 if gpu else None
    return out


def report(
    rows: list[dict[str, Any]], *, partial: bool = False, slo: float | None = SLO
) -> dict[str, Any]:
    finalize(rows)
    densities = sorted({r["density"] for r in rows})
    return {
        "rows": rows,
        "recommendation": recommend(rows, slo),
        "environment": {
            "cpu": "AMD EPYC 7B13 64-Core Processor", "cpu_count": 128,
            "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}]
            if any(r["gpu_util_mean"] is not None for r in rows) else None,
            "packages": {"sharedserve": "0.1.0", "locust": "2.47.0", "tensorflow": "2.21.0"},
            "command": "sharedserve bench --model models/resnet50_v1_with_a_long_directory_name"
            "_that_does_not_break --densities " + ",".join(map(str, densities)),
        },
        "partial": partial,
        "slo_p99_ms": slo,
        "settings": {"pattern": rows[0]["pattern"] if rows else "sequential", "protocol": "rest",
                     "duration_s": 30.0, "densities": densities},
        "latency_resolution": LatencyHistogram.RESOLUTION,
    }  # fmt: skip


REPORTS: dict[str, Callable[[], dict[str, Any]]] = {
    # Every column there is: GPU figures, errors, an unreliable row, a GPU plot.
    "gpu": lambda: report(rows((1, 2, 4, 8, 16, 32), Pattern.SEQUENTIAL, gpu=True)),
    # Two patterns (a pattern column, a dropped column), no GPU, cut short: the banner first.
    "cpu-two-patterns-partial": lambda: report(
        rows((1, 2, 4, 8), Pattern.SEQUENTIAL, gpu=False)
        + rows((1, 2, 4, 8), Pattern.POISSON, gpu=False, seed=8),
        partial=True,
    ),
    "no-rows": lambda: report([], partial=True),
}

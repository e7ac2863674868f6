"""Whether a measurement settled: the stability rule over its measurement windows.

As Triton's perf_analyzer does: a measurement is split into windows of equal length, and it is
trusted once the last ``n`` windows agree, each within ``STABILITY_TOLERANCE`` of their mean on
both throughput and P99. A run that never settles (a warming cache, a neighbour's burst, a
thermal step) gives figures that the next run would not repeat, and says so instead.

The load generator applies the rule while it measures (to know when to stop) and builds its result
with ``measurement_result``; the report shows the windows it judged. Pure: standard library and
the histogram only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sharedserve.bench.histogram import LatencyHistogram

__all__ = [
    "COUNTS",
    "STABILITY_TOLERANCE",
    "measurement_result",
    "merge_window",
    "window_figures",
    "windows_stable",
]

COUNTS = ("requests", "errors", "dropped", "late")
"""What a load generator process counts per target per window (``late``: open-loop requests sent
more than 1 ms after their scheduled time)."""

STABILITY_TOLERANCE = 0.1
"""How far (as a share of their mean) each judged window's QPS and P99 may stray: perf_analyzer's
default ``--stability-percentage`` of 10."""


def _agree(values: Sequence[float | None], tolerance: float) -> bool:
    if any(v is None for v in values):
        return False  # a window with no successful request has no P99 to agree on
    numbers = [float(v) for v in values if v is not None]
    mean = sum(numbers) / len(numbers)
    if mean <= 0:
        return False
    return all(abs(v - mean) <= tolerance * mean for v in numbers)


def windows_stable(
    windows: Sequence[dict[str, Any]], n: int, tolerance: float = STABILITY_TOLERANCE
) -> bool:
    """Whether the last ``n`` of ``windows`` (each with ``qps`` and ``p99_ms``) agree: each within
    ``tolerance`` of their mean on both. False with fewer than ``n`` windows, or when a judged
    window served nothing (QPS 0 or no P99)."""
    if n < 1:
        raise ValueError(f"need n >= 1 windows to judge, got {n}")
    if len(windows) < n:
        return False
    last = windows[-n:]
    return _agree([w.get("qps") for w in last], tolerance) and _agree(
        [w.get("p99_ms") for w in last], tolerance
    )


def merge_window(targets: list[dict[str, Any]], parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One window's counts, histograms (objects) and load generator CPU, over every process."""
    by_name: dict[str, dict[str, Any]] = {}
    for target in targets:
        merged: dict[str, Any] = {**dict.fromkeys(COUNTS, 0), "histogram": LatencyHistogram()}
        for part in parts:
            mine = part["targets"].get(target["name"])
            if mine is not None:
                for key in COUNTS:
                    merged[key] += mine.get(key, 0)
                merged["histogram"].merge(LatencyHistogram.from_dict(mine["histogram"]))
        by_name[target["name"]] = merged
    cpu = [p["cpu_util"] for p in parts]
    return {
        "targets": by_name,
        "cpu": max(cpu) if cpu else None,
        "processes": len(parts),
        "setup_errors": [e for p in parts for e in p.get("setup_errors", [])],
    }


def window_figures(window: dict[str, Any]) -> dict[str, Any]:
    """A window's QPS and P99 over every target: what the stability rule judges."""
    merged = LatencyHistogram()
    for t in window["targets"].values():
        merged.merge(t["histogram"])
    length = max(1e-9, window["end"] - window["start"])
    return {
        "start": window["start"],
        "end": window["end"],
        "qps": round(sum(t["requests"] for t in window["targets"].values()) / length, 3),
        "p99_ms": round(merged.percentile_us(99) / 1000.0, 3) if merged.count else None,
    }


def measurement_result(spec: dict[str, Any], windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The result file: the figures of the last ``stability_windows`` windows, every window's
    QPS and P99, and whether the judged ones agreed."""
    n = spec["stability_windows"]
    judged = windows[-n:]
    figures = [window_figures(w) for w in windows]
    targets: dict[str, dict[str, Any]] = {}
    for target in spec["targets"]:
        name = target["name"]
        histogram = LatencyHistogram()
        merged = dict.fromkeys(COUNTS, 0)
        for w in judged:
            for key in COUNTS:
                merged[key] += w["targets"][name][key]
            histogram.merge(w["targets"][name]["histogram"])
        targets[name] = {**merged, "histogram": histogram.to_dict()}
    cpu = [w["cpu"] for w in judged if w["cpu"] is not None]
    return {
        "setup_errors": judged[-1]["setup_errors"],
        "window": {"start": judged[0]["start"], "end": judged[-1]["end"]},
        "windows": [
            {"duration_s": round(f["end"] - f["start"], 3), "qps": f["qps"], "p99_ms": f["p99_ms"]}
            for f in figures
        ],
        "stable": windows_stable(figures, n),
        "processes": min(w["processes"] for w in judged),
        "workers_expected": spec["expect_workers"],
        "loadgen_cpu_util": max(cpu) if cpu else None,
        "targets": targets,
    }

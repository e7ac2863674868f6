"""The stability rule over measurement windows, and the load generator's result built from them."""

from __future__ import annotations

from typing import Any

import pytest

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.windows import measurement_result, merge_window, windows_stable


def w(qps: float, p99: float | None) -> dict[str, Any]:
    return {"qps": qps, "p99_ms": p99}


@pytest.mark.parametrize(
    ("windows", "n", "stable"),
    [
        ([w(100, 10), w(100, 10), w(100, 10)], 3, True),
        ([w(91, 10), w(100, 10), w(109, 10)], 3, True),  # each within 10% of the mean (100)
        ([w(89, 10), w(100, 10), w(111, 10)], 3, False),  # QPS strays 11%
        ([w(100, 9), w(100, 10), w(100, 12)], 3, False),  # p99 strays: 12 vs mean 10.33
        ([w(10, 50), w(100, 10), w(100, 10), w(100, 10)], 3, True),  # only the last 3 count
        ([w(100, 10), w(100, 10)], 3, False),  # too few windows yet
        ([w(100, 10), w(100, None), w(100, 10)], 3, False),  # a window with no success
        ([w(0, 10), w(0, 10), w(0, 10)], 3, False),  # nothing served
        ([w(100, 10)], 1, True),  # one window: the check is off
    ],
)
def test_stability_rule(windows: list[dict[str, Any]], n: int, stable: bool) -> None:
    assert windows_stable(windows, n) is stable


def test_stability_rule_needs_a_window_count() -> None:
    with pytest.raises(ValueError, match="n >= 1"):
        windows_stable([], 0)


def _part(name: str, latencies_us: list[int], late: int, cpu: float) -> dict[str, Any]:
    hist = LatencyHistogram()
    for us in latencies_us:
        hist.record(us)
    counts = {"requests": len(latencies_us), "errors": 0, "dropped": 0, "late": late}
    targets = {name: {**counts, "histogram": hist.to_dict()}}
    return {"targets": targets, "cpu_util": cpu, "setup_errors": []}


def test_the_result_has_the_figures_of_the_judged_windows_and_every_window() -> None:
    spec = {"targets": [{"name": "a"}], "stability_windows": 2, "expect_workers": 2}
    windows = []
    for i, (latency, late) in enumerate([(50_000, 9), (1000, 1), (1000, 2)]):
        # Two processes per window, as a master with two workers merges them.
        parts = [_part("a", [latency] * 10, late, 0.1 * (i + 1)), _part("a", [latency] * 10, 0, 0)]
        windows.append({**merge_window(spec["targets"], parts), "start": i, "end": i + 1.0})
    result = measurement_result(spec, windows)
    assert result["window"] == {"start": 1, "end": 3.0}
    assert result["stable"] is True and result["processes"] == 2
    assert [x["qps"] for x in result["windows"]] == [20.0, 20.0, 20.0]
    assert [x["p99_ms"] for x in result["windows"]] == [50.0, 1.0, 1.0]
    target = result["targets"]["a"]
    assert (target["requests"], target["late"]) == (40, 3)  # the first window is not in it
    assert LatencyHistogram.from_dict(target["histogram"]).max_us == 1000
    assert result["loadgen_cpu_util"] == pytest.approx(0.3)

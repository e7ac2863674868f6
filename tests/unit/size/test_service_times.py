"""Service-time histograms: from a bench row's latencies, through report.json, into a profile
and a queueing simulation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.summary import Pattern, Samples, TargetResult, build_row
from sharedserve.size.predict import ModelLoad, simulate
from sharedserve.size.profile import load_profiles, profiles_of
from sharedserve.size.service_times import ServiceTimes

OLD_PROFILES = Path(__file__).parents[2] / "data" / "plan" / "profiles"


def latencies_us(seed: int, n: int, sigma: float = 0.4, median_ms: float = 12.0) -> np.ndarray:
    """Lognormal latencies with a long tail, as a loaded CPU model's are, in whole us."""
    rng = np.random.default_rng(seed)
    return np.round(rng.lognormal(np.log(median_ms * 1000), sigma, n)).astype(int)


def sequential_row(values_us: np.ndarray, replicas: int = 1, **kw: Any) -> dict[str, Any]:
    targets = []
    for i, part in enumerate(np.array_split(values_us, replicas)):
        hist = LatencyHistogram()
        for v in part.tolist():
            hist.record(v)
        targets.append(TargetResult(f"m-{i}", hist.count, 0, 0, hist, model="m"))
    args = {"density": replicas, "pattern": Pattern.SEQUENTIAL, "window_s": 20.0,
            "samples": Samples(None, None, None, None), "loadgen_cpu_util": 0.2,
            "slo_p99_ms": None} | kw  # fmt: skip
    return build_row(targets=targets, **args)


def read_percentile(pairs: list[list[float]], q: float) -> float:
    """The smallest value with at least q of the counts at or below it (bench's reading)."""
    ordered = sorted(pairs)
    counts = np.cumsum([n for _, n in ordered])
    return float(ordered[int(np.searchsorted(counts, q * counts[-1]))][0])


@pytest.mark.parametrize(
    ("seed", "n", "sigma", "replicas"),
    [(1, 20_000, 0.4, 1), (2, 5_000, 1.0, 3), (3, 1_000, 0.1, 2), (4, 150, 0.6, 1)],
)
def test_a_row_carries_its_histogram_compactly_and_its_percentiles_read_back(
    seed: int, n: int, sigma: float, replicas: int
) -> None:
    values = latencies_us(seed, n, sigma)
    row = json.loads(json.dumps(sequential_row(values, replicas)))  # as report.json holds it
    model = row["models"]["m"]
    pairs = model["latency_histogram_ms"]
    assert 1 <= len(pairs) <= 100 and sum(c for _, c in pairs) == n
    assert all(isinstance(v, float) and isinstance(c, int) for v, c in pairs)
    assert [v for v, _ in pairs] == sorted(v for v, _ in pairs)
    # Against the row's own figures (its merged histogram) and the exact values measured.
    assert read_percentile(pairs, 0.5) == pytest.approx(model["p50_ms"], rel=0.01)
    assert read_percentile(pairs, 0.99) == pytest.approx(model["p99_ms"], rel=0.01)
    exact_p50, exact_p99 = np.quantile(values, [0.5, 0.99], method="inverted_cdf") / 1000
    assert read_percentile(pairs, 0.5) == pytest.approx(exact_p50, rel=0.01)
    assert read_percentile(pairs, 0.99) == pytest.approx(exact_p99, rel=0.01)
    mean = sum(v * c for v, c in pairs) / n
    assert mean == pytest.approx(values.mean() / 1000, rel=0.001)


def test_a_row_without_a_successful_request_has_no_histogram() -> None:
    failed = TargetResult("m-0", 5, 5, 0, LatencyHistogram(), model="m")
    row = build_row(density=1, pattern=Pattern.SEQUENTIAL, window_s=1.0, targets=[failed],
                    samples=Samples(None, None, None, None), loadgen_cpu_util=None,
                    slo_p99_ms=None)  # fmt: skip
    assert row["models"]["m"]["latency_histogram_ms"] is None


def test_a_few_requests_on_the_same_bucket_give_one_pair() -> None:
    hist = LatencyHistogram()
    hist.record(1500, 3)
    hist.record(900_000)
    assert hist.compact_us() == [(1500.0, 3), (pytest.approx(900_000, rel=1e-3), 1)]


def test_the_profile_takes_its_service_times_from_the_sequential_density_1_row() -> None:
    alone = sequential_row(latencies_us(5, 3_000, median_ms=10.0))
    crowded = sequential_row(latencies_us(6, 3_000, median_ms=40.0), replicas=2)
    parallel = sequential_row(latencies_us(7, 3_000, median_ms=80.0), pattern=Pattern.PARALLEL)
    report = {"rows": [crowded, parallel, alone]}
    profile = profiles_of(json.loads(json.dumps(report)))["m"]
    assert [p.service_times is not None for p in profile.points] == [True, True, True]
    times = profile.service_times
    assert times is not None and sum(times.counts) == 3_000
    assert times.mean_ms == pytest.approx(alone["models"]["m"]["p50_ms"], rel=0.15)
    # An untrusted row (the load generator the limit) is not a measure of the model.
    alone["unreliable"] = True
    assert profiles_of({"rows": [crowded, parallel, alone]})["m"].service_times is None


def test_the_open_loop_row_gives_what_a_request_costs_beyond_its_call() -> None:
    # size --verify measures open loop (latency from the schedule, the server idle between
    # requests), which costs a small CPU model 2-3 ms the closed-loop sequential row lacks.
    sequential = sequential_row(latencies_us(9, 3_000, median_ms=1.0))
    poisson = sequential_row(latencies_us(10, 300, median_ms=3.5), pattern=Pattern.POISSON)
    crowded = sequential_row(latencies_us(11, 300, median_ms=9.0), replicas=2,
                             pattern=Pattern.POISSON)  # fmt: skip
    report = json.loads(json.dumps({"rows": [sequential, crowded, poisson]}))
    profile = profiles_of(report)["m"]
    # The call (the time it holds a slot) stays the sequential row's.
    times, delay = profile.service_times, profile.open_loop_delay
    assert times is not None and sum(times.counts) == 3_000
    assert delay is not None and sum(delay.counts) == 300 and min(delay.values_ms) >= 0
    opened = ServiceTimes.of(report["rows"][2]["models"]["m"]["latency_histogram_ms"])
    assert times.mean_ms + delay.mean_ms == pytest.approx(opened.mean_ms, rel=0.02)
    assert profile.service_times_source is not None
    assert "plus its open-loop row's latency beyond a call" in profile.service_times_source
    # Untrusted (too few requests behind it), no delay, and the plan says so.
    report["rows"][2]["models"]["m"]["requests"] = 50
    fallback = profiles_of(report)["m"]
    assert fallback.open_loop_delay is None and fallback.service_times == times
    assert fallback.service_times_source is not None
    assert "no trusted open-loop row" in fallback.service_times_source


def test_the_open_loop_rows_own_queue_is_not_counted_as_delay() -> None:
    # A slow model's open-loop row runs at up to a quarter of its sequential rate (for enough
    # requests), where a request waits behind the one before; here at half: 40 ms calls at
    # 12.5/s (rho 0.5) wait 20 ms on average (M/D/1). The simulation queues them itself, so
    # the delay beside the queue is the 2 ms left over, not the 22 ms a plain subtraction of
    # the call gives.
    sequential = sequential_row(latencies_us(12, 3_000, sigma=0.01, median_ms=40.0))
    poisson = sequential_row(latencies_us(13, 250, sigma=0.01, median_ms=62.0),
                             pattern=Pattern.POISSON)  # fmt: skip  # 250 in 20 s: 12.5/s
    profile = profiles_of(json.loads(json.dumps({"rows": [sequential, poisson]})))["m"]
    delay = profile.open_loop_delay
    assert delay is not None
    assert delay.mean_ms == pytest.approx(2.0, abs=0.5)


def test_the_open_loop_delay_adds_to_a_request_and_holds_no_slot() -> None:
    # A 1 ms call at 600 requests/s with 2.5 ms more a request: as 3.5 ms calls, 2.1 slots'
    # worth (saturated); outside the slot, a 60%-busy queue and the delay beside it.
    call, extra = ServiceTimes.of([(1.0, 1)]), ServiceTimes.of([(2.5, 1)])
    (alone,) = simulate([ModelLoad("m", 600.0, call)], slots=1, requests=20_000, seed=3)
    (both,) = simulate([ModelLoad("m", 600.0, call, delay=extra)], slots=1, requests=20_000,
                       seed=3)  # fmt: skip
    assert not both.saturated and alone.p50_ms is not None and both.p50_ms is not None
    assert both.p50_ms == pytest.approx(alone.p50_ms + 2.5, rel=1e-6)


def test_an_old_report_without_histograms_still_profiles() -> None:
    profiles = load_profiles(OLD_PROFILES)
    raw = json.loads((OLD_PROFILES / "tiny" / "sequential" / "report.json").read_text())
    assert all("latency_histogram_ms" not in m for r in raw["rows"] for m in r["models"].values())
    assert profiles and all(p.points for p in profiles.values())
    assert all(p.service_times is None for p in profiles.values())
    assert all(pt.service_times is None for p in profiles.values() for pt in p.points)


def test_a_simulation_of_the_profiles_service_times_at_a_low_rate_gives_the_rows_p50() -> None:
    row = sequential_row(latencies_us(8, 20_000, sigma=0.5, median_ms=12.0))
    times = profiles_of(json.loads(json.dumps({"rows": [row]})))["m"].service_times
    assert times is not None
    # 2 requests/s against ~14 ms calls: a 3% busy slot, so a request rarely waits.
    (prediction,) = simulate([ModelLoad("m", 2.0, times)], slots=1, requests=20_000, seed=1)
    assert prediction.p50_ms == pytest.approx(row["models"]["m"]["p50_ms"], rel=0.03)
    assert prediction.p99_ms == pytest.approx(row["models"]["m"]["p99_ms"], rel=0.1)

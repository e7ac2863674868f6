"""Report math: rows, the SLO verdict, scaling efficiency and the recommendation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.judging import LOADGEN_CPU_LIMIT
from sharedserve.bench.summary import (
    MODEL_KEYS,
    PER_MODEL_KEYS,
    ROW_KEYS,
    Pattern,
    Samples,
    TargetResult,
    build_row,
    finalize_rows,
)
from sharedserve.bench.verdict import (
    TAIL_RATIO_NOTE,
    THROTTLED_SHARE_NOTE,
    recommend,
    throttle_notes,
)

# The report.json contract, written out independently of the module's constant.
CONTRACT = {
    "density", "pattern", "requests", "errors", "dropped", "qps", "p50_ms", "p90_ms", "p99_ms",
    "p999_ms", "max_ms", "scaling_efficiency", "gpu_name", "gpu_util_mean", "gpu_util_max",
    "gpu_mem_used_mib", "cpu_util_mean", "loadgen_cpu_util", "slo_met", "per_model",
    "duration_s", "error_rate", "unreliable", "stable", "late_share", "windows",
    "scale", "models", "gpus",
}  # fmt: skip
NO_SAMPLES = Samples(None, None, None, None)


def target(name: str, latencies_ms: list[float], errors: int = 0, dropped: int = 0) -> TargetResult:
    hist = LatencyHistogram()
    for ms in latencies_ms:
        hist.record(round(ms * 1000))
    return TargetResult(name, len(latencies_ms) + errors, errors, dropped, hist)


def row(targets: list[TargetResult], slo: float | None = 50.0, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "density": len(targets),
        "pattern": Pattern.SEQUENTIAL,
        "window_s": 10.0,
        "samples": NO_SAMPLES,
        "loadgen_cpu_util": 0.2,
        "slo_p99_ms": slo,
    }
    return build_row(targets=targets, **{**args, **kw})


def test_row_has_exactly_the_contract_keys_and_is_json_safe() -> None:
    r = row([target("tiny-0", [1.0, 2.0]), target("tiny-1", [3.0])])
    assert set(r) == CONTRACT == set(ROW_KEYS)
    assert list(r) == list(ROW_KEYS)
    assert all(set(m) == set(PER_MODEL_KEYS) for m in r["per_model"])
    assert all(set(m) == set(MODEL_KEYS) for m in r["models"].values())
    assert json.loads(json.dumps(r)) == r


def test_row_figures() -> None:
    fast = target("tiny-0", [float(i) for i in range(1, 101)], errors=2)  # 1..100 ms
    slow = target("tiny-1", [200.0, 400.5], dropped=3)
    samples = Samples(gpu_util_mean=41.23456, gpu_util_max=97.0, gpu_mem_used_mib=2048.0,
                      cpu_util_mean=1.5)  # fmt: skip
    r = row([fast, slow], pattern=Pattern.POISSON, window_s=4.0, samples=samples, slo=None,
            gpu_name="NVIDIA H100 80GB HBM3")  # fmt: skip
    assert r["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert r["density"] == 2 and r["pattern"] == "poisson" and r["duration_s"] == 4.0
    assert (r["requests"], r["errors"], r["dropped"]) == (104, 2, 3)
    assert r["qps"] == 26.0  # all completed requests, failed ones included, per second
    assert r["error_rate"] == round(2 / 104, 6)
    # Merged histogram of 102 latencies: 1..100, 200, 400.5 ms (all within 0.1%).
    assert r["p50_ms"] == pytest.approx(51.0, rel=1e-3)
    assert r["p90_ms"] == pytest.approx(92.0, rel=1e-3)
    assert r["p99_ms"] == pytest.approx(200.0, rel=1e-3)
    assert r["p999_ms"] == r["max_ms"] == 400.5
    assert r["gpu_util_mean"] == 41.235 and r["cpu_util_mean"] == 1.5
    assert r["slo_met"] is None and r["scaling_efficiency"] is None
    assert r["per_model"][0] == {
        "name": "tiny-0", "model": "tiny-0", "requests": 102, "errors": 2, "dropped": 0,
        "qps": 25.5, "p50_ms": pytest.approx(50.0, rel=1e-3),
        "p99_ms": pytest.approx(99.0, rel=1e-3),
        "cpu_throttled_share": None, "cpu_throttled_ms": None,  # no cgroup named
        "gpu_mem_mib": None, "gpu_memory_fraction": None,
    }  # fmt: skip
    assert r["per_model"][1]["p99_ms"] == 400.5  # never above the exact max
    for key in ("p50_ms", "p99_ms", "max_ms", "qps"):
        assert r[key] == round(r[key], 3)


def test_no_data_is_null_not_zero() -> None:
    r = row([target("tiny-0", [], errors=5)], loadgen_cpu_util=None)
    nulls = (
        "p50_ms p90_ms p99_ms p999_ms max_ms gpu_name gpu_util_mean gpu_util_max gpu_mem_used_mib"
    )
    for key in [*nulls.split(), "cpu_util_mean", "loadgen_cpu_util"]:
        assert r[key] is None, key
    assert r["per_model"][0]["p50_ms"] is None and r["per_model"][0]["p99_ms"] is None
    assert r["error_rate"] == 1.0 and r["unreliable"] is False and r["slo_met"] is False
    empty = row([target("tiny-0", [])])
    assert empty["error_rate"] is None and empty["qps"] == 0.0 and empty["slo_met"] is False


@pytest.mark.parametrize(
    ("targets", "slo", "expected"),
    [
        ([target("a", [10.0] * 100)], None, None),
        ([target("a", [10.0] * 100)], 50.0, True),
        ([target("a", [50.0] * 100)], 50.0, True),  # p99 equal to the SLO meets it
        ([target("a", [10.0] * 98 + [60.0] * 2)], 50.0, False),  # p99 60 ms
        ([target("a", [10.0] * 100), target("b", [10.0] * 98 + [60.0] * 2)], 50.0, False),
        ([target("a", [10.0] * 9999, errors=9)], 50.0, True),  # 0.09% errors
        ([target("a", [10.0] * 9990, errors=10)], 50.0, False),  # 0.1% errors is not < 0.1%
        ([target("a", [10.0] * 9999, dropped=11)], 50.0, False),  # drops count as failures
        ([target("a", [10.0] * 9999, dropped=1)], 50.0, True),
        ([target("a", [10.0] * 100), target("b", [])], 50.0, False),  # a model served nothing
        ([target("a", [], errors=3)], 50.0, False),
    ],
)
def test_slo_verdict(targets: list[TargetResult], slo: float | None, expected: bool | None) -> None:
    assert row(targets, slo=slo)["slo_met"] is expected


def test_max_error_rate_is_a_parameter() -> None:
    t = [target("a", [10.0] * 99, errors=1)]
    assert row(t)["slo_met"] is False
    assert row(t, max_error_rate=0.05)["slo_met"] is True


@pytest.mark.parametrize(
    ("cpu", "unreliable"),
    [(None, False), (0.1, False), (LOADGEN_CPU_LIMIT, False), (0.81, True), (1.02, True)],
)
def test_unreliable_when_the_load_generator_is_cpu_bound(
    cpu: float | None, unreliable: bool
) -> None:
    assert row([target("a", [1.0])], loadgen_cpu_util=cpu)["unreliable"] is unreliable


@pytest.mark.parametrize(
    "kw",
    [{"density": 0}, {"window_s": 0.0}, {"window_s": -1.0}, {"targets": []}],
)
def test_build_row_rejects_bad_arguments(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="need density"):
        row(kw.pop("targets", [target("a", [1.0])]), **kw)


@pytest.mark.parametrize(("requests", "errors", "dropped"), [(1, 2, 0), (1, -1, 0), (1, 0, -1)])
def test_target_result_rejects_impossible_counts(requests: int, errors: int, dropped: int) -> None:
    with pytest.raises(ValueError, match="errors <= requests"):
        TargetResult("a", requests, errors, dropped, LatencyHistogram())


def fake_row(
    density: int, qps: float | None, pattern: str = "sequential", **kw: Any
) -> dict[str, Any]:
    """A hand-made row with only what finalize_rows and recommend read."""
    base = {"density": density, "pattern": pattern, "qps": qps, "requests": 1000, "dropped": 0,
            "slo_met": True, "unreliable": False, "loadgen_cpu_util": 0.3, "per_model": [],
            "models": {}, "scaling_efficiency": None}  # fmt: skip
    if "per_model" in kw:  # the models' figures, by name, as build_row aggregates them
        kw["models"] = dict(kw.pop("per_model"))
    return {**base, **kw}


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([], []),
        ([fake_row(1, 100.0), fake_row(2, 180.0), fake_row(4, 200.0)], [1.0, 0.9, 0.5]),
        ([fake_row(2, 180.0), fake_row(4, 200.0)], [None, None]),  # no density-1 row
        ([fake_row(1, 0.0), fake_row(2, 10.0)], [None, None]),  # density 1 served nothing
        ([fake_row(1, 100.0), fake_row(2, None)], [1.0, None]),
        ([fake_row(4, 120.0), fake_row(1, 90.0)], [0.333, 1.0]),  # order does not matter
        (
            [
                fake_row(1, 100.0),
                fake_row(1, 50.0, "poisson"),
                fake_row(2, 150.0),
                fake_row(2, 100.0, "poisson"),
                fake_row(2, 40.0, "parallel"),
            ],
            [1.0, 1.0, 0.75, 1.0, None],
        ),
    ],
)
def test_finalize_rows_fills_scaling_efficiency(
    rows: list[dict[str, Any]], expected: list[float | None]
) -> None:
    finalize_rows(rows)
    assert [r["scaling_efficiency"] for r in rows] == expected


def model(
    name: str,
    p99: float | None,
    requests: int = 1000,
    errors: int = 0,
    dropped: int = 0,
    slo: float = 50.0,
) -> tuple[str, dict[str, Any]]:
    met = bool(requests) and not errors and not dropped and p99 is not None and p99 <= slo
    return name, {"replicas": 1, "requests": requests, "errors": errors, "dropped": dropped,
                  "qps": 10.0, "p50_ms": 1.0, "p99_ms": p99, "slo_p99_ms": slo,
                  "slo_met": met}  # fmt: skip


OK = [model("tiny-0", 20.0)]


@pytest.mark.parametrize(
    ("rows", "slo", "density", "phrases"),
    [
        (
            [fake_row(1, 1.0)],
            None,
            None,
            ["no SLO given (--slo-p99-ms, or slo_p99_ms in the spec)"],
        ),
        ([], 50.0, None, ["nothing was measured"]),
        (
            [
                fake_row(1, 1.0, per_model=OK),
                fake_row(2, 1.0, per_model=OK),
                fake_row(4, 1.0, per_model=OK),
                fake_row(8, 1.0, slo_met=False, per_model=[model("tiny", 81.2)]),
            ],
            50.0,
            4,
            [
                "density 4 is the largest whose every model met p99 <= 50 ms with < 0.1% errors; "
                "density 8 missed it: model tiny p99 81.2 ms > 50 ms"
            ],
        ),
        (
            [fake_row(1, 1.0), fake_row(2, 1.0)],
            50.0,
            2,
            ["density 2 is the largest", "no larger density was measured"],
        ),
        (
            [
                fake_row(1, 1.0, slo_met=False, per_model=[model("tiny-0", 70.0)]),
                fake_row(2, 1.0, slo_met=False, per_model=[model("tiny-0", 90.0)]),
            ],
            50.0,
            None,
            [
                "no density met p99 <= 50 ms with < 0.1% errors",
                "density 1 missed it",
                "tiny-0 p99 70 ms",
            ],
        ),
        (  # errors, a silent model, and drops are each named
            [
                fake_row(1, 1.0),
                fake_row(
                    2,
                    1.0,
                    slo_met=False,
                    per_model=[model("a", 5.0, errors=30, dropped=40), model("b", None, 0)],
                ),
            ],
            50.0,
            1,
            [
                "scale 2 (2 replicas) missed it: model a failed 6.73% (30 errors + 40 dropped)",
                "model b completed no requests",
            ],
        ),
        (  # a few drops of one model sink it even when the mix's share is below the threshold
            [
                fake_row(1, 1.0),
                fake_row(
                    2,
                    1.0,
                    slo_met=False,
                    per_model=[model("a", 20.0, 5000), model("b", 20.0, 500, dropped=1)],
                ),
            ],
            50.0,
            1,
            ["model b failed 0.2% (1 dropped)"],
        ),
        (  # unreliable rows are set aside even when they met the SLO
            [
                fake_row(1, 1.0),
                fake_row(2, 1.0),
                fake_row(4, 1.0, unreliable=True, loadgen_cpu_util=0.93),
            ],
            50.0,
            2,
            [
                "density 2 is the largest",
                "density 4 is not trustworthy, so not recommended: the load generator used 93% of "
                "a core (over 80%)",
            ],
        ),
        (
            [fake_row(1, 1.0, unreliable=True, loadgen_cpu_util=0.95)],
            50.0,
            None,
            ["no density can be recommended: every one that met", "density 1 is not trustworthy"],
        ),
        (  # an open-loop row whose load generator sent late is set aside alike
            [fake_row(1, 1.0), fake_row(2, 1.0, unreliable=True, late_share=0.123)],
            50.0,
            1,
            [
                "density 2 is not trustworthy, so not recommended: 12.3% of requests were sent "
                "over 1 ms late (over 5%)"
            ],
        ),
        (  # largest, even above a density that missed; the miss is reported as noise
            [
                fake_row(1, 1.0),
                fake_row(2, 1.0, slo_met=False, per_model=[model("x", 51.0)]),
                fake_row(4, 1.0),
            ],
            50.0,
            4,
            ["density 4 is the largest", "though smaller density 2 missed it: model x p99 51 ms"],
        ),
        (  # with two patterns, a density needs every pattern's row to meet it
            [
                fake_row(1, 1.0),
                fake_row(1, 1.0, "poisson"),
                fake_row(2, 1.0),
                fake_row(2, 1.0, "poisson", slo_met=False, per_model=[model("y", 60.0)]),
            ],
            50.0,
            1,
            ["density 2 (poisson) missed it: model y p99 60 ms"],
        ),
        (
            [
                fake_row(1, 1.0),
                fake_row(2, 1.0, slo_met=False, per_model=[model(f"m{i}", 99.0) for i in range(6)]),
            ],
            50.0,
            1,
            ["model m2 p99 99 ms > 50 ms, and 3 more"],
        ),
        ([fake_row(1, 1.0, slo_met=None)], 50.0, None, ["the SLO was not evaluated"]),
        ([fake_row(1, 1.0), fake_row(2, 1.0)], 12.5, 2, ["p99 <= 12.5 ms"]),
    ],
)
def test_recommend(
    rows: list[dict[str, Any]], slo: float | None, density: int | None, phrases: list[str]
) -> None:
    result = recommend(rows, slo)
    assert set(result) == {"scale", "density", "reason", "failing_model"}
    assert result["density"] == density == result["scale"]
    for phrase in phrases:
        assert phrase in result["reason"]


def test_recommend_on_built_rows_and_error_rate_parameter() -> None:
    rows = [
        row([target("m0", [5.0] * 1000)]),
        row([target(f"m{i}", [5.0] * 995, errors=5) for i in range(2)]),
    ]
    finalize_rows(rows)
    assert recommend(rows, 50.0)["density"] == 1
    assert "model m0 failed 0.5% (5 errors)" in recommend(rows, 50.0)["reason"]
    assert rows[1]["slo_met"] is False
    relaxed = [row(r, max_error_rate=0.01) for r in ([target("m0", [5.0])],)]
    assert relaxed[0]["slo_met"] is True
    assert "< 1% errors" in recommend(relaxed, 50.0, max_error_rate=0.01)["reason"]


# --- stability, lateness, throttling -------------------------------------------------------------


def test_unstable_rows_are_never_recommended_and_the_reason_says_so() -> None:
    fast = [target("tiny-0", [5.0] * 100)]
    rows = [row(fast, density=1, stable=True), row(fast * 2, density=2, stable=False)]
    rows[1]["windows"] = [{"duration_s": 1.0, "qps": q, "p99_ms": 5.0} for q in (10, 20, 30)]
    rec = recommend(rows, 50.0)
    assert rec["density"] == 1
    assert "density 2 is not recommended: unstable" in rec["reason"]
    assert "3 windows measured" in rec["reason"]
    # Not judged (an older report, or --stability-windows 1 never says False): still recommended.
    rows[1]["stable"] = None
    assert recommend(rows, 50.0)["density"] == 2


def test_late_share_is_reported_for_open_loop_rows_only() -> None:
    hist = LatencyHistogram()
    for _ in range(8):
        hist.record(1000)
    late = TargetResult("tiny-0", 10, 2, 0, hist, late=3)
    assert row([late], pattern=Pattern.POISSON)["late_share"] == 0.3
    assert row([late], pattern=Pattern.PARALLEL)["late_share"] is None


def test_throttling_goes_into_per_model_and_the_note_names_the_quota() -> None:
    hist = LatencyHistogram()
    for ms in [9] * 95 + [61] * 5:
        hist.record(ms * 1000)
    throttled = TargetResult(
        "tiny-0", 100, 0, 0, hist, cpu_throttled_share=0.4567, cpu_throttled_ms=1234.5678
    )
    r = row([throttled])
    (model,) = r["per_model"]
    assert model["cpu_throttled_share"] == 0.457 and model["cpu_throttled_ms"] == 1234.568
    (note,) = throttle_notes([r])
    assert note == (
        "density 1, model tiny-0: p99 61 ms (p50 9.01 ms) with its CPU quota throttling 46% of "
        "periods: the quota, not its neighbours, sets the tail; try a larger --cpu-limit"
    )
    assert row([target("tiny-0", [1.0])])["per_model"][0]["cpu_throttled_share"] is None


@pytest.mark.parametrize(
    ("share", "p50", "p99", "noted"),
    [
        (0.2, 9.0, 27.0, True),  # both at their thresholds
        (0.19, 9.0, 61.0, False),  # barely throttled: the tail is someone else's
        (0.9, 9.0, 26.9, False),  # throttled, but no long tail to explain
        (None, 9.0, 61.0, False),  # no cgroup: nothing to say
        (0.9, None, None, False),  # nothing succeeded
    ],
)
def test_throttle_note_thresholds(
    share: float | None, p50: float | None, p99: float | None, noted: bool
) -> None:
    model = {"name": "tiny-0", "requests": 100, "errors": 0, "cpu_throttled_share": share,
             "p50_ms": p50, "p99_ms": p99}  # fmt: skip
    rows = [{"density": 1, "pattern": "parallel", "per_model": [model]}]
    assert bool(throttle_notes(rows)) is noted
    assert THROTTLED_SHARE_NOTE == 0.2 and TAIL_RATIO_NOTE == 3.0


def test_throttle_notes_are_capped() -> None:
    models = [
        {"name": f"tiny-{i}", "requests": 100, "errors": 0, "cpu_throttled_share": 0.5,
         "p50_ms": 1.0, "p99_ms": 9.0}
        for i in range(7)
    ]  # fmt: skip
    notes = throttle_notes([{"density": 7, "pattern": "parallel", "per_model": models}])
    assert len(notes) == 6 and notes[-1] == "and 2 more models throttled likewise"


# --- a mix of models, each judged against its own objective --------------------------------------


def replica(
    name: str, model: str, latencies_ms: list[float], slo: float | None = None, **kw: Any
) -> TargetResult:
    hist = LatencyHistogram()
    for ms in latencies_ms:
        hist.record(round(ms * 1000))
    return TargetResult(name, len(latencies_ms), 0, 0, hist, model=model, slo_p99_ms=slo, **kw)


def mix_row(scale: int, resnet_ms: float, tiny_ms: float = 5.0) -> dict[str, Any]:
    """The example mix at ``scale``: tiny (slo 50) x4, mobilenet_v2 (its run's 250) x2 and
    resnet50 (slo 1000) x1, each times ``scale``."""
    targets = [
        *(
            replica(f"tiny-{i}", "tiny", [tiny_ms] * 100, 50.0, weight=6.0)
            for i in range(4 * scale)
        ),
        *(replica(f"mobilenet_v2-{i}", "mobilenet_v2", [100.0] * 50) for i in range(2 * scale)),
        *(replica(f"resnet50-{i}", "resnet50", [resnet_ms] * 10, 1000.0) for i in range(scale)),
    ]
    return row(targets, slo=250.0, density=len(targets), scale=scale)


def test_models_aggregate_replicas_and_judge_each_against_its_own_objective() -> None:
    slow = replica("tiny-1", "tiny", [90.0] * 5, 50.0, cpu_throttled_share=0.5, gpu_mem_mib=700)
    fast = replica("tiny-0", "tiny", [5.0] * 95, 50.0, cpu_throttled_share=0.1, gpu_mem_mib=650,
                   gpu_memory_fraction=0.25, cpu_limit=0.5)  # fmt: skip
    other = replica("edge-0", "edge", [300.0] * 10)  # no objective of its own: the run's
    r = row([fast, slow, other], slo=250.0, scale=1)
    assert list(r["models"]) == ["tiny", "edge"]
    tiny = r["models"]["tiny"]
    assert set(tiny) == set(MODEL_KEYS)
    assert (tiny["replicas"], tiny["requests"], tiny["qps"]) == (2, 100, 10.0)
    # Merged: 95 requests at 5 ms and 5 at 90 ms, so p50 5 ms and p99 90 ms (the slow replica's).
    assert tiny["p50_ms"] == pytest.approx(5.0, rel=1e-3)
    assert tiny["p99_ms"] == pytest.approx(90.0, rel=1e-3)
    assert tiny["slo_p99_ms"] == 50.0 and tiny["slo_met"] is False
    assert tiny["cpu_throttled_share"] == 0.5 and tiny["gpu_mem_mib"] == 700  # the worst replica
    assert tiny["gpu_memory_fraction"] == 0.25 and tiny["cpu_limit"] == 0.5
    edge = r["models"]["edge"]
    assert edge["slo_p99_ms"] == 250.0 and edge["slo_met"] is False  # 300 ms > the run's 250
    assert r["slo_met"] is False and r["scale"] == 1 and r["density"] == 3
    assert [m["model"] for m in r["per_model"]] == ["tiny", "tiny", "edge"]


def test_a_model_without_any_objective_is_not_judged() -> None:
    r = row([replica("a-0", "a", [10.0], 50.0), replica("b-0", "b", [900.0])], slo=None, scale=1)
    assert r["models"]["a"]["slo_met"] is True and r["models"]["b"]["slo_met"] is None
    assert r["slo_met"] is True  # every model with an objective met it
    rec = recommend([r])
    assert rec["scale"] == 1 and "not judged, no objective: model b" in rec["reason"]


def test_recommendation_is_the_largest_scale_every_model_met_and_names_the_worst_miss() -> None:
    rows = [mix_row(1, 400.0), mix_row(2, 700.0), mix_row(4, 2500.0, tiny_ms=60.0)]
    finalize_rows(rows)
    rec = recommend(rows, 250.0)
    assert (rec["scale"], rec["density"]) == (2, 14)
    # At scale 4 both tiny (60 > 50 ms, 1.2x) and resnet50 (2500 > 1000 ms, 2.5x) missed:
    # the one furthest over its objective comes first.
    assert rec["failing_model"] == "resnet50"
    assert rec["reason"] == (
        "scale 2 (14 replicas) is the largest at which every model met its own p99 objective "
        "with < 0.1% errors; scale 4 (28 replicas) missed it: model resnet50 p99 2500 ms (all 4 "
        "replicas) > 1000 ms, model tiny p99 60 ms (all 16 replicas) > 50 ms"
    )
    # Every replica served as many requests at every scale here: throughput grew with the scale.
    assert [r["scaling_efficiency"] for r in rows] == [1.0, 1.0, 1.0]


def test_no_scale_met_names_the_model_that_missed_at_the_first() -> None:
    rec = recommend([mix_row(1, 5000.0), mix_row(2, 6000.0)], 250.0)
    assert rec["scale"] is None and rec["density"] is None
    assert rec["failing_model"] == "resnet50"
    assert rec["reason"].startswith("no scale met its own p99 objective")

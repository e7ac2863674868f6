"""Model profiles read from bench reports: rows as ``build_row`` makes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.summary import Pattern, Samples, TargetResult, build_row
from sharedserve.errors import ConfigError
from sharedserve.size.profile import capacity, load_profiles, profiles_of

H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}


def replica(name: str, model: str, ms: float, count: int, **kw: Any) -> TargetResult:
    hist = LatencyHistogram()
    for _ in range(count):
        hist.record(round(ms * 1000))
    return TargetResult(name, count, 0, 0, hist, model=model, **kw)


def sweep_row(density: int, ms: float, count: int, **kw: Any) -> dict[str, Any]:
    """A density of a one-model sweep: ``density`` replicas of resnet50, 10 s measured."""
    targets = [
        replica(f"resnet50-{i}", "resnet50", ms, count, gpu_mem_mib=2100 + i)
        for i in range(density)
    ]
    samples = Samples(gpu_util_mean=30.0 * density, gpu_util_max=99.0, gpu_mem_used_mib=None,
                      cpu_util_mean=0.5 * density)  # fmt: skip
    args = {"pattern": Pattern.PARALLEL, "window_s": 10.0, "loadgen_cpu_util": 0.3,
            "slo_p99_ms": 100.0, "gpu_name": H100["name"]} | kw  # fmt: skip
    return build_row(density=density, targets=targets, samples=samples, **args)


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"rows": rows, "environment": {"gpus": [H100]}}


SWEEP = report([sweep_row(1, 20.0, 500), sweep_row(2, 40.0, 450), sweep_row(4, 150.0, 200)])


def test_a_sweep_gives_a_point_per_density() -> None:
    (profile,) = profiles_of(SWEEP, "sweep.json").values()
    assert profile.model == "resnet50" and profile.gpu_name == H100["name"]
    assert [p.density for p in profile.points] == [1, 2, 4]
    one, two, four = profile.points
    assert one.qps_per_replica == 50.0 and two.qps_per_replica == 45.0
    assert four.p99_ms == pytest.approx(150.0, rel=1e-3)
    # Measured: the highest replica's NVML peak; busy: the GPU's utilisation over its replicas.
    assert (two.gpu_mem_mib, two.gpu_mem_source) == (2101.0, "nvml")
    assert two.gpu_busy_share == pytest.approx(0.3) and two.cpu_cores_per_replica == 0.5
    assert two.cpu_limit is None  # measured without a CPU limit
    assert profile.max_density == 4 and profile.source == "sweep.json"


@pytest.mark.parametrize(
    ("slo", "qps", "density"),
    [(100.0, 50.0, 1), (10.0, None, None), (1000.0, 50.0, 1)],
)
def test_capacity_is_the_highest_qps_per_replica_that_met_the_objective(
    slo: float, qps: float | None, density: int | None
) -> None:
    (profile,) = profiles_of(SWEEP).values()
    found = capacity(profile, slo)
    if qps is None:
        assert found is None
    else:
        assert found is not None
        assert (found.qps_per_replica, found.point.density) == (qps, density)


def test_untrusted_and_failing_points_are_never_capacity() -> None:
    rows = [
        sweep_row(1, 20.0, 500, stable=False),  # its windows never agreed
        sweep_row(2, 20.0, 400, loadgen_cpu_util=0.95),  # the load generator was the limit
        sweep_row(4, 20.0, 100),
        sweep_row(8, 20.0, 12),  # 96 requests: too few behind a p99
    ]
    (profile,) = profiles_of(report(rows)).values()
    found = capacity(profile, 100.0)
    assert found is not None and found.point.density == 4
    assert profile.max_density == 4 and not profile.points[3].trusted
    failing = replica("resnet50-0", "resnet50", 5.0, 1000)
    failing = TargetResult("resnet50-0", 1000, 5, 0, failing.histogram, model="resnet50")
    row = build_row(density=1, pattern=Pattern.PARALLEL, window_s=10.0, targets=[failing],
                    samples=Samples(None, None, None, None), loadgen_cpu_util=0.2,
                    slo_p99_ms=None)  # fmt: skip
    (profile,) = profiles_of(report([row])).values()
    assert profile.points[0].failed_share == 0.005 and capacity(profile, 100.0) is None


def test_a_mix_gives_each_model_its_points_and_no_busy_share() -> None:
    targets = [
        replica("tiny-0", "tiny", 2.0, 900, gpu_memory_fraction=0.1, cpu_limit=0.5),
        replica("tiny-1", "tiny", 2.0, 900, gpu_memory_fraction=0.1),
        replica("resnet50-0", "resnet50", 30.0, 100, gpu_mem_mib=3000),
    ]
    row = build_row(density=3, scale=1, pattern=Pattern.POISSON, window_s=10.0, targets=targets,
                    samples=Samples(60.0, 90.0, None, 1.5), loadgen_cpu_util=0.1,
                    slo_p99_ms=50.0, gpu_name=H100["name"])  # fmt: skip
    profiles = profiles_of(report([row]))
    assert list(profiles) == ["tiny", "resnet50"]
    (tiny,) = profiles["tiny"].points
    assert (tiny.density, tiny.replicas, tiny.qps_per_replica) == (3, 2, 90.0)
    # No NVML figure for tiny: its cap, as a share of the report's GPU, says so.
    assert tiny.gpu_mem_mib == 8155 and tiny.gpu_mem_source == "cap"  # 0.1 x 81559, floored
    # One GPU's utilisation cannot be split between two models.
    assert tiny.gpu_busy_share is None and tiny.cpu_cores_per_replica == 0.5
    assert tiny.cpu_limit == 0.5  # the limit it was measured under


def test_a_cpu_profile_has_no_gpu_figures() -> None:
    row = sweep_row(1, 20.0, 100, gpu_name=None)
    row.update(gpu_util_mean=None)
    row["models"]["resnet50"]["gpu_mem_mib"] = None
    (profile,) = profiles_of({"rows": [row], "environment": {"gpus": None}}).values()
    (point,) = profile.points
    assert profile.gpu_name is None
    assert (point.gpu_mem_mib, point.gpu_mem_source, point.gpu_busy_share) == (None, None, None)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "not a bench report"),
        ({"rows": []}, "no rows"),
        ({"rows": [{"density": 1, "per_model": []}]}, "predates them"),
        ({"rows": [{"density": 1, "models": {"m": {"replicas": 1}}}]}, "not in bench's format"),
    ],
)
def test_what_is_not_a_profile_is_refused_clearly(data: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        profiles_of(data, "x.json")


def test_load_profiles_reads_a_file_and_names_it_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(SWEEP))
    assert list(load_profiles(path)) == ["resnet50"]
    path.write_text("{")
    with pytest.raises(ConfigError, match=r"report\.json is not valid JSON"):
        load_profiles(path)
    with pytest.raises(ConfigError, match="cannot read profile"):
        load_profiles(tmp_path / "missing.json")


def test_a_profile_directory_is_every_report_under_it(tmp_path: Path) -> None:
    for pattern, ms in (("sequential", 10.0), ("parallel", 30.0)):
        (tmp_path / pattern).mkdir()
        rows = [sweep_row(1, ms, 300, pattern=Pattern(pattern))]
        (tmp_path / pattern / "report.json").write_text(json.dumps(report(rows)))
    (profile,) = load_profiles(tmp_path).values()
    assert sorted(p.pattern for p in profile.points) == ["parallel", "sequential"]
    assert profile.source == str(tmp_path)
    other = report([sweep_row(1, 5.0, 10, gpu_name="NVIDIA A100-SXM4-80GB")])
    (tmp_path / "a100").mkdir()
    (tmp_path / "a100" / "report.json").write_text(json.dumps(other))
    with pytest.raises(ConfigError, match="a profile is one kind of GPU"):
        load_profiles(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"holds no report\.json"):
        load_profiles(tmp_path / "empty")


def timed(name: str, model: str, latencies: dict[float, int]) -> TargetResult:
    """A replica whose requests took each latency (ms) that many times."""
    hist = LatencyHistogram()
    for ms, count in latencies.items():
        hist.record(round(ms * 1000), count)
    return TargetResult(name, hist.count, 0, 0, hist, model=model)


def row_of(pattern: Pattern, *targets: TargetResult, density: int | None = None) -> dict[str, Any]:
    """A row of ``targets`` over a 10 s window on the H100."""
    return build_row(density=density or len(targets), pattern=pattern, window_s=10.0,
                     targets=list(targets), samples=Samples(None, None, None, None),
                     loadgen_cpu_util=0.1, slo_p99_ms=None, gpu_name=H100["name"])  # fmt: skip


def write(path: Path, *rows: dict[str, Any]) -> None:
    path.mkdir(parents=True)
    (path / "report.json").write_text(json.dumps(report(list(rows))))


def profile_beside_resnet50(root: Path) -> Path:
    """``profile --beside`` of tiny: its sweeps, its open-loop row, and the row beside resnet50."""
    alone = timed("tiny-0", "tiny", {4.0: 1000})
    two = [timed(f"tiny-{i}", "tiny", {6.0: 900}) for i in range(2)]
    write(root / "sequential", row_of(Pattern.SEQUENTIAL, alone), row_of(Pattern.SEQUENTIAL, *two))
    write(root / "poisson", row_of(Pattern.POISSON, timed("tiny-0", "tiny", {5.0: 180, 10.0: 20})))
    # Beside resnet50 at 5 requests/s of 34 ms: 0.17 requests in flight on average.
    beside = timed("tiny-0", "tiny", {6.0: 180, 25.0: 20})
    resnet = timed("resnet50-0", "resnet50", {34.0: 50})
    write(root / "beside-resnet50", row_of(Pattern.POISSON, beside, resnet))
    return root


def test_a_profile_directorys_beside_reports_are_its_models_neighbourhoods(
    tmp_path: Path,
) -> None:
    root = profile_beside_resnet50(tmp_path / "tiny")
    profiles = load_profiles(root)
    # The neighbour is no profile of the directory, and the row beside it is no point of tiny.
    assert list(profiles) == ["tiny"]
    tiny = profiles["tiny"]
    assert sorted((p.pattern, p.density) for p in tiny.points) == [
        ("poisson", 1), ("sequential", 1), ("sequential", 2)]  # fmt: skip
    copy, resnet = tiny.neighbourhoods
    # Its sequential row at density 2: one copy, each replica at 90/s of 6 ms in flight 0.54 of
    # the time, its p50 and p99 6 ms over 4 ms alone.
    assert (copy.kind, copy.neighbours) == ("tiny", "1 copy of itself")
    assert copy.busy_share == pytest.approx(0.54, rel=1e-3)
    assert (copy.p50_slowdown, copy.p99_slowdown) == pytest.approx((1.5, 1.5), rel=1e-3)
    assert copy.source == f"profile {root}, its sequential row at density 2"
    # Beside resnet50: its p50 6 ms over 5 ms in its open-loop row alone, its p99 25 over 10.
    assert (resnet.kind, resnet.neighbours) == ("resnet50", "resnet50")
    assert resnet.busy_share == pytest.approx(0.17, rel=1e-3)
    assert (resnet.p50_slowdown, resnet.p99_slowdown) == pytest.approx((1.2, 2.5), rel=1e-3)
    assert resnet.description == (
        f"interference measured beside resnet50 at 0.17 busy (profile {root}/beside-resnet50)"
    )


def test_a_neighbourhood_needs_its_model_trusted_both_there_and_alone(tmp_path: Path) -> None:
    root = profile_beside_resnet50(tmp_path / "tiny")
    # 99 requests beside resnet50: too few behind a p99.
    few = timed("tiny-0", "tiny", {6.0: 90, 25.0: 9})
    resnet = timed("resnet50-0", "resnet50", {34.0: 50})
    (root / "beside-resnet50" / "report.json").write_text(
        json.dumps(report([row_of(Pattern.POISSON, few, resnet)]))
    )
    assert [n.kind for n in load_profiles(root)["tiny"].neighbourhoods] == ["tiny"]
    # Without its open-loop row alone, a row beside another has nothing to be over.
    profile_beside_resnet50(tmp_path / "again")
    (tmp_path / "again" / "poisson" / "report.json").unlink()
    assert [n.kind for n in load_profiles(tmp_path / "again")["tiny"].neighbourhoods] == ["tiny"]


def test_a_directory_of_beside_reports_alone_is_no_profile(tmp_path: Path) -> None:
    write(tmp_path / "beside-resnet50", row_of(Pattern.POISSON, timed("t-0", "t", {5.0: 200})))
    with pytest.raises(ConfigError, match=r"holds no report\.json but its beside-\* ones"):
        load_profiles(tmp_path)

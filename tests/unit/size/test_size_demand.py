"""What each fleet model asks of the GPUs: replicas from the profile's capacity with headroom,
memory and busy share per replica with their sources."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from sharedserve.errors import ConfigError
from sharedserve.size.demand import demands
from sharedserve.size.fleet import Fleet, FleetModel, GpuType, NodeType
from sharedserve.size.profile import ModelProfile, ProfilePoint


def point(density: int, qps: float, p99: float, **kw: Any) -> ProfilePoint:
    values = {"pattern": "parallel", "density": density, "replicas": density,
              "qps_per_replica": qps, "p50_ms": p99 / 3, "p99_ms": p99, "failed_share": 0.0,
              "trusted": True, "cpu_cores_per_replica": 0.5, "cpu_limit": 1.0,
              "gpu_mem_mib": 2000.0,
              "gpu_mem_source": "nvml", "gpu_busy_share": 0.2} | kw  # fmt: skip
    return ProfilePoint(**values)


H100 = "NVIDIA H100 80GB HBM3"
RESNET = ModelProfile(
    "resnet50",
    H100,
    (point(1, 100.0, 20.0), point(2, 90.0, 40.0), point(4, 60.0, 150.0, gpu_busy_share=None)),
    "r.json",
)


def fleet(*models: FleetModel, target: float = 0.8) -> Fleet:
    return Fleet(GpuType("H100-80GB", 81559, 3.0), NodeType(8, 64), models, target)


def model(**kw: Any) -> FleetModel:
    values = {"name": "fraud", "profile": Path("r.json"), "peak_qps": 500.0,
              "slo_p99_ms": 100.0, "profile_model": "resnet50"} | kw  # fmt: skip
    return FleetModel(**values)


def one(entry: FleetModel, profile: ModelProfile = RESNET, **kw: Any) -> Any:
    (found,), warnings = demands(fleet(entry, **kw), {"r.json": {profile.model: profile}})
    return found, warnings


def test_replicas_come_from_the_best_point_that_met_the_objective_with_headroom() -> None:
    d, warnings = one(model())
    # 100 req/s per replica met 100 ms at density 1; 80% of it: 80; 500 / 80 -> 7 replicas.
    assert (d.capacity_qps, d.replicas) == (100.0, 7)
    assert d.rate_per_replica == pytest.approx(500 / 7)
    assert (d.memory_mib, d.memory_source) == (2000.0, "nvml")
    # The row's GPU utilisation at 100 req/s was 20%: at 71.4 req/s, 14.3%.
    assert d.busy_share == pytest.approx(0.2 * (500 / 7) / 100)
    assert d.busy_source == "gpu utilisation"
    assert d.max_density == 4 and d.predicted_p99_ms == 20.0
    assert warnings == []  # H100-80GB is the profile's NVIDIA H100 80GB HBM3


@pytest.mark.parametrize(
    ("peak", "min_replicas", "expected"),
    [(10.0, 2, 2), (10.0, 1, 1), (80.0, 1, 1), (80.1, 1, 2), (1000.0, 2, 13)],
)
def test_at_least_min_replicas(peak: float, min_replicas: int, expected: int) -> None:
    d, _ = one(model(peak_qps=peak, min_replicas=min_replicas))
    assert d.replicas == expected == max(min_replicas, math.ceil(peak / 80.0))
    assert d.spread == min_replicas  # the replicas kept for availability go on different GPUs


def test_a_tighter_objective_moves_to_a_lower_point_and_throughput_sets_the_busy_share() -> None:
    profile = ModelProfile("resnet50", H100, (point(4, 60.0, 15.0, gpu_busy_share=None),), "r.json")
    d, _ = one(model(peak_qps=96.0, slo_p99_ms=15.0), profile)
    assert (d.capacity_qps, d.replicas) == (60.0, 2)
    # No utilisation for this row: a replica at 60 req/s with 4 sharing counts as 1/4 of a GPU.
    assert d.busy_share == pytest.approx((48.0 / 60.0) / 4)
    assert d.busy_source == "throughput"


def test_memory_falls_back_to_the_files_on_disk_or_says_what_to_give() -> None:
    bare = ModelProfile("resnet50", H100, (point(1, 100.0, 20.0, gpu_mem_mib=None,
                                                 gpu_mem_source=None),), "r.json")  # fmt: skip
    (d,), _ = demands(fleet(model()), {"r.json": {"resnet50": bare}}, {"fraud": 98.5})
    assert (d.memory_mib, d.memory_source) == (98.5, "weights")
    with pytest.raises(ConfigError, match="give its files as `model:`"):
        demands(fleet(model()), {"r.json": {"resnet50": bare}})


def test_max_replicas_per_gpu_caps_the_measured_density() -> None:
    assert one(model(max_replicas_per_gpu=2))[0].max_density == 2
    assert one(model(max_replicas_per_gpu=16))[0].max_density == 4  # never beyond measured


def test_a_profile_that_never_met_the_objective_is_an_error_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"model fraud: its profile \(r.json\) never met p99 <= 5 "
                       r"ms .* its best p99 was 20 ms"):  # fmt: skip
        one(model(slo_p99_ms=5.0))


def test_a_missing_model_or_report_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"measured no model 'bert' .*it has: resnet50"):
        one(model(profile_model="bert"))
    with pytest.raises(ConfigError, match="no profile was read"):
        demands(fleet(model()), {})


@pytest.mark.parametrize(
    ("gpu", "warned"),
    [(H100, None), ("NVIDIA A100-SXM4-80GB", "measured on NVIDIA A100"), (None, "without a GPU")],
)
def test_a_profile_from_another_gpu_or_a_cpu_is_a_warning(gpu: str | None, warned: str) -> None:
    profile = ModelProfile("resnet50", gpu, RESNET.points, "r.json")
    _, warnings = one(model(), profile)
    if warned is None:
        assert warnings == []
    else:
        (warning,) = warnings
        assert warned in warning and "H100-80GB" in warning and warning.startswith("model fraud")


def test_many_models_on_one_cpu_profile_are_one_warning() -> None:
    cpu = ModelProfile("resnet50", None, RESNET.points, "r.json")
    entries = [model(name=f"m{i}") for i in range(8)]
    _, warnings = demands(fleet(*entries), {"r.json": {"resnet50": cpu}})
    (warning,) = warnings
    assert warning.startswith("models m0, m1, m2, m3, m4 and 3 more: their profile (r.json)")
    assert "without a GPU" in warning


def test_p99_beside_neighbours_is_the_sequential_row_at_that_many_replicas() -> None:
    points = (
        *RESNET.points,
        point(1, 50.0, 8.0, pattern="sequential"),
        point(2, 45.0, 15.0, pattern="sequential"),
        point(4, 30.0, 35.0, pattern="sequential"),
        point(8, 20.0, 90.0, pattern="sequential", trusted=False),
    )
    d, _ = one(model(), ModelProfile("resnet50", H100, points, "r.json"))
    assert d.sharing_p99_ms == ((1, 8.0), (2, 15.0), (4, 35.0))
    # 3 replicas on its GPU: the row of 4; alone: the row of 1; past every trusted row: the
    # capacity point's p99 (20 ms, the parallel row of 1 at 100 req/s).
    assert (d.p99_sharing(3), d.p99_sharing(1), d.p99_sharing(8)) == (35.0, 8.0, 20.0)

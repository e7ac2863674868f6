"""Each model's p50/p99 in the plan: simulated where its profile has service times, else read
off its profile row as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sharedserve.size.demand import Demand
from sharedserve.size.predict import calls_at_once, slots_of
from sharedserve.size.predict.forecast import _rounded_rho
from sharedserve.size.profile import ProfilePoint
from sharedserve.size.run import plan_fleet

DATA = Path(__file__).resolve().parents[2] / "data" / "plan"


def _plan(tmp_path: Path, histogram: list[list[float]] | None) -> dict[str, dict]:
    """tests/data/plan's fleet, its tiny profile's sequential row alone given ``histogram``."""
    shutil.copytree(DATA, tmp_path / "plan", ignore=shutil.ignore_patterns("expected"))
    report = tmp_path / "plan" / "profiles" / "tiny" / "sequential" / "report.json"
    data = json.loads(report.read_text())
    if histogram is not None:
        data["rows"][0]["models"]["tiny"]["latency_histogram_ms"] = histogram
    report.write_text(json.dumps(data))
    plan_fleet(tmp_path / "plan" / "fleet.yaml", tmp_path / "out")
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    return {m["name"]: m for m in plan["models"]}


def test_service_times_give_a_simulated_prediction_and_others_keep_the_row(
    tmp_path: Path,
) -> None:
    # Alone, a call takes 3, 4 or 8 ms (mean 4, the row's p50); the sequential rows show 6 ms
    # beside one neighbour, a 1.5x slowdown. ranker: 100 QPS a replica on 2 slots (1 core).
    models = _plan(tmp_path, [[3.0, 2000], [4.0, 1500], [8.0, 500]])
    ranker = models["ranker"]
    # Its GPU's other process is tiny's: the same kind as ranker's profile, so its
    # neighbourhood is the copy of itself its sequential row at density 2 measured.
    assert ranker["prediction_source"] == (
        "queueing simulation (shared server); interference measured beside 1 copy of itself "
        f"at 2.3 busy (profile {tmp_path}/plan/profiles/tiny, its sequential row at density 2), "
        "scaled to 2 busy"
    )
    assert "simulated requests" in ranker["prediction_error"]
    assert "size --verify" in ranker["prediction_error"]
    # The 1.5x measured at 2.3 busy, scaled to the 2 planned: 1 + 0.5 x 2 / 2.3 = 1.43x.
    # Its slowest call at the slowdown (8 x 1.43 = 11.5 ms) is in its p99 (12.5% of calls); a
    # queue at rho 0.3 adds little. Not the row's 6 ms, which has no slow call in it.
    assert "p50 1.44x, p99 1.44x its own alone" in ranker["prediction_error"]
    assert 8.0 * 1.43 <= ranker["predicted_p99_ms"] < 3 * 8.0 * 1.5
    assert ranker["predicted_p50_ms"] < ranker["predicted_p99_ms"]
    # vision's profile has no service times: today's figure, from its row.
    vision = models["vision"]
    assert vision["prediction_source"] == "profile row"
    assert (vision["predicted_p50_ms"], vision["predicted_p99_ms"]) == (45.0, 45.0)
    assert "size --verify" in vision["prediction_error"]


def test_a_shared_servers_models_are_simulated_in_one_process(tmp_path: Path) -> None:
    # ranker (100 QPS a replica) and fraud (40) share shared-0: one process of 2 slots. Each is
    # simulated beside the other, so fraud's calls queue behind ranker's: both see one queue.
    # Before, each was simulated as if it had the process to itself.
    models = _plan(tmp_path, [[3.0, 2000], [4.0, 1500], [8.0, 500]])
    ranker, fraud = models["ranker"], models["fraud"]
    for model, neighbour in ((ranker, "fraud"), (fraud, "ranker")):
        assert model["prediction_source"].startswith("queueing simulation (shared server); ")
        assert f"with {neighbour} (shared-0)" in model["prediction_error"]
    # One queue, the same service times: their p99s are close, whatever their own rates.
    assert fraud["predicted_p99_ms"] == pytest.approx(ranker["predicted_p99_ms"], rel=0.2)


def test_without_service_times_every_model_keeps_its_row(tmp_path: Path) -> None:
    models = _plan(tmp_path, None)
    golden = json.loads((DATA / "expected" / "plan.json").read_text())["models"]
    for m in golden:
        assert models[m["name"]]["prediction_source"] == "profile row"
        assert models[m["name"]]["predicted_p99_ms"] == m["predicted_p99_ms"]


@pytest.mark.parametrize("rho", [0.01, 0.3, 0.8, 0.95, 0.999])
def test_rho_is_rounded_up_by_at_most_two_percent_of_its_headroom(rho: float) -> None:
    rounded = _rounded_rho(rho)
    assert rho <= rounded < 1
    assert (1 - rounded) >= (1 - rho) * 0.98 - 1e-12


@pytest.mark.parametrize(
    ("cpu_limit", "node_cores", "slots"), [(None, 8, 8), (0.5, 8, 2), (1.0, 8, 2), (3.2, 8, 4)]
)
def test_slots_are_the_servers(cpu_limit: float | None, node_cores: float, slots: int) -> None:
    assert slots_of(cpu_limit, node_cores) == slots


def _demand(busy_source: str, cpu_limit: float | None) -> Demand:
    point = ProfilePoint("sequential", 1, 1, 10.0, 1.0, 2.0, 0.0, True, 1.0, cpu_limit, None,
                         None, None)  # fmt: skip
    return Demand("m", 1, 1.0, 10.0, 100.0, "weights", 0.1, busy_source, 2, 1, 2.0, 1.0,
                  cpu_limit, point)  # fmt: skip


@pytest.mark.parametrize(
    ("busy_source", "cpu_limit", "calls"),
    [("gpu utilisation", 1.0, 2), ("gpu utilisation", None, 8), ("throughput", 1.0, 1),
     ("throughput", 2.5, 2), ("throughput", None, 8)],
)  # fmt: skip
def test_a_cpu_profiles_calls_at_once_are_its_cores_not_its_slots(
    busy_source: str, cpu_limit: float | None, calls: int
) -> None:
    # On a CPU the slots' calls share a thread pool sized to the limit's cores: one core runs
    # one call at a time (a parallel row of 4 users takes 4x a call's time alone).
    assert calls_at_once(_demand(busy_source, cpu_limit), 8) == calls

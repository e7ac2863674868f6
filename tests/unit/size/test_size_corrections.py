"""``size --fleet --corrections``: a verify run's measured over predicted figures correct the next
plan's predictions, and a model the correction puts over its objective is re-planned.

The plans are tests/data/plan's fleet (profile rows: tiny's sequential p99 4 ms alone, 6 ms
beside one other process, 12 ms beside three), so every corrected figure is known exactly.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sharedserve.documents import parse
from sharedserve.errors import ConfigError
from sharedserve.size.demand import Demand
from sharedserve.size.fleet import PagingSettings
from sharedserve.size.grouping import group, pageable
from sharedserve.size.plan import Plan
from sharedserve.size.predict import Correction, LatencyForecaster, meet_objective
from sharedserve.size.predict.corrections import VerifyFile, correction_factors, read_verify
from sharedserve.size.run import plan_fleet
from sharedserve.size.verify import compare
from tests.support.sizing import GPU, RESERVE, TARGET, model, timed

DATA = Path(__file__).resolve().parents[2] / "data" / "plan"
GOLDEN = json.loads((DATA / "expected" / "plan.json").read_text())


def _verify(*lines: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"spec": "plan/gpu-002.yaml", "models": list(lines), **top}


def _line(name: str, predicted: float, measured: float, **more: Any) -> dict[str, Any]:
    return {"model": name, "predicted_p99_ms": predicted, "measured_p99_ms": measured, **more}


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


def _plan(tmp_path: Path, *verify: dict[str, Any]) -> Plan:
    files = [_write(tmp_path / f"verify-{i}.json", v) for i, v in enumerate(verify)]
    return plan_fleet(DATA / "fleet.yaml", tmp_path / "out", files)


# -- the factors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "p99", "p50", "source"),
    [
        # Measured over predicted: predicted 10, measured 12, a factor of 1.2.
        ([_verify(_line("a", 10, 12))], 1.2, None, "v0"),
        ([_verify(_line("a", 10, 12, predicted_p50_ms=4, measured_p50_ms=5))], 1.2, 1.25, "v0"),
        # Optimistic or pessimistic alike: measured below the prediction lowers it.
        ([_verify(_line("a", 10, 5))], 0.5, None, "v0"),
        # Repeats: their mean stands for the run, not the line's own figures.
        ([_verify(_line("a", 10, 99, runs=[{"measured_p99_ms": 11}, {"measured_p99_ms": 13}]))],
         1.2, None, "v0"),
        # A plan already corrected (x1.5): its prediction 15 was 10 uncorrected; measured 18
        # is 1.8 times that, not 1.2.
        ([_verify(_line("a", 15, 18, correction={"p99_factor": 1.5, "p50_factor": None}))],
         1.8, None, "v0"),
        # Verified on two GPUs: the larger factor, from the file that gave it.
        ([_verify(_line("a", 10, 12)), _verify(_line("a", 10, 15))], 1.5, None, "v1"),
        ([_verify(_line("a", 10, 15, predicted_p50_ms=4, measured_p50_ms=4)),
          _verify(_line("a", 10, 12, predicted_p50_ms=4, measured_p50_ms=6))],
         1.5, 1.5, "v0 (p99), v1 (p50)"),
    ],
)  # fmt: skip
def test_a_factor_is_measured_over_predicted(
    files: list[dict[str, Any]], p99: float, p50: float | None, source: str
) -> None:
    read = [(f"v{i}", parse(VerifyFile, f, where=f"v{i}")) for i, f in enumerate(files)]
    found, warnings = correction_factors(read, ["a"])
    assert found == {"a": Correction(p99, p50, source)}
    assert warnings == []


def test_a_model_not_in_the_fleet_warns_and_a_line_without_figures_is_skipped() -> None:
    lines = [_line("a", 10, 12), _line("ghost", 10, 12), _line("b", 10, None)]
    found, warnings = correction_factors([("v.json", parse(VerifyFile, _verify(*lines),
                                                           where="v"))], ["a", "b"])  # fmt: skip
    assert set(found) == {"a"}
    assert warnings == [
        "verify file v.json: ghost is not in the fleet: not corrected",
        "verify file v.json: b without both a predicted and a measured p99: not corrected",
    ]


@pytest.mark.parametrize("trustworthy", [True, None])
def test_a_trusted_run_or_one_that_does_not_say_is_read(
    tmp_path: Path, trustworthy: bool | None
) -> None:
    top = {} if trustworthy is None else {"trustworthy": trustworthy}
    data = _verify(_line("a", 10, 12), **top, held=True, conditions={"stable": True})
    assert read_verify(_write(tmp_path / "verify.json", data)).models[0].model == "a"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_verify(_line("a", 10, 12), trustworthy=False),
         "verify.json: trustworthy is false: the verify run's load generator was late or its "
         "figures unstable"),
        ({"models": [{"predicted_p99_ms": 10}]}, "verify.json: models[0]: model is required"),
        (_verify(_line("a", 10, "slow")), "verify.json: models[0]: measured_p99_ms:"),
        ({"held": True}, "verify.json: models must be a list of lines, one a model (required)"),
    ],
    ids=["untrustworthy", "no-model", "not-a-number", "not-a-verify-file"],
)  # fmt: skip
def test_a_verify_file_not_to_correct_by_is_refused_naming_the_file_and_key(
    tmp_path: Path, data: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        read_verify(_write(tmp_path / "verify.json", data))
    assert message in refused.value.message


# -- the corrected plan ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicted", "measured", "factor"),
    [(10.0, 12.0, 1.2), (10.0, 5.0, 0.5), (6.0, 30.0, 5.0)],
)
def test_the_corrected_figures_move_by_exactly_the_measured_error(
    tmp_path: Path, predicted: float, measured: float, factor: float
) -> None:
    line = _line("tiny", predicted, measured, predicted_p50_ms=10.0, measured_p50_ms=11.0)
    plan = _plan(tmp_path, _verify(line))
    before = {m["name"]: m for m in GOLDEN["models"]}
    models = {m.name: m for m in plan.models}
    tiny = models["tiny"]
    # tiny's objective (50 ms) holds at every factor here: nothing re-planned, only the figures.
    assert (tiny.replicas, tiny.gpus, tiny.serving) == (3, before["tiny"]["gpus"], "dedicated")
    assert tiny.predicted_p99_ms == pytest.approx(before["tiny"]["predicted_p99_ms"] * factor)
    p50 = min(before["tiny"]["predicted_p50_ms"] * 1.1, tiny.predicted_p99_ms)
    assert tiny.predicted_p50_ms == pytest.approx(p50)
    assert tiny.correction is not None
    assert (tiny.correction.p99_factor, tiny.correction.p50_factor) == (factor, 1.1)
    assert tiny.correction.predicted_p99_ms_before == before["tiny"]["predicted_p99_ms"]
    assert tiny.correction.source == str(tmp_path / "verify-0.json")
    assert tiny.prediction_source == "profile row, corrected by size --verify"
    assert f"corrected for: p99 x{factor:g}, p50 x1.1" in tiny.prediction_error
    # Every replica's figure on its GPU too, and no other model's.
    golden_gpus = {g["index"]: g["replicas"] for g in GOLDEN["gpus"]}
    for g in plan.gpus:
        for r, old in zip(g.replicas, golden_gpus[g.index], strict=True):
            scale = factor if r.model == "tiny" else 1.0
            assert r.predicted_p99_ms == pytest.approx(old["predicted_p99_ms"] * scale)
    for name in ("ranker", "fraud", "vision"):
        assert models[name].correction is None
        assert models[name].predicted_p99_ms == before[name]["predicted_p99_ms"]
    markdown = (tmp_path / "out" / "plan.md").read_text()
    assert "## Corrections" in markdown
    row = next(x for x in markdown.splitlines() if x.startswith("| tiny | 1.1 |"))
    assert f"| {factor:g} | {tmp_path / 'verify-0.json'} | 6 / 6 -> " in row
    assert f" / {tiny.predicted_p99_ms:g} | - |" in row


def test_an_unknown_model_is_a_warning_in_the_plan(tmp_path: Path) -> None:
    plan = _plan(tmp_path, _verify(_line("ghost", 10, 12)))
    assert f"verify file {tmp_path / 'verify-0.json'}: ghost is not in the fleet" in " ".join(
        plan.warnings
    )
    assert all(m.correction is None for m in plan.models)
    assert "## Corrections" not in (tmp_path / "out" / "plan.md").read_text()


@pytest.mark.parametrize(
    ("measured", "serving", "densest", "p99", "warned"),
    [
        # x1.5: 6 ms beside one other process is 9, within ranker's 10 ms: it stays shared.
        (15.0, "shared", 4, 9.0, False),
        # x2: 12 ms in its server, over 10. Alone, beside one other process, still 12; alone on
        # its GPU (4 ms, x2 = 8) within: it leaves the server, at most 1 process a GPU.
        (20.0, "dedicated", 1, 8.0, False),
        # x3: even alone on a GPU 12 ms. Nothing meets it: left as it was, and the plan says so.
        (30.0, "shared", 4, 18.0, True),
    ],
)
def test_a_correction_over_a_shared_models_objective_re_plans_it(
    tmp_path: Path, measured: float, serving: str, densest: int, p99: float, warned: bool
) -> None:
    plan = _plan(tmp_path, _verify(_line("ranker", 10.0, measured)))
    ranker = next(m for m in plan.models if m.name == "ranker")
    assert (ranker.serving, ranker.max_density) == (serving, densest)
    assert ranker.predicted_p99_ms == pytest.approx(p99)
    assert ranker.correction is not None
    over = [w for w in plan.warnings if "as corrected by size --verify" in w]
    assert bool(over) == warned
    if warned:
        assert "ranker; no re-plan met it" in over[0]
    if serving == "dedicated":
        assert ranker.correction.replanned == (
            "out of shared server shared-0, into replicas of its own; at most 1 process a GPU "
            "holding it, not 4"
        )
        assert ranker.serving_reason.startswith("dedicated: re-planned out of shared server")
        assert all(len(g.replicas) == 1 for g in plan.gpus if "ranker" in g.held())
    else:
        assert ranker.correction.replanned == ""
    assert ranker.predicted_p99_ms <= ranker.slo_p99_ms or warned


def test_a_verify_of_a_corrected_plan_composes_with_its_correction(tmp_path: Path) -> None:
    # Round one: tiny x1.2. Round two verifies that plan and measures exactly what it predicted:
    # the factor stays 1.2 (measured over the uncorrected prediction), not 1.0.
    plan = _plan(tmp_path, _verify(_line("tiny", 10, 12)))
    tiny = next(m for m in plan.models if m.name == "tiny")
    measured = {"replicas": 3, "qps": 1500.0, "p50_ms": tiny.predicted_p50_ms,
                "p99_ms": tiny.predicted_p99_ms, "slo_p99_ms": 50.0, "slo_met": True,
                "errors": 0, "dropped": 0}  # fmt: skip
    lines = compare(plan, {"rows": [{"models": {"tiny": measured}}]}, {"tiny": 1500.0})
    assert lines[0]["correction"]["p99_factor"] == 1.2
    again, _ = correction_factors([("v2", parse(VerifyFile, {"models": lines}, where="v2"))],
                                  ["tiny"])  # fmt: skip
    assert again["tiny"].p99_factor == pytest.approx(1.2, abs=1e-3)


# -- the pieces --------------------------------------------------------------------------------


def test_a_shared_servers_check_sees_the_corrected_p99() -> None:
    # tests/unit/size/test_size_grouping_p99.py's mix at 500 ms objectives: the small models wait
    # for a 100 ms call now and then (p99 near 100 ms) and all three share. small-a measured x6
    # its prediction would wait ~600 ms beside large: it may not join; alone it is ~20 ms.
    large = timed("large", 100, 1.5, 5, 1000)
    smalls = [timed("small-a", 3, 20, 100, 500), timed("small-b", 3, 10, 100, 500)]
    served = {}
    for corrections in ({}, {"small-a": Correction(6.0, None, "v")}):
        predict = LatencyForecaster(node_cores=8, corrections=corrections)
        grouping = group([large, *smalls], gpu_memory_mib=GPU, reserve_mib=RESERVE,
                         target=TARGET, p99_of=predict.server_p99)  # fmt: skip
        served[bool(corrections)] = {n: s.server for n, s in grouping.serving.items()}
    assert served[False] == {"large": "shared-0", "small-a": "shared-0", "small-b": "shared-0"}
    assert served[True] == {"large": "shared-0", "small-a": None, "small-b": "shared-0"}


@pytest.mark.parametrize(("factor", "paged"), [(1.0, True), (2.0, True), (2.5, False)])
def test_the_room_for_a_page_in_is_judged_over_the_corrected_p99(
    factor: float, paged: bool
) -> None:
    # p99 10 ms, a 50 ms page-in, a 70 ms objective: room for it up to a p99 of 20 ms.
    d = replace(model("m", 0.05), predicted_p99_ms=10.0, slo_p99_ms=70.0)
    assert pageable(d, PagingSettings(page_in_ms=50), factor) is paged


def _p99_at(d: Demand, densest: int) -> float:
    """A made-up model: 2 ms a process on its GPU, plus 1 ms a request per second it carries."""
    return 2.0 * densest + d.rate_per_replica


@pytest.mark.parametrize(
    ("slo", "replicas", "densest"),
    [
        (20, 2, 4),  # 8 + 10 = 18 as it is
        (15, 3, 4),  # 8 + 20/3: one more replica; fewer neighbours would take more GPUs' worth
        (9, 4, 2),  # 4 + 20/4: 4 replicas 2 a GPU (2 GPUs' worth) beats 3 alone (3), 7 of 3
        (2, None, None),  # alone, at no rate, still 2 ms: nothing meets it
    ],
)
def test_meet_objective_takes_the_fewest_gpus_worth_that_meets_it(
    slo: float, replicas: int | None, densest: int | None
) -> None:
    d = replace(model("m", 0.1, replicas=2, densest=4), slo_p99_ms=slo)
    d = replace(d, rate_per_replica=10.0, busy_share=0.2)  # 20 QPS at its peak
    found = meet_objective(d, _p99_at)
    if replicas is None:
        assert found is None
        return
    assert found is not None
    assert (found.replicas, found.max_density) == (replicas, densest)
    assert found.rate_per_replica * found.replicas == pytest.approx(20.0)
    assert found.busy_share == pytest.approx(0.2 * found.rate_per_replica / 10.0)
    assert _p99_at(found, found.max_density) <= slo

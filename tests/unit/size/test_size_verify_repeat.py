"""``size --verify --repeat N``: how far runs on the same servers move from the first, whether
that repeats within its targets, and when a measurement is not one to judge the plan by, because
a single run could not say whether its error against the plan was the plan's or the host's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sharedserve.config import BenchSettings
from sharedserve.errors import ConfigError
from sharedserve.size.plan import read_plan
from sharedserve.size.verify import (
    LATE_LIMIT,
    REPEAT_TARGETS,
    advice,
    compare,
    conditions,
    repeat_spread,
    spread,
)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([10.0], None),  # one run: nothing to compare
        ([], None),
        ([10.0, 10.0], 0.0),
        ([10.0, 11.0], 0.1),
        ([10.0, 9.0], 0.1),  # a drop counts as much as a rise
        ([10.0, 10.5, 8.0, 11.0], 0.2),  # the largest move, from the first run
        ([4.0, 5.0, 6.0], 0.5),  # from the first, not from the previous run
        ([3.0, 3.1], 0.033),  # rounded to 0.1%
        ([10.0, None], None),  # a run with no figure (no success): unknown
        ([None, 10.0], None),
        ([0.0, 1.0], None),  # no share of nothing
    ],
)
def test_spread_is_the_largest_move_from_the_first_run(
    values: list[float | None], expected: float | None
) -> None:
    assert spread(values) == expected


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([{"spread_p50": None, "spread_p99": None}], {"p50": None, "p99": None}),
        (
            [{"spread_p50": 0.02, "spread_p99": 0.3}, {"spread_p50": 0.04, "spread_p99": 0.1}],
            {"p50": 0.04, "p99": 0.3},
        ),
        (
            [{"spread_p50": None, "spread_p99": 0.05}, {"spread_p50": 0.01, "spread_p99": None}],
            {"p50": 0.01, "p99": 0.05},
        ),
    ],
)
def test_the_repeat_spread_is_the_worst_model(
    lines: list[dict[str, Any]], expected: dict[str, float | None]
) -> None:
    assert repeat_spread(lines) == expected


ROW = {"stable": True, "late_share": 0.0, "loadgen_cpu_util": 0.1, "unreliable": False}


@pytest.mark.parametrize(
    ("rows", "stable", "late", "limited"),
    [
        ([ROW], True, 0.0, False),
        ([ROW, {**ROW, "stable": False}], False, 0.0, False),
        ([ROW, {**ROW, "stable": None}], None, 0.0, False),
        ([{**ROW, "late_share": 0.02}, {**ROW, "late_share": 0.07}], True, 0.07, False),
        ([{**ROW, "late_share": None}, ROW], True, 0.0, False),
        ([ROW, {**ROW, "unreliable": True, "loadgen_cpu_util": 0.97}], True, 0.0, True),
        # A row bench calls unreliable for its lateness alone: late, not CPU-bound.
        ([{**ROW, "unreliable": True, "late_share": 0.07}], True, 0.07, False),
    ],
)
def test_the_conditions_of_several_runs_are_their_worst(
    rows: list[dict[str, Any]], stable: bool | None, late: float, limited: bool
) -> None:
    c = conditions(rows, 0.1, 0.5, 4, 30.0)
    assert (c["stable"], c["late_share"], c["loadgen_limited"]) == (stable, late, limited)


def _line(model: str, p99: float, spread_p50: float | None, spread_p99: float | None) -> Any:
    return {"model": model, "planned_qps": 10.0, "measured_qps": 10.0, "qps_error": 0.0,
            "p50_error": 0.0, "p99_error": p99, "slo_met": True, "errors": 0, "dropped": 0,
            "spread_p50": spread_p50, "spread_p99": spread_p99}  # fmt: skip


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"late_share": LATE_LIMIT + 0.01}, "the load generator sent 6.0% of a run's requests"),
        ({"stable": False}, "unstable"),
        ({"unreliable": True, "loadgen_cpu_util": 0.99}, "CPU-bound"),
    ],
)
def test_a_measurement_not_to_trust_gets_no_verdict_on_the_targets(
    row: dict[str, Any], reason: str
) -> None:
    lines = [_line("a", p99=-0.6, spread_p50=None, spread_p99=None)]
    said = advice(lines, conditions([ROW, {**ROW, **row}], 0.1, 0.5, 4, 30.0))
    assert said["trustworthy"] is False
    assert said["within_targets"] is None and lines[0]["within_targets"] is None
    assert said["verdict"].startswith("not trustworthy: ") and reason in said["verdict"]


def test_late_up_to_the_limit_is_still_trustworthy() -> None:
    lines = [_line("a", p99=0.1, spread_p50=None, spread_p99=None)]
    said = advice(lines, conditions([{**ROW, "late_share": LATE_LIMIT}], 0.1, 0.5, 4, 30.0))
    assert said["trustworthy"] is True and said["within_targets"] is True
    assert said["verdict"].startswith("within targets")


@pytest.mark.parametrize(
    ("p50", "p99", "repeats"),
    [
        (None, None, None),  # one run: not judged
        (REPEAT_TARGETS["p50"], REPEAT_TARGETS["p99"], True),  # at the limits: repeats
        (0.06, 0.02, False),
        (0.01, 0.12, False),
    ],
)
def test_whether_the_measurement_repeats(
    p50: float | None, p99: float | None, repeats: bool | None
) -> None:
    lines = [_line("a", p99=0.0, spread_p50=p50, spread_p99=p99)]
    said = advice(lines, conditions([ROW], 0.1, 0.5, 4, 30.0))
    assert said["repeats"] is repeats
    assert said["repeat_spread"] == {"p50": p50, "p99": p99}
    flagged = [f for f in said["flags"] if f.startswith("DOES NOT REPEAT")]
    assert bool(flagged) == (repeats is False)
    # Runs that disagree are flagged, a re-run advised, but the measurement is not disqualified.
    assert said["trustworthy"] is True
    if repeats is False:
        assert "re-run on a quiet host" in said["next_steps"][0]


def test_a_miss_on_a_trustworthy_run_is_named_in_the_verdict() -> None:
    lines = [_line("a", p99=-0.4, spread_p50=0.0, spread_p99=0.0), _line("b", 0.0, 0.0, 0.0)]
    said = advice(lines, conditions([ROW, ROW], 0.1, 0.5, 4, 30.0))
    assert said["within_targets"] is False
    assert [ln["within_targets"] for ln in lines] == [False, True]
    assert said["verdict"] == "NOT within targets: a p99 -40% (optimistic)"


# The committed plan's: its tiny is predicted a p99 of 6 ms.
PLAN = read_plan(Path(__file__).resolve().parents[2] / "data" / "plan" / "expected" / "plan.json")


def _row(qps: float, p50: float, p99: float) -> dict[str, Any]:
    return {"models": {"tiny": {"replicas": 1, "qps": qps, "p50_ms": p50, "p99_ms": p99,
                                "slo_p99_ms": 50.0, "slo_met": True, "errors": 0,
                                "dropped": 0}}}  # fmt: skip


def test_compare_keeps_the_first_runs_figures_and_lists_every_run() -> None:
    report = {"rows": [_row(20.0, 4.0, 4.8), _row(19.0, 4.4, 6.0), _row(21.0, 3.8, 5.28)]}
    (line,) = compare(PLAN, report, {"tiny": 20.0})
    # The fields other code reads: the first run's, and its errors.
    first = (line["measured_qps"], line["measured_p50_ms"], line["measured_p99_ms"])
    assert first == (20.0, 4.0, 4.8)
    assert (line["p50_error"], line["p99_error"]) == (0.5, 0.25)
    assert line["runs"] == [
        {"measured_qps": 20.0, "measured_p50_ms": 4.0, "measured_p99_ms": 4.8},
        {"measured_qps": 19.0, "measured_p50_ms": 4.4, "measured_p99_ms": 6.0},
        {"measured_qps": 21.0, "measured_p50_ms": 3.8, "measured_p99_ms": 5.28},
    ]
    assert (line["spread_p50"], line["spread_p99"]) == (0.1, 0.25)


def test_compare_of_one_run_has_one_run_and_no_spread() -> None:
    (line,) = compare(PLAN, {"rows": [_row(20.0, 4.0, 4.8)]}, {"tiny": 20.0})
    assert len(line["runs"]) == 1 and line["spread_p50"] is None and line["spread_p99"] is None


@pytest.mark.parametrize("repeat", [0, -1])
def test_a_repeat_below_one_is_refused_naming_the_flag(repeat: int, tmp_path: Path) -> None:
    settings = BenchSettings(out_dir=tmp_path, targets_file=tmp_path / "t.json", repeat=repeat)
    with pytest.raises(ConfigError, match="--repeat"):
        settings.validate()

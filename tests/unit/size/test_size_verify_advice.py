"""What ``size --verify`` says about its own measurement and what to do next, because without it
a run printed ``-97% ... NO`` with no word on the sign, that the run was unstable (only
report.json said so), or that the host was busy."""

from __future__ import annotations

from typing import Any

import pytest

from sharedserve.size.verify import advice, conditions


def _line(model: str, *, qps: float = 0.0, p50: float = 0.0, p99: float = 0.0) -> dict[str, Any]:
    return {"model": model, "planned_qps": 10.0, "measured_qps": 10.0, "qps_error": qps,
            "p50_error": p50, "p99_error": p99, "slo_met": True, "errors": 0,
            "dropped": 0}  # fmt: skip


def _clean(**row: Any) -> dict[str, Any]:
    base = {"stable": True, "late_share": 0.0, "loadgen_cpu_util": 0.1, "unreliable": False}
    return conditions([{**base, **row}], 0.1, 1.5, 2, 60.0)


def test_a_clean_run_within_targets_says_so_and_explains_the_sign() -> None:
    said = advice([_line("a", qps=0.01, p50=-0.1, p99=0.2)], _clean())
    assert said["within_targets"] and not said["flags"]
    assert "negative means the plan was optimistic" in said["meaning"]
    assert said["next_steps"] == ["none: every figure is within its target and the run was clean"]


@pytest.mark.parametrize(
    ("row", "before", "after", "flag"),
    [
        ({"stable": False}, 0.1, 1.0, "UNSTABLE"),
        ({"late_share": 0.08}, 0.1, 1.0, "LOAD GENERATOR LATE: 8.0%"),
        ({"unreliable": True, "loadgen_cpu_util": 0.95}, 0.1, 1.0, "CPU-BOUND"),
        ({}, 1.9, 1.0, "BUSY HOST: load average 1.9 on 2 cores before"),
        ({}, 0.1, 3.5, "CONTENDED HOST: load average 3.5 on 2 cores after"),
    ],
)
def test_a_measurement_not_to_trust_is_flagged_and_a_rerun_advised(
    row: dict[str, Any], before: float, after: float, flag: str
) -> None:
    base = {"stable": True, "late_share": 0.0, "loadgen_cpu_util": 0.1, "unreliable": False}
    measured = conditions([{**base, **row}], before, after, 2, 60.0)
    said = advice([_line("a", p99=-0.6)], measured)
    assert any(flag in f for f in said["flags"]), said["flags"]
    assert "re-run on a quiet host" in said["next_steps"][0]
    assert "--duration (say 120 s)" in said["next_steps"][0]
    # A flagged run's errors are not read as the plan's: no re-profiling advised on them.
    assert not any("re-profile" in s for s in said["next_steps"])


def test_misses_on_a_clean_run_say_which_side_and_what_to_do() -> None:
    lines = [_line("fast", p99=-0.4), _line("slow", p50=0.3)]
    lines[0]["slo_met"] = False
    said = advice(lines, _clean())
    assert not said["within_targets"]
    assert [ln["within_targets"] for ln in lines] == [False, False]
    steps = " | ".join(said["next_steps"])
    assert "fast missed its objective: raise its replicas" in steps
    assert "optimistic for fast" in steps and "re-profile" in steps
    assert "pessimistic for slow" in steps

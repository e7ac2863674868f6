"""How long a sweep will take: the estimate said before it starts, and the time left."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from sharedserve.bench.progress import (
    STARTUP_ALLOWANCE_S,
    TARGETS_ALLOWANCE_S,
    estimate,
    span,
    step_progress,
)
from sharedserve.config import BenchSettings


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.4, "0 s"), (45, "45 s"), (60, "1 min"), (200, "3 min 20 s"), (3900, "1 h 5 min")],
)
def test_span_reads_as_people_say_it(seconds: float, text: str) -> None:
    assert span(seconds) == text


def test_the_estimate_is_the_settings_arithmetic_with_a_stated_allowance() -> None:
    # profile's default: 1,2,4,8 densities, 5 s warm-up, 20 s measured, two patterns.
    settings = BenchSettings(out_dir=Path("out"), scales=(1, 2, 4, 8), duration_s=20)
    plan = estimate(settings, sweeps=2)
    assert plan.steps == 8
    assert plan.total_s == 8 * (5 + 20 + STARTUP_ALLOWANCE_S)
    # Windows that never agree measure on to --max-duration (3 x --duration by default).
    assert plan.longest_s == 8 * (5 + 60 + STARTUP_ALLOWANCE_S)
    line = plan.describe("2 sweeps of 4 densities")
    assert line == (
        f"estimate: about {span(plan.total_s)} for 2 sweeps of 4 densities (each 5 s warm-up + "
        f"20 s measured + ~{STARTUP_ALLOWANCE_S:g} s to start and stop); up to "
        f"{span(plan.longest_s)} if every step's windows take until --max-duration (60 s) to agree"
    )
    assert plan.left_s(0) == plan.total_s
    assert plan.left_s(3, into_step_s=5) == plan.total_s - 3 * plan.step_s - 5
    assert plan.left_s(3, into_step_s=1e6) == 4 * plan.step_s  # an overrun step: the rest
    assert plan.left_s(8) == 0


def test_running_endpoints_are_one_step_and_start_no_replica() -> None:
    settings = BenchSettings(
        out_dir=Path("out"), targets_file=Path("t.json"), duration_s=10, stability_windows=1
    )
    plan = estimate(settings)
    assert (plan.steps, plan.allowance_s) == (1, TARGETS_ALLOWANCE_S)
    assert "up to" not in plan.describe("x")  # one window: nothing measures on


def test_not_a_terminal_gets_a_line_per_step_with_the_time_left() -> None:
    plan = estimate(BenchSettings(out_dir=Path("out"), scales=(1, 2), duration_s=20), sweeps=2)
    out = io.StringIO()
    console = Console(file=out, width=40)
    with step_progress(console, plan, done=2) as steps:  # the second sweep of two
        steps.start("parallel density 1")
        steps.finish("parallel density 1: 10.0 qps, p99 5 ms")
        steps.start("parallel density 2")
    left = span(2 * plan.step_s)
    # Whole lines, never wrapped at the console's width: a log is searched line by line.
    assert out.getvalue().splitlines() == [
        f"parallel density 1 (step 3 of 4): about {left} left",
        "parallel density 1: 10.0 qps, p99 5 ms",
        f"parallel density 2 (step 4 of 4): about {span(plan.step_s)} left",
    ]

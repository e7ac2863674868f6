"""How long a sweep will take: the estimate said before it starts, and the time left.

Arithmetic on settings, never a clock: the time left's pace is given a fake one.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from sharedserve.bench.estimate import (
    REPLICA_MAX_S,
    REPLICA_S,
    STEP_MAX_S,
    STEP_S,
    estimate,
    span,
)
from sharedserve.bench.progress import StepProgress, step_progress
from sharedserve.config import BenchSettings, PackEntry, PackSettings


def _pack(*replicas: int, cpu_limit: float | None = 1.0) -> PackSettings:
    return PackSettings(
        entries=tuple(
            PackEntry(model_dir=Path(f"m{i}"), replicas=n, cpu_limit_cores=cpu_limit)
            for i, n in enumerate(replicas)
        )
    )


# The README's mix (examples/mix.yaml: 4 + 2 + 1 replicas, a core each) at scales 1, 2 and 4, on
# a 2-core machine, where bench gives the servers one CPU and the load generator the other.
MIX = _pack(4, 2, 1)


def _mix(**flags: object) -> BenchSettings:
    settings = {"scales": (1, 2, 4), "pack": MIX, "server_cpus": (0,)} | flags
    return BenchSettings(out_dir=Path("out"), **settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.4, "0 s"), (45, "45 s"), (60, "1 min"), (200, "3 min 20 s"), (3900, "1 h 5 min")],
)
def test_span_reads_as_people_say_it(seconds: float, text: str) -> None:
    assert span(seconds) == text


def test_each_step_starts_and_stops_its_replicas_one_cpu_at_a_time() -> None:
    plan = estimate(_mix(duration_s=30))
    assert plan.replicas == (7, 14, 28)
    # 49 replica starts in a row on the one server CPU, beside each step's measurement.
    assert plan.total_s == pytest.approx(3 * (5 + 30 + STEP_S) + 49 * REPLICA_S)
    # The bound: windows measuring on to --max-duration (3 x --duration), slow starts.
    assert plan.longest_s == pytest.approx(3 * (5 + 90 + STEP_MAX_S) + 49 * REPLICA_MAX_S)
    assert plan.describe("3 scales") == (
        f"estimate: about {span(plan.total_s)} for 3 scales (each 5 s warm-up + 30 s measured "
        f"+ ~{STEP_S:g} s for the load generator and the report; ~{REPLICA_S:g} s to start and "
        f"stop each replica, 49 in all on 1 CPU); up to {span(plan.longest_s)} if replicas "
        "start slowly or every step's windows take until --max-duration (90 s) to agree"
    )


def test_the_upper_bound_holds_on_the_runs_it_was_measured_against() -> None:
    # The README's mix command (--duration 30) took 5 min 51 s on a quiet 2-core machine, when
    # the estimate was "about 2 min 15 s, up to 5 min 15 s"; with 3 s measured a step (--warmup 1
    # --duration 2 --stability-windows 1) it took 5 min 15 s on one shared with other work.
    assert estimate(_mix(duration_s=30)).longest_s > 5 * 60 + 51
    quick = estimate(_mix(warmup_s=1, duration_s=2, stability_windows=1))
    assert quick.longest_s > 5 * 60 + 15
    # And what is expected of it is start-up, mostly: near what it took.
    assert 4 * 60 < quick.total_s < 5 * 60 + 15


@pytest.mark.parametrize(
    ("flags", "starts"),
    [
        ({"server_cpus": (0,)}, 7 + 14 + 28),  # one CPU: every start in a row
        ({"server_cpus": tuple(range(7))}, 1 + 2 + 4),  # seven: a step's seven at a time
        ({"server_cpus": tuple(range(64))}, 3),  # more CPUs than replicas: one start a step
        # Half a core each: 7 replicas use 3.5 of 4 CPUs, 14 and 28 all 4.
        ({"pack": _pack(4, 2, 1, cpu_limit=0.5), "server_cpus": (0, 1, 2, 3)}, 2 + 3.5 + 7),
        ({"pack": _pack(1, cpu_limit=0.25), "server_cpus": (0, 1)}, 3 * 4),  # a quarter core
        ({"pack": _pack(1, cpu_limit=None), "server_cpus": (0, 1)}, 1 + 1 + 2),
    ],
)
def test_starts_grow_with_replicas_and_shrink_with_the_cpus_they_may_use(
    flags: dict[str, object], starts: float
) -> None:
    # A start is mostly one thread: a replica uses a CPU at most, its quota's share under one.
    plan = estimate(_mix(**flags))
    assert sum(plan.starts_in_a_row(i) for i in range(plan.steps)) == pytest.approx(starts)


def test_sweeps_repeats_and_extra_steps_each_count() -> None:
    # profile: two sweeps of densities 1, 2, 4, 8, then an open-loop row of one replica and a
    # row beside a neighbour (two processes).
    settings = BenchSettings(
        out_dir=Path("out"), scales=(1, 2, 4, 8), pack=_pack(1), duration_s=20, server_cpus=(0,)
    )
    plan = estimate(settings, sweeps=2, then=(1, 2))
    assert plan.replicas == (1, 2, 4, 8, 1, 2, 4, 8, 1, 2)
    assert plan.total_s == pytest.approx(10 * (5 + 20 + STEP_S) + 33 * REPLICA_S)
    # size --verify --repeat: each measurement has its warm-up; the servers start once.
    twice = estimate(_mix(duration_s=30, repeat=2))
    assert twice.total_s == pytest.approx(3 * (2 * (5 + 30) + STEP_S) + 49 * REPLICA_S)
    assert "each 2 x (5 s warm-up + 30 s measured)" in twice.describe("3 scales")


def test_running_endpoints_are_one_step_and_start_no_replica() -> None:
    settings = BenchSettings(
        out_dir=Path("out"), targets_file=Path("t.json"), duration_s=10, stability_windows=1
    )
    plan = estimate(settings)
    assert plan.replicas == (0,)
    assert (plan.total_s, plan.longest_s) == (5 + 10 + STEP_S, 5 + 10 + STEP_MAX_S)
    assert plan.describe("the running endpoints") == (
        f"estimate: about {span(plan.total_s)} for the running endpoints (5 s warm-up + 10 s "
        f"measured + ~{STEP_S:g} s for the load generator and the report); up to "
        f"{span(plan.longest_s)} if the load generator starts slowly"
    )


def test_the_time_left_counts_down_the_steps() -> None:
    plan = estimate(_mix(duration_s=30))
    assert plan.left_s(0) == plan.total_s
    assert plan.left_s(1, into_step_s=5) == pytest.approx(plan.step_s(1) - 5 + plan.step_s(2))
    assert plan.left_s(1, into_step_s=1e6) == plan.step_s(2)  # an overrun step: the rest
    assert plan.left_s(3) == 0
    # Steps that took twice their estimate: the rest is expected to, too.
    paced = plan.paced(0, 1, 2 * plan.step_s(0))
    assert paced.left_s(1) == pytest.approx(2 * plan.left_s(1))
    assert plan.paced(0, 0, 10) == plan  # nothing has run: nothing to go by


def test_not_a_terminal_gets_a_line_per_step_with_the_time_left() -> None:
    plan = estimate(
        BenchSettings(
            out_dir=Path("out"), scales=(1, 2), pack=_pack(1), duration_s=20, server_cpus=(0,)
        ),
        sweeps=2,
    )
    out = io.StringIO()
    console = Console(file=out, width=40)
    with step_progress(console, plan, done=2) as steps:  # the second sweep of two
        steps.start("parallel density 1")
        steps.finish("parallel density 1: 10.0 qps, p99 5 ms")
    # Whole lines, never wrapped at the console's width: a log is searched line by line.
    assert out.getvalue().splitlines() == [
        f"parallel density 1 (step 3 of 4): about {span(plan.left_s(2))} left",
        "parallel density 1: 10.0 qps, p99 5 ms",
    ]


def test_the_time_left_is_paced_by_the_steps_done() -> None:
    plan = estimate(_mix(duration_s=30))
    now = [100.0]
    out = io.StringIO()
    steps = StepProgress(Console(file=out, width=40), plan, None, 0, clock=lambda: now[0])
    steps.start("scale 1 (7 replicas)")
    steps.finish("scale 1 (7 replicas): 20.0 qps, p99 5 ms")
    now[0] += 3 * plan.step_s(0)  # the first step took three times its estimate
    steps.start("scale 2 (14 replicas)")
    lines = out.getvalue().splitlines()
    assert lines[0] == f"scale 1 (7 replicas) (step 1 of 3): about {span(plan.total_s)} left"
    assert lines[2] == f"scale 2 (14 replicas) (step 2 of 3): about {span(3 * plan.left_s(1))} left"


def test_a_run_of_one_step_says_no_step_count() -> None:
    plan = estimate(BenchSettings(out_dir=Path("out"), targets_file=Path("t.json")))
    out = io.StringIO()
    with step_progress(Console(file=out, width=40), plan) as steps:
        steps.start("the running endpoints")
    assert out.getvalue().splitlines() == [
        f"the running endpoints: about {span(plan.total_s)} left"
    ]

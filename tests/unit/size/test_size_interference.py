"""Interference measured, not assumed: the measured neighbourhood a replica's GPU is closest to,
its slowdown in the prediction, and the plan naming it (or saying none was measured)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sharedserve.size.demand import Demand
from sharedserve.size.fleet import Fleet, FleetModel, GpuType, NodeType
from sharedserve.size.neighbourhood import Neighbourhood
from sharedserve.size.plan import build_plan, plan_markdown
from sharedserve.size.predict import (
    ALONE,
    UNMEASURED,
    LatencyForecaster,
    Neighbour,
    lookup,
    neighbour,
    planned,
)
from sharedserve.size.service_times import ServiceTimes
from tests.support.sizing import pack, timed


def measured(kind: str, busy: float, p50: float, p99: float) -> Neighbourhood:
    words = "copies of itself" if kind == "tiny" else kind
    return Neighbourhood(kind, words, busy, p50, p99, f"{kind} at {busy}")


# tiny's table: beside copies of itself (its sequential rows), beside resnet50 at two rates,
# beside mobilenet once.
TABLE = (
    measured("tiny", 1.0, 1.2, 1.3),
    measured("tiny", 3.0, 1.8, 2.5),
    measured("resnet50", 0.25, 1.1, 1.4),
    measured("resnet50", 0.75, 1.3, 2.0),
    measured("mobilenet", 0.3, 1.05, 1.2),
)


@pytest.mark.parametrize(
    ("planned", "chosen"),
    [
        # Same kind, nearest busy share.
        ([("resnet50", 0.2)], "resnet50 at 0.25"),
        ([("resnet50", 0.6)], "resnet50 at 0.75"),
        ([("tiny", 0.9)], "tiny at 1.0"),
        ([("tiny", 2.5)], "tiny at 3.0"),
        # Same kind before a nearer busy share of another: mobilenet at 0.3 is nearer 0.35.
        ([("resnet50", 0.35)], "resnet50 at 0.25"),
        # Of two as near, the busier.
        ([("resnet50", 0.5)], "resnet50 at 0.75"),
        # Several kinds: keyed by the busiest kind (tiny, 0.4), at their total busy share.
        ([("resnet50", 0.1), ("tiny", 0.4)], "tiny at 1.0"),
        # Two resnet50 processes (0.6 together) outweigh tiny's 0.4; the total is 1.0.
        ([("resnet50", 0.3), ("resnet50", 0.3), ("tiny", 0.4)], "resnet50 at 0.75"),
        # A kind never measured: the nearest busy share of any.
        ([("vgg16", 0.28)], "mobilenet at 0.3"),
        ([("vgg16", 1.6)], "tiny at 1.0"),
    ],
)
def test_the_closest_measured_neighbourhood_is_chosen(
    planned: list[tuple[str, float]], chosen: str
) -> None:
    found = lookup(TABLE, [Neighbour(kind, busy) for kind, busy in planned])
    assert found is not None
    (expected,) = [m for m in TABLE if m.source == chosen]
    scale = sum(busy for _, busy in planned) / expected.busy_share
    assert found.p50 == pytest.approx(1 + (expected.p50_slowdown - 1) * scale)
    assert found.p99 == pytest.approx(1 + (expected.p99_slowdown - 1) * scale)
    assert found.source.startswith(expected.description + ", scaled to ")


@pytest.mark.parametrize(
    ("busy", "p50", "p99"),
    [
        (0.75, 1.3, 2.0),  # at the measured busy share: the measurement
        (0.375, 1.15, 1.5),  # half as busy: half the slowdown
        (0.075, 1.03, 1.1),  # a tenth
        (1.5, 1.6, 3.0),  # twice as busy: on the same line
    ],
)
def test_the_slowdown_is_scaled_to_the_planned_busy_share(
    busy: float, p50: float, p99: float
) -> None:
    table = (measured("resnet50", 0.75, 1.3, 2.0),)
    found = lookup(table, [Neighbour("resnet50", busy)])
    assert found is not None
    assert (found.p50, found.p99) == (pytest.approx(p50), pytest.approx(p99))


def test_no_measurement_is_none_and_no_neighbour_needs_none() -> None:
    assert lookup((), [Neighbour("resnet50", 0.2)]) is None
    assert lookup((), []) == ALONE
    assert lookup(TABLE, []) == ALONE


def test_a_neighbours_busy_share_is_its_requests_in_flight_at_its_planned_rate() -> None:
    # 5 requests/s of 34 ms calls and 6 ms beyond them in the open loop: 0.2 in flight.
    big = replace(timed("big", 34.0, 5.0, 10.0, None), kind="resnet50",
                  open_loop_delay=ServiceTimes.of([(6.0, 1)]))  # fmt: skip
    assert neighbour(big) == Neighbour("resnet50", pytest.approx(0.2))
    # Without service times (an older profile): its demand's busy share; its name as its kind.
    old = replace(big, service_times=None, kind=None, busy_share=0.3)
    assert neighbour(old) == Neighbour("big", 0.3)
    # A GPU's other processes as the lookup takes them: a kind's busy shares summed.
    assert planned([big, old, big]) == [
        Neighbour("resnet50", pytest.approx(0.4)), Neighbour("big", 0.3)]  # fmt: skip


BESIDE = measured("resnet50", 0.17, 1.0, 2.0)


def small(name: str = "small", *table: Neighbourhood) -> Demand:
    """5 ms calls at 20 requests/s on one core, measured beside ``table``."""
    return replace(timed(name, 5.0, 20.0, 100.0, 100.0), kind="small", neighbourhoods=table)


def resnet50() -> Demand:
    return replace(timed("resnet50", 34.0, 5.0, 10.0, 1000.0), kind="resnet50")


def test_the_chosen_slowdown_scales_the_prediction_and_says_which_it_was() -> None:
    predict = LatencyForecaster(node_cores=8)
    d = small("small", BESIDE)
    alone = predict(d, 1, None, [])
    assert alone.interference == ALONE.source
    beside = predict(d, 2, None, [resnet50()])
    # p50 as alone (1.0x), p99 twice it (2.0x): the tail of waiting whole resnet50 calls.
    assert beside.p50_ms == alone.p50_ms
    assert beside.p99_ms == pytest.approx(2 * alone.p99_ms)
    assert beside.interference == BESIDE.description
    assert BESIDE.description in beside.error and "p99 2x its own alone" in beside.error
    # No neighbourhood measured: no interference assumed, and said.
    bare = predict(small("bare"), 2, None, [resnet50()])
    assert (bare.p50_ms, bare.p99_ms) == (alone.p50_ms, alone.p99_ms)
    assert (
        bare.interference
        == UNMEASURED.source
        == ("assumes no interference (no neighbourhood measured)")
    )
    assert UNMEASURED.source in bare.error


def plan_of(*wanted: Demand) -> tuple[Fleet, list[Demand]]:
    entries = tuple(FleetModel(d.model, Path("p"), d.rate_per_replica, 1000.0, min_replicas=1)
                    for d in wanted)  # fmt: skip
    return Fleet(GpuType("L4", 23034, 0.8), NodeType(8, 64), entries), list(wanted)


def test_the_plan_names_the_neighbourhood_and_flags_the_models_without_one() -> None:
    fleet, wanted = plan_of(small("small", BESIDE), resnet50())
    packing = pack(wanted, gpu_memory_mib=23034, reserve_mib=512, target=0.8, gpus_per_node=8)
    assert len(packing.gpus) == 1  # together: each is the other's neighbour
    plan = build_plan(fleet, wanted, packing, [])
    sources = {m.name: m.prediction_source for m in plan.models}
    assert sources == {
        "small": f"queueing simulation; {BESIDE.description}",
        "resnet50": f"queueing simulation; {UNMEASURED.source}",
    }
    (flag,) = [w for w in plan.warnings if "without a measured neighbourhood" in w]
    assert flag.endswith("assuming no interference: resnet50; profile them with "
                         "`profile --beside` (or at densities above 1)")  # fmt: skip
    assert f"- {flag}" in plan_markdown(plan, [])
    # The GPU's replicas carry the same figures as the models they are.
    by_model = {r.model: r.predicted_p99_ms for r in plan.gpus[0].replicas}
    assert by_model == {m.name: m.predicted_p99_ms for m in plan.models}


def test_a_model_alone_on_its_gpu_is_not_flagged() -> None:
    fleet, wanted = plan_of(resnet50())
    packing = pack(wanted, gpu_memory_mib=23034, reserve_mib=512, target=0.8, gpus_per_node=8)
    plan = build_plan(fleet, wanted, packing, [])
    assert not [w for w in plan.warnings if "neighbourhood" in w]
    (m,) = plan.models
    assert m.prediction_source == f"queueing simulation; {ALONE.source}"

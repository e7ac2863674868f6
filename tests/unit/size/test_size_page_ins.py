"""A paged model's requests wait for a page-in where another paged model took its room, and the
plan's p50/p99 of a paging server count it (``size.predict.page_ins``)."""

from __future__ import annotations

import numpy as np
import pytest

from sharedserve.size.grouping import SharedServer
from sharedserve.size.predict import LatencyForecaster, ModelLoad, ready_times, simulate
from sharedserve.size.service_times import ServiceTimes
from tests.support.sizing import timed

PAGE = 0.1


def _ready(arrivals: list[list[float]], paged: list[bool]) -> list[list[float]]:
    out = ready_times([np.array(a) for a in arrivals], [PAGE if p else None for p in paged])
    return [np.round(r, 9).tolist() for r in out]


@pytest.mark.parametrize(
    ("arrivals", "paged", "ready"),
    [
        # Two paged models taking turns: every request finds the other one resident.
        ([[0.0, 1.0], [0.5, 1.5]], [True, True], [[0.1, 1.1], [0.6, 1.6]]),
        # A request during its model's page-in waits for the same page-in; then it is resident.
        ([[0.0, 0.05, 0.2], [0.5]], [True, True], [[0.1, 0.1, 0.2], [0.6]]),
        # Page-ins one after another: b's starts when a's ends.
        ([[0.0], [0.01]], [True, True], [[0.1], [0.2]]),
        # One paged model alone is never paged out; a pinned neighbour never waits.
        ([[0.0, 1.0], [0.5]], [True, False], [[0.0, 1.0], [0.5]]),
        # The pinned model between the two paged ones changes nothing for them.
        ([[0.0, 1.0], [0.3], [0.5]], [True, False, True], [[0.1, 1.1], [0.3], [0.6]]),
    ],
)  # fmt: skip
def test_a_paged_request_waits_where_its_model_was_paged_out(
    arrivals: list[list[float]], paged: list[bool], ready: list[list[float]]
) -> None:
    assert _ready(arrivals, paged) == ready


def test_the_simulation_adds_page_ins_to_paged_models_only() -> None:
    call = ServiceTimes.of([(1.0, 1)])
    # Three cold paged models at one rate: two requests in three follow another paged model's,
    # so more than half wait a 50 ms page-in; the hot pinned model beside them never does.
    loads = [ModelLoad("hot", 50.0, call)] + [
        ModelLoad(n, 2.0, call, page_in_ms=50.0) for n in "abc"
    ]
    hot, *cold = simulate(loads, 1, requests=6000)
    for p in cold:
        assert p.p50_ms is not None and p.p99_ms is not None
        assert 50.0 <= p.p50_ms < 60.0 and p.p99_ms >= 50.0
    assert hot.p99_ms is not None and hot.p99_ms < 10.0
    # Without paging the same loads are a few milliseconds.
    plain = simulate([ModelLoad(x.name, x.rate_qps, call) for x in loads], 1, requests=6000)
    assert all(p.p99_ms is not None and p.p99_ms < 10.0 for p in plain)


def test_a_paging_servers_prediction_says_and_counts_its_page_ins() -> None:
    models = [timed("warm", 2.0, 40.0, 400.0, 500)] + [
        timed(n, 2.0, 1.0, 400.0, 500) for n in ("a", "b")
    ]
    server = SharedServer("shared-0", 1, models, paged=["a", "b"])
    predict = LatencyForecaster(node_cores=8, page_in_ms=50.0)
    a, warm = predict(models[1], 1, server), predict(models[0], 1, server)
    assert a.p99_ms >= 50.0 and "50 ms page-in" in a.error
    assert warm.p99_ms < 50.0 and "page-in" not in warm.error
    # The same server in a fleet without paging's page-in figure: no page-in.
    unpaged = LatencyForecaster(node_cores=8)(models[1], 1, server)
    assert unpaged.p99_ms < 50.0 and "page-in" not in unpaged.error

"""The open-loop row's rate in ``sharedserve profile``: enough requests for size to trust the
row, at a rate that leaves the replica lightly loaded, and a line when no such rate exists."""

from __future__ import annotations

import pytest

from sharedserve.cli.profile import open_loop_row
from sharedserve.size.profile import MIN_REQUESTS


def _sequential(qps: float, density: int = 1) -> dict[str, object]:
    return {"rows": [{"density": density, "qps": qps}]}


# (sequential QPS of the first row, its density, --duration): mobilenet_v2 and resnet50's rates
# on this CPU (about 23 and 9 requests/s; a tenth gave 27 and 21 requests in 12 s and 30 s), at
# windows long enough for a quarter; a fast model at the default window; a slow model over two
# replicas.
@pytest.mark.parametrize(
    ("qps", "density", "duration"), [(23, 1, 30), (9, 1, 60), (900, 1, 20), (18, 2, 60)]
)
def test_the_row_gets_enough_requests_at_no_more_than_a_quarter_of_the_sequential_rate(
    qps: float, density: int, duration: float
) -> None:
    row = open_loop_row(_sequential(qps, density), duration)
    assert row is not None
    per_replica = qps / density
    assert row.requests >= MIN_REQUESTS
    assert row.requests == pytest.approx(row.rate * duration)
    assert row.rate <= 0.25 * per_replica
    assert row.too_few("m") is None


def test_a_model_whose_tenth_is_enough_stays_there_however_many_requests_that_makes() -> None:
    # A tenth of 100 requests/s for 20 s is 200 requests: already past the 150 aimed at.
    row = open_loop_row(_sequential(100), 20)
    assert row is not None and row.rate == pytest.approx(10)
    # A tenth of 900 is 1,800 requests: kept, not cut to 300 (15/s, a server idler than the
    # rates it is planned at, and a p99 on three requests).
    row = open_loop_row(_sequential(900), 20)
    assert row is not None and row.rate == pytest.approx(90)


def test_a_row_too_short_for_even_a_quarter_of_the_rate_says_so_and_what_duration_would_do() -> (
    None
):
    # resnet50 at 9 requests/s in a 12 s window: a quarter of the rate gives 27 requests.
    row = open_loop_row(_sequential(9), 12)
    assert row is not None
    assert row.rate == pytest.approx(2.25)
    assert row.too_few("resnet50") == (
        "profile resnet50: the open-loop row will hold 27 requests, under the 100 size trusts: "
        "pass --duration >= 67"
    )
    # At that duration the rule gives its row and no line.
    longer = open_loop_row(_sequential(9), 67)
    assert longer is not None and longer.too_few("resnet50") is None


def test_no_row_when_the_sequential_sweep_served_nothing() -> None:
    assert open_loop_row({"rows": []}, 20) is None
    assert open_loop_row(_sequential(0), 20) is None

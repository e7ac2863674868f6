"""The fewest GPUs any plan could use, and what GPUs cost."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sharedserve.size.bounds import HOURS_PER_MONTH, cost, lower_bound
from sharedserve.size.demand import Demand
from tests.support.sizing import demand


@pytest.mark.parametrize(
    ("demands", "expected"),
    [
        # 10 x (7,488 + 512) MiB = 80,000 MiB on 40,000 MiB GPUs: memory says 2.
        ([demand(10, 7488, 0.01, 16)], (2, 2, 1, 1)),
        # 10 x 0.2 busy over a 0.8 target: 2.5, so 3.
        ([demand(10, 100, 0.2, 16)], (3, 1, 3, 1)),
        # 10 replicas, none measured past 4 on a GPU: 3.
        ([demand(10, 100, 0.01, 4)], (3, 1, 1, 3)),
        # Counted per model: 6 replicas measured 2 to a GPU take 3 GPUs, 6 at 8 another 0.75.
        ([demand(6, 100, 0.01, 2), demand(6, 100, 0.01, 8)], (4, 1, 1, 4)),
        # Exactly full is not one more: 5 x 0.16 = 0.8 (float sums land a hair above).
        ([demand(5, 100, 0.16, 16)], (1, 1, 1, 1)),
        ([], (0, 0, 0, 0)),
    ],
)
def test_lower_bound_is_the_largest_of_memory_compute_and_density(
    demands: list[Demand], expected: tuple[int, int, int, int]
) -> None:
    bound = lower_bound(demands, 40_000, 512, 0.8)
    assert (bound.gpus, bound.by_memory, bound.by_compute, bound.by_density) == expected
    assert bound.by_spread == (1 if demands else 0)  # each model here spreads over one GPU


def test_a_model_spread_over_more_gpus_than_the_rest_ask_sets_the_bound() -> None:
    spread = replace(demand(3, 100, 0.01, 16), spread=3)
    bound = lower_bound([spread], 40_000, 512, 0.8)
    assert (bound.gpus, bound.by_spread) == (3, 3)


def test_cost_per_month_is_730_hours_a_gpu() -> None:
    assert HOURS_PER_MONTH == 730
    c = cost(12, 3.0)
    assert (c.gpus, c.gpu_hours_per_month, c.per_month) == (12, 8760.0, 26280.0)
    assert cost(0, 3.0).per_month == 0.0


def test_replicas_no_two_of_which_share_a_gpu_set_the_bound() -> None:
    # 3 replicas at 0.45 of the time target's 0.8 (over half) and 2 measured only alone: 5
    # GPUs, where time alone says ceil((3 x 0.45 + 2 x 0.01) / 0.8) = 2.
    busy, alone = demand(3, 100, 0.45, 4), demand(2, 100, 0.01, 1)
    bound = lower_bound([busy, alone], 40_000, 512, 0.8)
    assert (bound.gpus, bound.by_large, bound.by_compute) == (5, 5, 2)
    # Over half the memory (20,000 of 40,000 with the reserve) and over half the time are
    # counted apart: one of each may share; the more numerous sets the bound.
    big = demand(4, 19_600, 0.01, 8)
    both = lower_bound([big, busy], 40_000, 512, 0.8)
    assert both.by_large == 4

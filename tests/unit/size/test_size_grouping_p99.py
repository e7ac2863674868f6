"""A shared server only where the plan's predicted p99 of its models meets their objectives."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sharedserve.size.demand import Demand
from sharedserve.size.grouping import SharedServer, group
from sharedserve.size.predict import LatencyForecaster
from tests.support.sizing import GPU, RESERVE, TARGET, timed


def grouped(demands: list[Demand]) -> dict[str, str | None]:
    grouping = group(demands, gpu_memory_mib=GPU, reserve_mib=RESERVE, target=TARGET,
                     p99_of=LatencyForecaster(node_cores=8).server_p99)  # fmt: skip
    return {name: s.server for name, s in grouping.serving.items()}


@pytest.mark.parametrize(
    ("slo", "expected"),
    [
        # 100 ms calls take the one core 15% of the time: more than 1% of the small models'
        # requests wait behind one, so their p99 is near 100 ms, over a 50 ms objective. The
        # small ones share a server of their own; the large one, alone, stays dedicated.
        (50, {"large": None, "small-a": "shared-0", "small-b": "shared-0"}),
        # Against 500 ms objectives the same wait is room enough: all three share one server.
        (500, {"large": "shared-0", "small-a": "shared-0", "small-b": "shared-0"}),
        # Over a 2 ms objective with 3 ms calls whatever the neighbours: the server is not the
        # cause (the plan warns), so it is not refused for it.
        (2, {"large": "shared-0", "small-a": "shared-0", "small-b": "shared-0"}),
        # No objectives: nothing to keep within.
        (None, {"large": "shared-0", "small-a": "shared-0", "small-b": "shared-0"}),
    ],
)
def test_a_slow_model_does_not_join_fast_ones_with_tight_objectives(
    slo: float | None, expected: dict[str, str | None]
) -> None:
    large = timed("large", 100, 1.5, 5, 1000)
    smalls = [timed("small-a", 3, 20, 100, slo), timed("small-b", 3, 10, 100, slo)]
    assert grouped([large, *smalls]) == expected


def test_a_refused_model_says_whose_p99_it_would_break() -> None:
    demands = [timed("large", 100, 1.5, 5, 1000), timed("small", 3, 20, 100, 50)]
    grouping = group(demands, gpu_memory_mib=GPU, reserve_mib=RESERVE, target=TARGET,
                     p99_of=LatencyForecaster(node_cores=8).server_p99)  # fmt: skip
    assert grouping.servers == []
    why = grouping.serving["small"].reason
    assert why.startswith("dedicated: cold (20% of a replica's capacity), but beside large in a")
    assert "its predicted p99 would be at " in why and "over its 50 ms objective" in why
    p99 = float(why.split("would be at ")[1].split(" ms")[0])
    assert 50 < p99 <= 200  # waits for one 100 ms call, perhaps two


def test_without_service_times_objectives_are_not_checked() -> None:
    # The plan then reads each model's own profile row, whatever its neighbours.
    demands = [replace(timed("large", 100, 1.5, 5, 1000), service_times=None),
               timed("small", 3, 20, 100, 50)]  # fmt: skip
    assert set(grouped(demands).values()) == {"shared-0"}


def test_a_model_whose_shared_process_saturates_gets_its_row_not_a_process_of_its_own() -> None:
    # Two models of 10 ms calls at 60/s each on one core: 1.2 of it together, so the server's
    # process cannot keep up; each alone (0.6) could. The plan must not show the figure of a
    # process of its own (server_p99 counts it as inf): its profile row, saying why.
    models = [timed(n, 10.0, 60.0, 100.0, None) for n in ("a", "b")]
    server = SharedServer("shared-0", 1, models)
    predict = LatencyForecaster(node_cores=8)
    a = predict(models[0], 1, server)
    assert a.source == "profile row"
    assert "shared-0's one process of 1 slots saturates" in a.error
    assert predict.server_p99(models, 1) == {"a": float("inf"), "b": float("inf")}

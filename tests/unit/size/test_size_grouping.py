"""Which models share a server process: cold ones gather, hot ones keep their own replicas."""

from __future__ import annotations

import pytest

from sharedserve.size.bounds import lower_bound
from sharedserve.size.demand import Demand
from sharedserve.size.grouping import COLD_LOAD, MAX_GROUP_MODELS, group
from tests.support.sizing import GPU, RESERVE, TARGET, model


def servers_of(demands: list[Demand]) -> dict[str, str | None]:
    grouping = group(demands, gpu_memory_mib=GPU, reserve_mib=RESERVE, target=TARGET)
    return {name: s.server for name, s in grouping.serving.items()}


@pytest.mark.parametrize(
    ("demands", "expected"),
    [
        # Two cold models share one server; the hot one keeps its own replicas.
        (
            [model("a", 0.1), model("b", 0.2), model("hot", 0.7)],
            {"a": "shared-0", "b": "shared-0", "hot": None},
        ),
        # Just at the line is cold; just over it is hot.
        (
            [model("a", COLD_LOAD), model("b", 0.1), model("c", COLD_LOAD + 0.01)],
            {"a": "shared-0", "b": "shared-0", "c": None},
        ),
        # Loads sum to at most the 0.8 target: 0.45 + 0.45 no, 0.45 + 0.3 yes (first fit).
        (
            [model("a", 0.45), model("b", 0.45), model("c", 0.3), model("d", 0.3)],
            {"a": "shared-0", "c": "shared-0", "b": "shared-1", "d": "shared-1"},
        ),
        # Busy shares: a server keeps at most a quarter of the 0.8 target busy (0.2).
        (
            [model("a", 0.1, busy=0.15), model("b", 0.1, busy=0.1), model("c", 0.1, busy=0.05)],
            {"a": "shared-0", "c": "shared-0", "b": None},
        ),
        # Models of another densest do not share: the least would bind the others.
        ([model("a", 0.1, densest=4), model("b", 0.1)], {"a": None, "b": None}),
        # Memory: a server's replica takes at most half a GPU (20,000 MiB), its one reserve in.
        (
            [
                model("a", 0.1, memory=12_000),
                model("b", 0.1, memory=8_000),
                model("c", 0.1, memory=7_000),
            ],
            {"a": "shared-0", "c": "shared-0", "b": None},
        ),
        # Replicas alike only: a model with 3 replicas (its min_replicas) does not join one of 1.
        (
            [model("a", 0.1, replicas=3), model("b", 0.1), model("c", 0.1, replicas=3)],
            {"a": "shared-0", "c": "shared-0", "b": None},
        ),
        # A model measured only alone never shares: its profile never saw a neighbour.
        ([model("a", 0.1, densest=1), model("b", 0.1)], {"a": None, "b": None}),
    ],
)
def test_cold_models_share_a_server_and_hot_ones_do_not(
    demands: list[Demand], expected: dict[str, str | None]
) -> None:
    assert servers_of(demands) == expected


def test_each_model_says_why() -> None:
    demands = [model("a", 0.1), model("b", 0.1), model("hot", 0.9), model("c", 0.1, replicas=2)]
    grouping = group(demands, gpu_memory_mib=GPU, reserve_mib=RESERVE, target=TARGET)
    why = {n: s.reason for n, s in grouping.serving.items()}
    assert why["a"].startswith("shared in shared-0: cold, a replica carries 10% of its capacity")
    assert "2 models pay one 512 MiB reserve" in why["a"]
    assert why["hot"].startswith("dedicated: hot, a replica carries 90% of its capacity")
    assert why["c"].startswith("dedicated: cold (10% of a replica's capacity), but no other")


def test_a_server_holds_at_most_its_models_limit() -> None:
    demands = [model(f"m{i}", 0.001, memory=10, busy=0.0001) for i in range(MAX_GROUP_MODELS + 1)]
    grouping = group(demands, gpu_memory_mib=GPU, reserve_mib=RESERVE, target=TARGET)
    assert [len(s.models) for s in grouping.servers] == [MAX_GROUP_MODELS]
    assert sum(s.server is None for s in grouping.serving.values()) == 1


def test_a_server_is_placed_as_one_replica_with_one_reserve() -> None:
    demands = [model("a", 0.1, memory=3000, busy=0.05, replicas=2, densest=4),
               model("b", 0.2, memory=2000, busy=0.1, replicas=2, densest=4),
               model("hot", 0.8, memory=5000)]  # fmt: skip
    grouping = group(demands, gpu_memory_mib=GPU, reserve_mib=RESERVE, target=TARGET)
    requests = grouping.requests(demands)
    assert [(r.model, r.replicas, r.memory_mib, r.max_density, r.spread) for r in requests] == [
        ("hot", 1, 5000, 8, 1),
        ("shared-0", 2, 5000, 4, 2),
    ]
    assert requests[1].busy_share == pytest.approx(0.15)
    # The bound counts a context per process: 3 processes' reserves, not 5 replicas'.
    three = 3 * RESERVE + 15_000
    assert lower_bound(requests, three, RESERVE, TARGET).by_memory == 1
    assert lower_bound(demands, three, RESERVE, TARGET).by_memory == 2


def test_a_server_is_not_named_as_a_model_is() -> None:
    assert servers_of([model("shared-0", 0.1), model("b", 0.1)]) == {
        "shared-0": "shared-0-server",
        "b": "shared-0-server",
    }

"""Paging the coldest models of a shared server where the fleet allows it, and host memory: a
runtime a process, counted per node."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sharedserve.placement import OpenEnded, place
from sharedserve.size.demand import Demand
from sharedserve.size.fleet import Fleet, FleetModel, GpuType, NodeType, PagingSettings
from sharedserve.size.grouping import group
from sharedserve.size.host import HOST_PER_FILE_MIB, process_host_mib
from sharedserve.size.plan import build_plan
from tests.support.sizing import GPU, RESERVE, TARGET, model

LRU = PagingSettings(page_in_ms=50)


def slo(d: Demand, slo_ms: float, p99_ms: float = 10.0) -> Demand:
    return replace(d, slo_p99_ms=slo_ms, predicted_p99_ms=p99_ms)


@pytest.mark.parametrize(
    ("demands", "paging", "paged", "memory"),
    [
        # No paging in the fleet: every model's memory counts, 3 x 4,000.
        ([slo(model(n, 0.05, memory=4000), 500) for n in "abc"], None, [], 12_000),
        # Paging: the three coldest take turns in room for the largest (4,000), not 12,000.
        ([slo(model(n, 0.05, memory=4000), 500) for n in "abc"], LRU, ["a", "b", "c"], 4_000),
        # A model over the paging load (10%) stays pinned: 6,000 pinned + the largest paged 3,000.
        (
            [slo(model("warm", 0.3, memory=6000), 500), slo(model("a", 0.05, memory=3000), 500),
             slo(model("b", 0.1, memory=2000), 500)],
            LRU, ["a", "b"], 9_000,
        ),
        # No room for a 50 ms page-in over a 460 ms p99 within 500 ms: pinned.
        (
            [slo(model("tight", 0.05, memory=3000), 500, p99_ms=460),
             slo(model("a", 0.05, memory=2000), 500)],
            LRU, ["a"], 5_000,
        ),
    ],
)  # fmt: skip
def test_the_coldest_models_are_paged_and_a_server_keeps_room_for_its_largest(
    demands: list[Demand], paging: PagingSettings | None, paged: list[str], memory: float
) -> None:
    grouping = group(demands, gpu_memory_mib=GPU, reserve_mib=RESERVE, target=TARGET,
                     paging=paging)  # fmt: skip
    (server,) = grouping.servers
    assert sorted(server.paged) == paged and server.memory_mib == memory
    assert server.placed_as().memory_mib == memory
    for d in demands:
        reason = grouping.serving[d.model].reason
        assert ("paged (paging: lru)" in reason) == (d.model in paged)
        if d.model in paged:
            assert "room for a 50 ms page-in" in reason


def test_paging_lets_more_cold_models_into_a_server_within_half_a_gpu() -> None:
    # Half a 40,000 MiB GPU less the reserve is 19,488 MiB: 4 models of 6,000 MiB take two
    # servers pinned (3 + 1), one paged.
    demands = [slo(model(n, 0.05, memory=6000), 500) for n in "abcd"]
    pinned = group(demands, gpu_memory_mib=GPU, reserve_mib=RESERVE, target=TARGET)
    paged = group(demands, gpu_memory_mib=GPU, reserve_mib=RESERVE, target=TARGET, paging=LRU)
    assert [len(s.models) for s in pinned.servers] == [3]  # the fourth is a server of one
    assert [len(s.models) for s in paged.servers] == [4]


@pytest.mark.parametrize(
    ("files", "runtime", "host"),
    [
        ([None], 250, 250),  # no files in the fleet: the runtime only
        ([10.0], 250, 250 + 10 * HOST_PER_FILE_MIB),
        ([10.0, 4.0, None], 200, 200 + 14 * HOST_PER_FILE_MIB),  # one runtime for three
    ],
)
def test_a_process_pays_its_runtime_once_and_its_models_footprints(
    files: list[float | None], runtime: float, host: float
) -> None:
    models = [replace(model(f"m{i}", 0.1), files_mib=f) for i, f in enumerate(files)]
    assert process_host_mib(models, runtime) == host


def test_a_shared_server_pays_one_runtime_and_the_plan_counts_host_memory_a_node() -> None:
    demands = [replace(model(n, 0.1, memory=3000, densest=4), files_mib=20.0) for n in "abc"]
    demands.append(replace(model("hot", 0.7, memory=3000, densest=4), files_mib=20.0))
    grouping = group(demands, gpu_memory_mib=GPU, reserve_mib=RESERVE, target=TARGET,
                     runtime_mib=250)  # fmt: skip
    (server,) = grouping.servers
    assert server.host_memory_mib == 250 + 3 * 20 * HOST_PER_FILE_MIB  # not 3 x 250
    assert "one 250 MiB runtime in host memory" in grouping.serving["a"].reason
    packing = place(grouping.requests(demands), OpenEnded(GPU, 8), reserve_mib=RESERVE,
                    target=TARGET)  # fmt: skip
    entries = tuple(FleetModel(d.model, Path("p.json"), 10.0, 100.0, min_replicas=1)
                    for d in demands)  # fmt: skip
    for node_mib, warned in ((900, False), (899, True)):
        fleet = Fleet(GpuType("L4", GPU, 0.8), NodeType(8, 64, host_memory_mib=node_mib), entries,
                      host_memory_per_process_mib=250)  # fmt: skip
        plan = build_plan(fleet, demands, packing, [], grouping=grouping)
        # Two processes on node 0: the server (550) and hot (250 + 100).
        assert plan.node_host_memory_mib == [900]
        assert plan.servers[0].host_memory_mib == 550
        assert any("host memory" in w and "node 0 (900 MiB)" in w for w in plan.warnings) is warned

"""The plan's JSON (issue 18 item 3): nodes' CPU against what a node has."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sharedserve.size.binpack import pack
from sharedserve.size.fleet import Fleet, FleetModel, GpuType, NodeType
from sharedserve.size.plan import build_plan
from tests.unit.test_size_bounds import demand


def test_a_node_whose_replicas_need_more_cpu_than_it_has_is_a_warning() -> None:
    # 6 replicas a 1.5-core limit, 3 to a GPU (by time), 2 GPUs to a node of 8 cores: 9 cores.
    wanted = [replace(demand(6, 100, 0.25, 8), cpu_limit=1.5)]
    entry = FleetModel("m", Path("p.json"), 60.0, 100.0)
    for cores, warned in ((8.0, True), (9.0, False)):
        fleet = Fleet(GpuType("L4", 23034, 0.8), NodeType(2, cores), (entry,))
        packing = pack(wanted, gpu_memory_mib=23034, reserve_mib=512, target=0.8, gpus_per_node=2)
        plan = build_plan(fleet, wanted, packing, [])
        assert plan["node_count"] == 1 and plan["node_cpu_cores"] == [9.0]
        assert any("more than a node's 8 cores on node 0 (9 cores)" in w
                   for w in plan["warnings"]) is warned  # fmt: skip

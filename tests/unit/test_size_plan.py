"""The plan's JSON: nodes' CPU, and p99 predicted per GPU and verified."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sharedserve.size.binpack import pack
from sharedserve.size.fleet import Fleet, FleetModel, GpuType, NodeType
from sharedserve.size.plan import build_plan
from sharedserve.size.verify import compare, gpu_predictions
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


def test_each_replica_is_predicted_beside_its_gpus_neighbours() -> None:
    # 4 replicas at 0.2 busy: all on one GPU (4 x 0.2 = 0.8). Sequential rows: 10 ms alone,
    # 40 ms four to a GPU; the objective, 30 ms, holds alone and not four to a GPU.
    rows = ((1, 10.0), (4, 40.0))
    wanted = [replace(demand(4, 100, 0.2, 8), sharing_p99_ms=rows)]
    entry = FleetModel("m", Path("p.json"), 60.0, 30.0)
    fleet = Fleet(GpuType("L4", 23034, 0.8), NodeType(8, 64), (entry,))
    packing = pack(wanted, gpu_memory_mib=23034, reserve_mib=512, target=0.8, gpus_per_node=8)
    plan = build_plan(fleet, wanted, packing, [])
    (gpu,) = plan["gpus"]
    assert [r["predicted_p99_ms"] for r in gpu["replicas"]] == [40.0] * 4
    (m,) = plan["models"]
    assert (m["predicted_p99_ms"], m["p99_at_capacity_ms"]) == (40.0, 1.0)
    assert any(w.startswith("predicted p99 over the objective") and w.endswith(
        "set max_replicas_per_gpu") for w in plan["warnings"])  # fmt: skip


def test_verify_holds_each_model_to_its_gpus_prediction() -> None:
    plan = {
        "models": [{"name": "a", "predicted_p99_ms": 50.0}, {"name": "b", "predicted_p99_ms": 9}],
        "gpus": [
            {"replicas": [{"model": "a", "predicted_p99_ms": 20.0}]},
            {"replicas": [{"model": "a", "predicted_p99_ms": 50.0}, {"model": "b"}]},
        ],
    }
    assert gpu_predictions(plan, Path("plan/gpu-000.yaml")) == {"a": 20.0}
    assert gpu_predictions(plan, Path("plan/gpu-001.yaml")) == {"a": 50.0}
    assert gpu_predictions(plan, Path("plan/gpu-002.yaml")) == {}  # not in this plan
    assert gpu_predictions(plan, Path("mine.yaml")) == {}
    model = {"replicas": 1, "qps": 1.0, "p99_ms": 25.0, "slo_p99_ms": 60.0, "slo_met": True,
             "errors": 0, "dropped": 0}  # fmt: skip
    report = {"rows": [{"models": {"a": model}}]}
    (line,) = compare(plan, report, {"a": 1.0}, {"a": 20.0})
    assert (line["predicted_p99_ms"], line["p99_error"]) == (20.0, -0.2)
    (line,) = compare(plan, report, {"a": 1.0})  # no GPU's: the model's, at its worst GPU
    assert line["predicted_p99_ms"] == 50.0

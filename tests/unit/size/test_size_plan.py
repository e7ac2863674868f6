"""The plan's JSON: nodes' CPU, and p99 predicted per GPU and verified."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sharedserve.pack.spec import load_spec, write_spec
from sharedserve.size.fleet import Fleet, FleetModel, GpuType, NodeType
from sharedserve.size.plan import (
    Plan,
    build_plan,
    gpu_specs,
    read_plan,
    spec_index,
    spec_name,
    write_plan,
)
from sharedserve.size.verify import compare, gpu_predictions
from tests.support.sizing import demand, pack


def test_a_node_whose_replicas_need_more_cpu_than_it_has_is_a_warning() -> None:
    # 6 replicas a 1.5-core limit, 3 to a GPU (by time), 2 GPUs to a node of 8 cores: 9 cores.
    wanted = [replace(demand(6, 100, 0.25, 8), cpu_limit=1.5)]
    entry = FleetModel("m", Path("p.json"), 60.0, 100.0)
    for cores, warned in ((8.0, True), (9.0, False)):
        fleet = Fleet(GpuType("L4", 23034, 0.8), NodeType(2, cores), (entry,))
        packing = pack(wanted, gpu_memory_mib=23034, reserve_mib=512, target=0.8, gpus_per_node=2)
        plan = build_plan(fleet, wanted, packing, [])
        assert plan.node_count == 1 and plan.node_cpu_cores == [9.0]
        assert any("more than a node's 8 cores on node 0 (9 cores)" in w
                   for w in plan.warnings) is warned  # fmt: skip


def test_each_replica_is_predicted_beside_its_gpus_neighbours() -> None:
    # 4 replicas at 0.2 busy: all on one GPU (4 x 0.2 = 0.8). Sequential rows: 10 ms alone,
    # 40 ms four to a GPU; the objective, 30 ms, holds alone and not four to a GPU.
    rows = ((1, 10.0), (4, 40.0))
    wanted = [replace(demand(4, 100, 0.2, 8), sharing_p99_ms=rows)]
    entry = FleetModel("m", Path("p.json"), 60.0, 30.0)
    fleet = Fleet(GpuType("L4", 23034, 0.8), NodeType(8, 64), (entry,))
    packing = pack(wanted, gpu_memory_mib=23034, reserve_mib=512, target=0.8, gpus_per_node=8)
    plan = build_plan(fleet, wanted, packing, [])
    (gpu,) = plan.gpus
    assert [r.predicted_p99_ms for r in gpu.replicas] == [40.0] * 4
    (m,) = plan.models
    assert (m.predicted_p99_ms, m.p99_at_capacity_ms) == (40.0, 1.0)
    assert any(w.startswith("predicted p99 over the objective") and w.endswith(
        "set max_replicas_per_gpu") for w in plan.warnings)  # fmt: skip


def two_gpu_plan() -> Plan:
    """Model a: one replica beside b on GPU 0 (50 ms, a's worst), one alone on GPU 1 (20 ms)."""
    rows = ((1, 20.0), (2, 50.0))
    wanted = [
        replace(demand(2, 12000, 0.3, 8), model="a", rate_per_replica=15.0, sharing_p99_ms=rows),
        replace(
            demand(1, 9000, 0.3, 8),
            model="b",
            rate_per_replica=60.0,
            sharing_p99_ms=((1, 9.0), (2, 9.0)),
        ),
    ]
    entries = tuple(FleetModel(n, Path("p.json"), 60.0, 100.0, min_replicas=1) for n in "ab")
    fleet = Fleet(GpuType("L4", 23034, 0.8), NodeType(8, 64), entries)
    plan = build_plan(fleet, wanted, pack(wanted, gpu_memory_mib=23034, reserve_mib=512,
                                          target=0.8, gpus_per_node=8), [])  # fmt: skip
    assert [[r.model for r in g.replicas] for g in plan.gpus] == [["a", "b"], ["a"]]
    return plan


def test_verify_holds_each_model_to_its_gpus_prediction(tmp_path: Path) -> None:
    # Through plan.json, as verify reads it: the type that wrote it reads it back.
    write_plan(two_gpu_plan(), tmp_path / "plan.json")
    plan = read_plan(tmp_path / "plan.json")
    assert gpu_predictions(plan, tmp_path / spec_name(0)) == {"a": 50.0, "b": 9.0}
    assert gpu_predictions(plan, tmp_path / spec_name(1)) == {"a": 20.0}
    assert gpu_predictions(plan, tmp_path / spec_name(2)) == {}  # not in this plan
    assert gpu_predictions(plan, Path("mine.yaml")) == {}
    model = {"replicas": 1, "qps": 1.25, "p50_ms": 10.0, "p99_ms": 25.0, "slo_p99_ms": 60.0,
             "slo_met": True, "errors": 0, "dropped": 0}  # fmt: skip
    report = {"rows": [{"models": {"a": model}}]}
    (line,) = compare(plan, report, {"a": 1.0}, {"a": 20.0}, {"a": 12.0})
    assert (line["predicted_p99_ms"], line["p99_error"]) == (20.0, -0.2)
    # Every figure's error is (predicted - measured) / measured: p50 and QPS too.
    assert (line["measured_p50_ms"], line["p50_error"]) == (10.0, 0.2)
    assert line["qps_error"] == -0.2
    (line,) = compare(plan, report, {"a": 1.0})  # no GPU's: the model's, at its worst GPU
    assert line["predicted_p99_ms"] == 50.0


@pytest.mark.parametrize("index", [0, 7, 999, 1000])
def test_a_gpus_spec_name_reads_back_as_its_index(index: int) -> None:
    assert spec_index(Path("plan") / spec_name(index)) == index


@pytest.mark.parametrize("name", ["gpu-7.yml", "gpu-.yaml", "gpu-007.yaml.bak", "mine.yaml"])
def test_a_file_not_named_as_a_gpus_spec_is_none(name: str) -> None:
    assert spec_index(Path(name)) is None


def test_each_gpus_share_is_written_by_packs_writer_and_read_by_packs_reader(
    tmp_path: Path,
) -> None:
    plan = two_gpu_plan()
    files = {"a": tmp_path / "models" / "a", "b": tmp_path / "models" / "b"}
    entries = tuple(
        FleetModel(n, Path("p.json"), 60.0, 100.0, min_replicas=1, model=files[n]) for n in "ab"
    )
    fleet = Fleet(plan.gpu, plan.node, entries)
    out = tmp_path / "plan"
    out.mkdir()
    specs = gpu_specs(plan, fleet, out)
    path = write_spec(specs[0], out / spec_name(0))
    # The measured memory (nvml) is each replica's cap; the weight, its planned requests/s.
    assert path.read_text() == (
        "models:\n"
        "- model: ../models/a\n  name: a\n  replicas: 1\n  gpu_memory_mib: 12000\n"
        "  slo_p99_ms: 100.0\n  weight: 15.0\n"
        "- model: ../models/b\n  name: b\n  replicas: 1\n  gpu_memory_mib: 9000\n"
        "  slo_p99_ms: 100.0\n  weight: 60.0\n"
    )
    a, b = load_spec(path).entries
    assert (a.model_dir.resolve(), a.name, a.replicas) == (files["a"], "a", 1)
    assert (b.weight, b.slo_p99_ms, b.cpu_limit_cores) == (60.0, 100.0, None)

"""The replicas' limits as the report records them."""

from __future__ import annotations

from typing import Any

from sharedserve.bench.limits import (
    LIMIT_KEYS,
    LIMITS_HEADERS,
    group_limits,
    limits_table,
    read_limits,
    replica_limits,
    without_limits,
)


def body(**changes: Any) -> dict[str, Any]:
    """A ``/sharedserve/v1/limits`` body (``server.start_up.limits_report``'s fields)."""
    return {
        "device": "cpu", "gpu_memory_fraction": 0.25, "gpu_memory_mib": 4096,
        "gpu_memory_total_mib": 16384, "gpu_memory_source": "flag", "gpu_memory_enforced": False,
        "cpu_limit": 0.5, "cpu_limit_source": "cgroup-v2", "cpu_limit_cgroup": "/x",
        "available_cpus": 2, "intra_op_threads": 1, "inter_op_threads": 1,
        "batching": {"enabled": False},
    } | changes  # fmt: skip


def test_a_quota_is_enforced_a_flag_is_not() -> None:
    quota = replica_limits(body(), simulated_gpus=False)
    assert quota is not None and tuple(quota) == LIMIT_KEYS
    assert quota["cpu_limit_cores"] == 0.5 and quota["cpu_quota_enforced"] is True
    flag = replica_limits(body(cpu_limit_source="flag"), simulated_gpus=False)
    assert flag is not None and flag["cpu_quota_enforced"] is False
    assert flag["cpu_limit_source"] == "flag"
    none = replica_limits(body(cpu_limit=None, cpu_limit_source="none"), simulated_gpus=False)
    assert none is not None and none["cpu_limit_cores"] is None
    assert none["cpu_quota_enforced"] is False


def test_gpu_caps_are_kept_when_real_and_null_when_simulated() -> None:
    real = replica_limits(body(gpu_memory_enforced=True, device="GPU-1"), simulated_gpus=False)
    assert real is not None
    assert (real["gpu_memory_fraction"], real["gpu_memory_mib"]) == (0.25, 4096)
    assert real["gpu_memory_enforced"] is True
    fake = replica_limits(body(), simulated_gpus=True)
    assert fake is not None
    assert fake["gpu_memory_fraction"] is None and fake["gpu_memory_mib"] is None
    assert fake["gpu_memory_enforced"] is False


def test_batching_is_recorded_as_the_server_reports_it() -> None:
    batching = {"enabled": True, "max_batch_size": 8, "batch_timeout_micros": 500}
    limits = replica_limits(body(batching=batching), simulated_gpus=False)
    assert limits is not None and limits["batching"] == batching


def test_no_body_is_unknown_not_unlimited() -> None:
    assert replica_limits(None, simulated_gpus=False) is None


def test_replicas_that_agree_are_one_entry() -> None:
    same = replica_limits(body(), simulated_gpus=False)
    other = replica_limits(body(cpu_limit=1.0), simulated_gpus=False)
    assert group_limits(2, {"tiny-0": same, "tiny-1": same}) == [
        {"density": 2, "replicas": ["tiny-0", "tiny-1"], "limits": same}
    ]
    assert group_limits(3, {"a": same, "b": other, "c": None, "d": same}) == [
        {"density": 3, "replicas": ["a", "d"], "limits": same},
        {"density": 3, "replicas": ["b"], "limits": other},
        {"density": 3, "replicas": ["c"], "limits": None},
    ]


def test_a_server_that_does_not_answer_has_no_limits() -> None:
    assert read_limits("http://127.0.0.1:9", timeout=1.0) is None


def test_the_reports_show_limits_as_a_table() -> None:
    batching = {"enabled": True, "max_batch_size": 8, "batch_timeout_micros": 2000}
    quota = replica_limits(body(batching=batching), simulated_gpus=False)
    entries = group_limits(2, {"m-0": quota, "m-1": quota}) + group_limits(4, {"m-0": None})
    table = limits_table(entries)
    assert len(table) == 2 and all(len(row) == len(LIMITS_HEADERS) for row in table)
    assert table[0] == [
        "2",
        "m-0, m-1",
        "0.5 cores (cgroup-v2)",
        "enforced",
        "0.25 of the GPU = 4096 MiB",
        "no",
        "up to 8 rows, waits 2000 us",
    ]
    assert table[1][2:] == ["unknown"] * 5
    settings = {"pattern": "sequential", "replica_limits": entries}
    assert without_limits(settings) == {"pattern": "sequential"}

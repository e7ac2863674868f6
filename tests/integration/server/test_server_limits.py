"""The caps a real server applies and reports on ``/sharedserve/v1/limits``.

GPU: this machine has none, so the cap is sized against a simulated inventory (``--fake-gpus``),
recorded, reported, and logged as not enforced. CPU: the quota comes from a real cgroup the test
creates and puts the server into before it starts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sharedserve.limits.cgroups import create_cpu_cgroup, remove_cgroup
from sharedserve.server import SPARE_THREADS
from tests.support.gpus import fake_gpu_file, gpu_uuid
from tests.support.servers import Server, clean_env

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

LIMIT_FIELDS = {
    "device",
    "gpu_memory_fraction",
    "gpu_memory_mib",
    "cpu_limit",
    "cpu_limit_source",
    "intra_op_threads",
    "inter_op_threads",
    "batching",
}


def serve_and_get_limits(
    models_dir: Path,
    tmp_path: Path,
    args: list[str],
    env: dict[str, str] | None = None,
    prefix: list[str] | None = None,
) -> tuple[dict[str, object], str]:
    server = Server(models_dir / "tiny", tmp_path / "serve.log", args, env, prefix or [])
    try:
        server.wait_available("tiny")
        limits = server.client.get("/sharedserve/v1/limits").json()
        predict = server.client.post("/v1/models/tiny:predict", json={"inputs": [[0.0] * 8]})
        assert predict.status_code == 200
    finally:
        assert server.stop() == 0, server.log()
    return limits, server.log()


def test_cap_from_env_contract(models_dir: Path, tmp_path: Path, fake_gpus: Path) -> None:
    env = clean_env(SHAREDSERVE_GPU_MEMORY_FRACTION="0.25")
    limits, log = serve_and_get_limits(models_dir, tmp_path, ["--fake-gpus", str(fake_gpus)], env)
    assert limits.keys() >= LIMIT_FIELDS
    assert limits["gpu_memory_fraction"] == 0.25
    assert limits["gpu_memory_mib"] == 4096  # 0.25 of the simulated 16384 MiB
    assert limits["gpu_memory_source"] == "env"
    assert limits["gpu_memory_enforced"] is False
    assert limits["device"] == "cpu"
    assert "NOT enforced" in log
    assert "SIMULATED" in log


# Which of flag and env, MiB and fraction wins is table-tested without a server
# (tests/unit/test_gpu_cap.py: flag-*-wins, env-mib-wins). A server each re-checked those rules
# at the cost of a TensorFlow start; the servers below check that serve wires them, in passing.


def test_cap_without_any_gpu_is_recorded_and_the_flag_wins_over_env(
    models_dir: Path, tmp_path: Path
) -> None:
    env = clean_env(SHAREDSERVE_GPU_MEMORY_FRACTION="0.5")
    args = ["--gpu-memory-fraction", "0.3"]
    limits, log = serve_and_get_limits(models_dir, tmp_path, args, env)
    assert (limits["gpu_memory_fraction"], limits["gpu_memory_source"]) == (0.3, "flag")
    assert limits["gpu_memory_mib"] is None  # no GPU, so no size to take 30% of
    assert limits["gpu_memory_total_mib"] is None
    assert "NOT enforced" in log


@pytest.fixture
def cgroup() -> Iterator[Callable[[str, float], Path]]:
    """Makes real CPU cgroups under a parent unique to this test; removes them afterwards."""
    parent = f"sharedserve-test-{uuid.uuid4().hex[:8]}"
    made: list[Path] = []

    def make(name: str, cores: float) -> Path:
        path = create_cpu_cgroup(parent, name, cores)
        made.append(path)
        return path

    yield make
    for path in reversed(made):
        remove_cgroup(path)


def _in_cgroup(path: Path) -> list[str]:
    # Join the cgroup first, then exec the server: its threads are sized from the start.
    return ["sh", "-c", f'echo $$ > "{path}/cgroup.procs" && exec "$@"', "sh"]


def test_cpu_quota_read_from_real_cgroup(
    models_dir: Path, tmp_path: Path, cgroup: Callable[[str, float], Path]
) -> None:
    path = cgroup("half", 0.5)
    limits, _ = serve_and_get_limits(models_dir, tmp_path, [], prefix=_in_cgroup(path))
    assert limits["cpu_limit"] == 0.5
    assert limits["cpu_limit_source"] in ("cgroup-v1", "cgroup-v2")
    assert limits["cpu_limit_cgroup"] == str(path)
    # inter-op: a thread per model call that may run, 2 slots and the spares (scheduler.py).
    assert (limits["intra_op_threads"], limits["inter_op_threads"]) == (1, 2 + SPARE_THREADS)
    assert limits["model_call_slots"] == 2


def test_cpu_flag_overrides_cgroup(
    models_dir: Path, tmp_path: Path, cgroup: Callable[[str, float], Path]
) -> None:
    # Under the flag's 1.5 cores, as the test needs, yet not so small that TensorFlow's start
    # crawls: at 0.25 of a core this one server took 15 s, four times its neighbours.
    path = cgroup("three-quarters", 0.75)
    args = ["--cpu-limit", "1.5"]
    limits, log = serve_and_get_limits(models_dir, tmp_path, args, prefix=_in_cgroup(path))
    assert limits["cpu_limit"] == 1.5
    assert limits["cpu_limit_source"] == "flag"
    assert (limits["intra_op_threads"], limits["inter_op_threads"]) == (2, 2 + SPARE_THREADS)
    assert limits["model_call_slots"] == 2
    assert "throttl" in log.lower()  # the flag exceeds the real quota: the log warns


def test_multi_gpu_grant_serves_on_the_first_gpu(models_dir: Path, tmp_path: Path) -> None:
    # What the allocator writes with --allow-multi-gpu: one value per GPU, in index order. The
    # fractions disagree with the MiB caps on purpose: the MiB cap wins, as the contract says.
    inventory = fake_gpu_file(tmp_path, [16384, 81920])
    env = clean_env(
        NVIDIA_VISIBLE_DEVICES=f"{gpu_uuid(0)},{gpu_uuid(1)}",
        SHAREDSERVE_GPU_MEMORY_FRACTION="0.5,0.75",
        SHAREDSERVE_GPU_MEMORY_MIB="4096,40960",
    )
    limits, log = serve_and_get_limits(models_dir, tmp_path, ["--fake-gpus", str(inventory)], env)
    assert (limits["gpu_memory_mib"], limits["gpu_memory_fraction"]) == (4096, 0.25)
    assert limits["gpu_memory_total_mib"] == 16384
    assert "grants 2 GPUs" in log and "the others go unused" in log

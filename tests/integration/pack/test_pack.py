"""``sharedserve pack`` for real: replica processes, v1/v2 cgroups, signals, the targets file.

Needs root and a writable cgroup hierarchy with the cpu controller, as these machines have.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from sharedserve.bench.sampler import process_cpu_seconds
from sharedserve.limits.cpu import read_cpu_throttling
from tests.support.gpus import fake_gpu_file, gpu_uuid
from tests.support.pack import PackRun, alive, cgroups_now

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

GPU_UUID = gpu_uuid(0)
LEFT_IN_THE_SHELL = {
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "10",
    "CUDA_MPS_PIPE_DIRECTORY": "/tmp/no-such-mps",
    "SHAREDSERVE_GPU_MEMORY_MIB": "1",
    "SHAREDSERVE_VGPU_IDS": "GPU-stale::0",
}


@pytest.fixture(scope="module")
def packed(
    models_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[PackRun, dict]]:
    tmp = tmp_path_factory.mktemp("pack")
    gpus = fake_gpu_file(tmp, [16384])
    args = ("--replicas", "3", "--cpu-limit", "0.5", "--fake-gpus", str(gpus))
    # Contract variables left in the user's shell: none may reach a replica beside its grant.
    run = PackRun(tmp, models_dir / "tiny", *args, env=LEFT_IN_THE_SHELL)
    targets = run.wait_targets()
    yield run, targets
    run.stop()


def test_each_replica_has_its_own_cgroup_quota_and_reports_it(packed: tuple[PackRun, dict]) -> None:
    _, body = packed
    targets = body["targets"]
    assert [t["name"] for t in targets] == ["tiny-0", "tiny-1", "tiny-2"]
    assert len({t["cgroup"] for t in targets}) == 3
    for target in targets:
        cgroup = Path(target["cgroup"])
        assert cgroup.parent.name.startswith("sharedserve-pack-")
        if (cgroup / "cpu.max").exists():
            assert (cgroup / "cpu.max").read_text().split() == ["50000", "100000"]
        else:
            quota = int((cgroup / "cpu.cfs_quota_us").read_text())
            period = int((cgroup / "cpu.cfs_period_us").read_text())
            assert quota / period == 0.5
        procs = (cgroup / "cgroup.procs").read_text().split()
        assert str(target["pid"]) in procs
        limits = httpx.get(f"{target['rest']}/sharedserve/v1/limits", timeout=10).json()
        assert limits["cpu_limit"] == 0.5
        assert limits["cpu_limit_source"].startswith("cgroup")
        assert limits["cpu_limit_cgroup"] == target["cgroup"]
        assert limits["intra_op_threads"] == 1


def test_replicas_get_the_env_contract_from_the_simulated_gpu(
    packed: tuple[PackRun, dict],
) -> None:
    run, body = packed
    assert body["simulated_gpus"] is True
    # Even split with 704 MiB per replica kept for the CUDA context: (16384 - 3 x 704) // 3,
    # 4757 MiB, whose share is rounded down to 6 places (contract.fraction_of).
    for target in body["targets"]:
        assert target["gpu"] == GPU_UUID
        assert target["gpu_memory_fraction"] == 0.290344
        limits = httpx.get(f"{target['rest']}/sharedserve/v1/limits", timeout=10).json()
        assert limits["gpu_memory_mib"] == 4757
        assert limits["gpu_memory_source"] == "env"
        assert limits["gpu_memory_enforced"] is False
    assert "SIMULATED GPU 0" in run.log()


def test_a_replica_environment_holds_its_grant_and_nothing_left_in_the_shell(
    packed: tuple[PackRun, dict],
) -> None:
    _, body = packed
    for target in body["targets"]:
        raw = Path(f"/proc/{target['pid']}/environ").read_bytes().split(b"\0")
        env = dict(e.decode().split("=", 1) for e in raw if b"=" in e)
        left = {k: env[k] for k, v in LEFT_IN_THE_SHELL.items() if env.get(k) == v}
        assert not left, f"reached the replica from the packer's shell: {left}"
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env  # no MPS here: not set at all
        assert env["SHAREDSERVE_GPU_MEMORY_MIB"] == "4757"  # the grant's, not the shell's
        assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == GPU_UUID


def test_killed_replica_comes_back_on_its_endpoint(packed: tuple[PackRun, dict]) -> None:
    run, body = packed
    victim = body["targets"][1]
    os.kill(victim["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        current = run.targets()["targets"][1]
        if current["pid"] != victim["pid"]:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"replica not restarted:\n{run.log()}")
    assert current["rest"] == victim["rest"] and current["grpc"] == victim["grpc"]
    status = httpx.get(f"{victim['rest']}/v1/models/tiny", timeout=10).json()
    assert status["model_version_status"][0]["state"] == "AVAILABLE"
    assert str(current["pid"]) in (Path(current["cgroup"]) / "cgroup.procs").read_text().split()
    assert "tiny-1 was killed by SIGKILL; restarting" in run.log()


def test_sigterm_leaves_no_process_cgroup_or_targets_file(
    packed: tuple[PackRun, dict], models_dir: Path
) -> None:
    run, _ = packed
    body = run.targets()  # after any restart, so the pids are current
    pids = [t["pid"] for t in body["targets"]]
    cgroups = [Path(t["cgroup"]) for t in body["targets"]]
    assert all(alive(pid) for pid in pids)
    assert run.stop() == 0, run.log()
    assert not any(alive(pid) for pid in pids)
    assert not any(c.exists() for c in cgroups)
    assert not cgroups[0].parent.exists()
    assert not run.targets_path.exists()


def test_over_subscription_is_refused_before_anything_starts(
    models_dir: Path, tmp_path: Path, fake_gpus: Path
) -> None:
    args = ["--replicas", "3", "--gpu-memory-fraction", "0.4", "--cpu-limit", "0.5"]
    run = PackRun(tmp_path, models_dir / "tiny", *args, "--fake-gpus", str(fake_gpus))
    assert run.process.wait(timeout=60) == 2
    run.stop()
    assert "exceeds GPU 0's 16384 MiB" in run.log()
    assert not (tmp_path / "logs").exists()  # no replica was started
    assert not run.targets_path.exists()
    assert cgroups_now(run.process.pid) == set()


def test_a_replica_that_cannot_start_stops_the_pack_with_its_reason(
    models_dir: Path, tmp_path: Path
) -> None:
    # Accepted by the option parser, refused by the server itself at start-up.
    run = PackRun(
        tmp_path,
        models_dir / "tiny",
        "--replicas",
        "2",
        "--cpu-limit",
        "0.5",
        "--max-body-bytes",
        "0",
    )
    # serve's usage error (exit 2) is pack's too, in serve's one line.
    assert run.process.wait(timeout=120) == 2
    run.stop()
    log = run.log()
    assert re.search(r"error: replica tiny-\d cannot start: --max-body-bytes must be positive", log)
    assert cgroups_now(run.process.pid) == set()


def test_unknown_server_option_is_refused(models_dir: Path, tmp_path: Path) -> None:
    run = PackRun(tmp_path, models_dir / "tiny", "--replicas", "1", "--no-such-flag")
    assert run.process.wait(timeout=60) == 2
    run.stop()
    assert "No such option: --no-such-flag" in run.log()


def test_a_replica_given_up_leaves_the_rest_serving(models_dir: Path, tmp_path: Path) -> None:
    run = PackRun(tmp_path, models_dir / "tiny", "--replicas", "2", "--max-restarts", "0")
    try:
        body = run.wait_targets()
        os.kill(body["targets"][0]["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while len(run.targets()["targets"]) != 1:
            assert time.monotonic() < deadline, run.log()
            time.sleep(0.2)
        survivor = run.targets()["targets"][0]
        assert survivor["name"] == "tiny-1"
        assert httpx.get(f"{survivor['rest']}/v1/models/tiny", timeout=10).status_code == 200
        assert run.process.poll() is None
        assert "giving up after 0 restarts in a row" in run.log()
    finally:
        assert run.stop() == 0, run.log()


def test_max_restarts_counts_restarts_not_exits(models_dir: Path, tmp_path: Path) -> None:
    # The README said "given up after N exits"; it is N restarts, so the (N+1)th exit.
    run = PackRun(tmp_path, models_dir / "tiny", "--replicas", "2", "--max-restarts", "1")

    def pid_of_first() -> int | None:
        found = [t["pid"] for t in run.targets()["targets"] if t["name"] == "tiny-0"]
        return found[0] if found else None

    try:
        run.wait_targets()
        first = pid_of_first()
        assert first is not None
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while (again := pid_of_first()) in (None, first):
            assert time.monotonic() < deadline, run.log()
            time.sleep(0.2)
        os.kill(again, signal.SIGKILL)  # the second exit is the end of it
        while "giving up after 1 restarts in a row" not in run.log():
            assert time.monotonic() < deadline, run.log()
            time.sleep(0.2)
        assert run.log().count("restarting tiny-0") == 1
    finally:
        assert run.stop() == 0, run.log()


def test_quota_is_enforced_on_a_cpu_bound_replica(models_dir: Path, tmp_path: Path) -> None:
    run = PackRun(tmp_path, models_dir / "tiny", "--replicas", "1", "--cpu-limit", "0.25")
    try:
        target = run.wait_targets()["targets"][0]
        url = f"{target['rest']}/v1/models/tiny:predict"
        body = {"instances": [[1.0] * 8] * 64}
        stop_at = time.monotonic() + 6.0

        def hammer() -> int:
            sent = 0
            with httpx.Client(timeout=30) as client:
                while time.monotonic() < stop_at:
                    client.post(url, json=body)
                    sent += 1
            return sent

        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(hammer) for _ in range(6)]
            time.sleep(1.0)  # let the server saturate its quota first
            cgroup = Path(target["cgroup"])
            before = read_cpu_throttling(cgroup)
            cpu0, wall0 = process_cpu_seconds(target["pid"]), time.monotonic()
            time.sleep(4.0)
            cpu1, wall1 = process_cpu_seconds(target["pid"]), time.monotonic()
            after = read_cpu_throttling(cgroup)
            sent = sum(f.result() for f in futures)
        used = (cpu1 - cpu0) / (wall1 - wall0)
        assert sent > 0
        # At most a quarter of a core (CFS accounting lets one period's quota run over a little),
        # and held there by the quota: throttled in the window. No lower bound: on a loaded host
        # the replica may get less than its quota, which says nothing about the quota.
        assert used <= 0.32, f"replica used {used:.3f} cores under a 0.25 quota"
        assert before is not None and after is not None, f"no cpu.stat in {cgroup}"
        assert after.since(before).throttled_periods > 0, (before, after)
    finally:
        assert run.stop() == 0, run.log()

"""Shared servers (``servers:`` in a pack spec), end to end on simulated GPUs: ``pack --dry-run``
prints a shared server, ``pack --spec`` runs each replica of it as one ``serve --model-repository``
process holding its models, and ``bench --spec`` sends each model's load to the processes that
hold it and judges each model against its own objective.

Real processes and cgroups, as tests/integration/pack/test_pack_spec.py: needs root and a writable
cgroup hierarchy with the cpu controller. Two TorchScript ``tiny`` models under two names: the
cheapest models to start, so the tests take a few seconds beyond the servers' start.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.pack import PackRun, alive, leaked_pack_cgroups, pack_cgroups, write_pack_spec
from tests.support.servers import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow, pytest.mark.torch]

SPEC = (
    "servers:\n"
    "  - name: shared\n"
    "    replicas: 2\n"
    "    gpu_memory_mib: 4000\n"
    "    cpu_limit: 0.5\n"
    "    paging: lru\n"
    "    models:\n"
    "      - {model: TORCH/tiny, name: t1, weight: 3, slo_p99_ms: 5000, gpu_memory_mib: 100,\n"
    "         pinned: true, max_inflight: 64}\n"
    "      - {model: TORCH/tiny, name: t2, slo_p99_ms: 0.001}\n"
    "models:\n"
    "  - {model: TORCH/tiny, name: solo, weight: 2}\n"
)


@pytest.fixture(scope="module")
def shared(
    models_dir: Path, torch_models_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[PackRun, Path]]:
    tmp = tmp_path_factory.mktemp("shared")
    spec, gpus = write_pack_spec(tmp, models_dir, SPEC, torch_models_dir)
    run = PackRun(tmp, None, "--spec", str(spec), "--fake-gpus", str(gpus))
    run.wait_targets()
    yield run, tmp
    run.stop()


def test_dry_run_prints_the_shared_server_and_its_models(
    models_dir: Path, torch_models_dir: Path, tmp_path: Path
) -> None:
    spec, gpus = write_pack_spec(tmp_path, models_dir, SPEC, torch_models_dir)
    result = run_cli("pack", "--spec", str(spec), "--fake-gpus", str(gpus), "--dry-run")
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "shared-0" in out and "shared-1" in out and "solo-0" in out
    head = "shared server shared: 2 processes (serve --model-repository), each holding 2 models"
    assert f"{head}, paging lru:" in out
    assert "t1 (" in out and "weight 3, P99 objective 5000 ms, budget 100 MiB, pinned" in out
    assert "max_inflight 64" in out and "t2 (" in out and "budget peak at load" in out
    assert "dry run: nothing was started" in out


def test_each_shared_server_process_serves_every_model_with_its_settings(
    shared: tuple[PackRun, Path],
) -> None:
    run, tmp = shared
    targets = run.targets()["targets"]
    got = [(t["name"], t["model"], t["weight"], t["slo_p99_ms"]) for t in targets]
    assert got == [
        ("shared-0/t1", "t1", 3.0, 5000.0),
        ("shared-0/t2", "t2", 1.0, 0.001),
        ("shared-1/t1", "t1", 3.0, 5000.0),
        ("shared-1/t2", "t2", 1.0, 0.001),
        ("solo-0", "solo", 2.0, None),
    ]
    # One process (addresses, pid, cgroup) per replica of the shared server, holding both models.
    for replica in ("shared-0", "shared-1"):
        pair = [t for t in targets if t["name"].startswith(f"{replica}/")]
        assert len({(t["rest"], t["grpc"], t["pid"], t["cgroup"]) for t in pair}) == 1
    assert len({t["pid"] for t in targets}) == 3
    for t in targets:
        status = httpx.get(f"{t['rest']}/v1/models/{t['model']}", timeout=10).json()
        assert status["model_version_status"][0]["state"] == "AVAILABLE"
    # The shared server's settings reached each process through its models' files.
    limits = httpx.get(f"{targets[0]['rest']}/sharedserve/v1/limits", timeout=10).json()
    assert limits["memory"]["paging"] == "lru" and limits["memory"]["capacity_mib"] == 4000
    t1, t2 = limits["models"]["t1"], limits["models"]["t2"]
    assert (t1["weight"], t1["max_inflight"]) == (3.0, 64)
    assert t1["versions"]["1"]["budget_mib"] == 100 and t1["versions"]["1"]["pinned"] is True
    assert t2["weight"] == 1.0 and t2["versions"]["1"]["pinned"] is False
    (repository,) = (tmp / "logs").glob("shared-repository-*")
    assert sorted(p.name for p in repository.iterdir()) == ["t1", "t2"]


def test_stop_removes_the_repository_and_every_process(shared: tuple[PackRun, Path]) -> None:
    run, tmp = shared
    pids = {t["pid"] for t in run.targets()["targets"]}
    assert run.stop() == 0
    assert not any(alive(pid) for pid in pids)
    assert list((tmp / "logs").glob("shared-repository-*")) == []
    assert not run.targets_path.exists()


def test_bench_spec_sends_each_models_load_to_the_processes_holding_it(
    models_dir: Path, torch_models_dir: Path, tmp_path: Path
) -> None:
    spec, gpus = write_pack_spec(tmp_path, models_dir, SPEC, torch_models_dir)
    out = tmp_path / "report"
    before = pack_cgroups()
    result = run_cli(
        "bench", "--spec", str(spec), "--scales", "1", "--fake-gpus", str(gpus),
        "--pattern", "parallel", "--concurrency", "6", "--duration", "2", "--warmup", "1",
        "--stability-windows", "1", "--slo-p99-ms", "4000", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (row,) = json.loads((out / "report.json").read_text())["rows"]
    # Three processes: the shared server's two and solo's one.
    assert row["density"] == 3 and row["errors"] == 0
    models = row["models"]
    assert list(models) == ["t1", "t2", "solo"]
    assert [m["replicas"] for m in models.values()] == [2, 2, 1]
    assert all(m["requests"] > 0 for m in models.values())
    assert [m["slo_p99_ms"] for m in models.values()] == [5000.0, 0.001, 4000.0]
    assert [m["slo_met"] for m in models.values()] == [True, False, True]
    # Users split by weight, 3:1:2 of 6, each model's over the processes holding it.
    loadgen = json.loads((out / "loadgen" / "scale-1-spec.json").read_text())
    users = {t["name"]: t["users"] for t in loadgen["targets"]}
    assert users == {
        "shared-0/t1": 2, "shared-1/t1": 1, "shared-0/t2": 1, "shared-1/t2": 1, "solo-0": 2,
    }  # fmt: skip
    rest = {t["name"]: t["rest"] for t in loadgen["targets"]}
    assert rest["shared-0/t1"] == rest["shared-0/t2"] != rest["shared-1/t1"]
    assert leaked_pack_cgroups(before) == set()


def test_a_model_a_shared_server_cannot_load_stops_pack_at_once_saying_why(
    models_dir: Path, torch_models_dir: Path, tmp_path: Path
) -> None:
    # The server serves its other models on, so it never exits: pack must read the failure
    # from the model's status rather than wait out --start-timeout.
    broken = tmp_path / "broken"
    shutil.copytree(torch_models_dir / "tiny", broken)
    (broken / "1" / "model.pt").write_bytes(b"not a TorchScript archive")
    body = (
        "servers:\n"
        "  - name: shared\n"
        "    replicas: 1\n"
        "    cpu_limit: 0.5\n"
        "    models:\n"
        "      - {model: TORCH/tiny, name: t1}\n"
        f"      - {{model: {broken}, name: broken}}\n"
    )
    spec, gpus = write_pack_spec(tmp_path, models_dir, body, torch_models_dir)
    before = pack_cgroups()
    result = run_cli(
        "pack", "--spec", str(spec), "--fake-gpus", str(gpus), "--start-timeout", "3600",
        timeout=240,
    )  # fmt: skip
    assert result.returncode != 0
    assert "replica shared-0: model 'broken' failed to load" in result.stderr
    assert "could not load" in result.stderr  # the server's own reason, passed on
    assert leaked_pack_cgroups(before) == set()

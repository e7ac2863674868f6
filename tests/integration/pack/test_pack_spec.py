"""``sharedserve pack --spec``: a mix of models on simulated GPUs, supervised per replica.

Real processes and cgroups, as tests/integration/pack/test_pack.py; needs root and a writable cgroup
hierarchy with the cpu controller.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cli import invoke
from tests.support.pack import PackRun, alive, cgroups_now, write_pack_spec

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow, pytest.mark.torch]

# Three models of two frameworks: TensorFlow tiny (as "a") and edge, TorchScript tiny.
MIX = (
    "cpu_limit: 0.5\nmodels:\n"
    "  - {model: MODELS/tiny, name: a, replicas: 2, weight: 3, slo_p99_ms: 50}\n"
    "  - {model: MODELS/edge, replicas: 1}\n"
    "  - {model: TORCH/tiny, name: tiny_torch, replicas: 1, weight: 2, slo_p99_ms: 80}\n"
)


@pytest.fixture(scope="module")
def mix(
    models_dir: Path, torch_models_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PackRun]:
    tmp = tmp_path_factory.mktemp("mix")
    spec, gpus = write_pack_spec(tmp, models_dir, MIX, torch_models_dir)
    run = PackRun(tmp, None, "--spec", str(spec), "--fake-gpus", str(gpus), "--policy", "spread")
    run.wait_targets()
    yield run
    run.stop()


def test_targets_list_every_replica_with_model_weight_and_slo(mix: PackRun) -> None:
    targets = mix.targets()["targets"]
    got = [(t["name"], t["model"], t["weight"], t["slo_p99_ms"]) for t in targets]
    assert got == [
        ("a-0", "a", 3.0, 50.0),
        ("a-1", "a", 3.0, 50.0),
        ("edge-0", "edge", 1.0, None),
        ("tiny_torch-0", "tiny_torch", 2.0, 80.0),
    ]
    # spread: the two replicas of a on different GPUs; each replica its own cgroup.
    assert targets[0]["gpu"] != targets[1]["gpu"]
    assert len({t["cgroup"] for t in targets}) == 4
    for t in targets:
        status = httpx.get(f"{t['rest']}/v1/models/{t['model']}", timeout=10).json()
        assert status["model_version_status"][0]["state"] == "AVAILABLE"
    assert "4 replicas of 3 models:" in mix.log()


def test_a_killed_replica_of_one_model_comes_back_and_the_others_keep_serving(
    mix: PackRun,
) -> None:
    before = {t["name"]: t for t in mix.targets()["targets"]}
    os.kill(before["a-1"]["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 90
    while True:
        now = {t["name"]: t for t in mix.targets()["targets"]}
        if now.get("a-1", before["a-1"])["pid"] != before["a-1"]["pid"]:
            break
        for name in ("a-0", "edge-0", "tiny_torch-0"):  # untouched, and serving meanwhile
            assert now[name]["pid"] == before[name]["pid"]
            model = now[name]["model"]
            assert (
                httpx.get(f"{now[name]['rest']}/v1/models/{model}", timeout=10).status_code == 200
            )
        assert time.monotonic() < deadline, mix.log()
        time.sleep(0.2)
    assert now["a-1"]["rest"] == before["a-1"]["rest"]
    assert "a-1 was killed by SIGKILL; restarting" in mix.log()


def test_sigterm_leaves_no_process_or_cgroup(mix: PackRun) -> None:
    targets = mix.targets()["targets"]
    pids = [t["pid"] for t in targets]
    cgroups = [Path(t["cgroup"]) for t in targets]
    assert mix.stop() == 0, mix.log()
    assert not any(alive(pid) for pid in pids)
    assert not any(c.exists() for c in cgroups)
    assert not mix.targets_path.exists()


def test_a_spec_that_cannot_fit_is_refused_with_a_table(models_dir: Path, tmp_path: Path) -> None:
    spec, gpus = write_pack_spec(
        tmp_path,
        models_dir,
        "cpu_limit: 0.5\ngpu: 0\nmodels:\n"
        "  - {model: MODELS/tiny, replicas: 2, gpu_memory_mib: 7500}\n"
        "  - {model: MODELS/edge, replicas: 2}\n",
    )
    run = PackRun(tmp_path, None, "--spec", str(spec), "--fake-gpus", str(gpus))
    assert run.process.wait(timeout=60) == 2
    run.stop()
    log = run.log()
    assert "4 replicas do not fit" in log and "exceeds GPU 0's 16384 MiB" in log
    assert "entry" in log and "cap each MiB" in log
    assert not (tmp_path / "logs").exists()
    assert cgroups_now(run.process.pid) == set()  # its own: other tests' packs may run now


def test_a_model_path_not_there_names_its_entry(models_dir: Path, tmp_path: Path) -> None:
    # It said only "model directory ... does not exist": in a spec of many entries, which?
    spec, gpus = write_pack_spec(
        tmp_path,
        models_dir,
        "models:\n  - {model: MODELS/tiny}\n  - {model: MODELS/tinny, name: b}\n"
        "servers:\n  - name: shared\n    models: [{model: MODELS/tiny, name: t2}, "
        "{model: MODELS/gone}]\n",
    )
    result = invoke("pack", "--spec", str(spec), "--fake-gpus", str(gpus), "--dry-run")
    assert result.exit_code == 2, result.output
    # Shared servers come first, as pack starts them.
    assert f"error: {spec}: servers[0] (shared): models[1]: model: model directory " in (
        result.stderr
    )
    spec.write_text(spec.read_text().split("servers:")[0])
    result = invoke("pack", "--spec", str(spec), "--fake-gpus", str(gpus), "--dry-run")
    assert result.exit_code == 2, result.output
    assert f"error: {spec}: models[1] (b): model: model directory " in result.stderr
    assert "tinny does not exist" in result.stderr

"""The GPU proof kit cannot rot: every stage's dry run, through run.sh, as on the GPU machine.

The dry runs use a simulated GPU and small settings, in real processes (servers, Locust, the
overhead script) with TensorFlow hidden, since the GPU machine has none. What a dry run must
show: every check a simulated GPU can answer passes, every one it cannot is "not applicable"
(never passed), and no GPU figure is made up.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import without_tensorflow

KIT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"


def run_kit(*args: str, env: dict[str, str] | None = None, kit: Path = KIT) -> Any:
    env = {**(env or without_tensorflow(Path("/nonexistent"))), "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(kit / "run.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


def stage_names(kit: Path = KIT) -> list[str]:
    listed = run_kit("--list", kit=kit).stdout.splitlines()
    return [line.split()[0] for line in listed]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("kit-out")
    env = without_tensorflow(tmp_path_factory.mktemp("no-tensorflow"))
    env["KIT_WORK"] = str(tmp_path_factory.mktemp("kit-work"))
    return out, run_kit("--dry-run", "all", str(out), env=env)


@pytest.mark.slow
@pytest.mark.tensorflow
@pytest.mark.torch
@pytest.mark.timeout(600)
def test_every_stage_dry_runs_and_passes(dry_run: tuple[Path, Any]) -> None:
    out, done = dry_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    names = stage_names()
    assert names[:2] == ["caps", "context"]
    assert set(names) >= {"sweep", "overhead", "mps", "mix", "profile", "multimodel", "onnxcap"}
    for name in names:
        doc = json.loads((out / f"{name}.json").read_text())
        assert doc["stage"] == name and doc["dry_run"] is True
        assert doc["status"] == "pass", doc["checks"]
        env = doc["environment"]
        assert env["simulated_gpu"] is True
        # No GPU figure is made up: no device, driver or CUDA from a JSON file.
        assert env["device"] is None and env["driver"] is None and env["cuda_driver"] is None
        assert env["torch"] and env["command"].startswith("benchmarks/gpu/run.sh --dry-run")
        oks = [c["ok"] for c in doc["checks"]]
        assert True in oks and False not in oks
        assert None in oks  # the GPU-only checks are not applicable, never passed
        text = (out / f"{name}.md").read_text()
        assert "(DRY RUN)" in text and "**Status: pass**" in text


def check_profile_stage(profile: dict[str, Any]) -> None:
    """The profile stage's dry run: a CPU profile of tiny, a plan with a shared server, and that
    server's GPU verified."""
    assert list(profile["profiles"]) == ["tiny"]
    for row in profile["profiles"]["tiny"]:
        assert row["qps"] > 0 and row["gpu_util_mean"] is None and row["gpu_mem_mib"] is None
    plan = profile["plan"]
    assert plan["gpu_count"] >= plan["lower_bound_gpus"] >= 1 and plan["saving_factor"] >= 1
    tiny, *cold = plan["models"]
    assert tiny["name"] == "tiny" and [m["name"] for m in cold] == ["tiny-cold-a", "tiny-cold-b"]
    # The cold copies share a server, as one process a replica, and verify ran its GPU's share.
    (server,) = plan["servers"]
    assert {m["server"] for m in cold} == {server["name"]} and len(server["models"]) >= 2
    assert all(m["serving"] == "shared" for m in cold)
    # A CPU profile: memory from the model's files, time from throughput, no NVML figure, and
    # the plan says so (naming the profile by its path in the kit's work, not this machine's).
    assert tiny["gpu_memory_source"] == "weights" and tiny["nvml_memory_mib"] is None
    assert tiny["busy_source"] == "throughput" and tiny["replicas"] >= 2
    assert any("(profiles/tiny) was measured without a GPU" in w for w in plan["warnings"])
    verify = profile["verify"]
    assert verify["held"] is True and verify["gpus"] is None and verify["gpu_util_mean"] is None
    assert verify["spec"] == plan["pack_specs"][server["gpus"][0]]
    assert {m["model"] for m in verify["models"]} >= set(server["models"])
    for line in verify["models"]:
        assert line["measured_qps"] > 0 and line["errors"] == 0
        assert line["predicted_p99_ms"] > 0 and line["measured_p99_ms"] > 0
    # The load generator ran on a CPU of its own, the servers on the other.
    assert verify["server_cpus"] and verify["loadgen_cpus"]
    assert verify["server_cpus"] != verify["loadgen_cpus"]
    # One correction round: every verified model corrected by what verify measured, and the
    # corrected plan verified again; unless the verify, on this CPU beside the whole test
    # suite, was not trustworthy, which size refuses to correct from (and the stage says so).
    if verify["trustworthy"] is False:
        assert "corrected" not in profile and verify["verdict"].startswith("not trustworthy")
        return
    corrected = profile["corrected"]
    assert set(corrected["corrections"]) >= {m["model"] for m in verify["models"]}
    by_model = {m["model"]: m for m in verify["models"]}
    for name, factors in corrected["corrections"].items():
        line = by_model[name]
        assert factors["p99_factor"] == pytest.approx(
            line["measured_p99_ms"] / line["predicted_p99_ms"], rel=0.02
        )
    assert corrected["verify"]["models"] and corrected["verify"]["held"] in (True, False)


def check_onnxcap_stage(onnxcap: dict[str, Any]) -> None:
    """The onnxcap stage's dry run: on onnxruntime's CPU provider, whose arena holds the same
    budget, big's batch past it gets 503 with the runtime's error while neighbour answers."""
    assert onnxcap["model"] == "tiny" and onnxcap["budget_mib"] == 2
    *fits, past = onnxcap["attempts"]
    assert [t["status"] for t in fits] == [200] * len(fits)
    assert past["status"] == 503 and past["error"].startswith("out of memory running the model")
    assert set(onnxcap["neighbour_statuses"]) == {"200"}
    assert onnxcap["big_after_batch_1"] == 200
    assert onnxcap["nvml_after_load_mib"] is None and onnxcap["nvml_peak_mib"] is None


@pytest.mark.slow
@pytest.mark.tensorflow
@pytest.mark.torch
@pytest.mark.timeout(600)
def test_dry_run_figures(dry_run: tuple[Path, Any]) -> None:
    out, _ = dry_run
    results = {n: json.loads((out / f"{n}.json").read_text())["results"] for n in stage_names()}
    caps = results["caps"]
    assert caps["neighbour_codes"].get("OK", 0) > 0 and caps["a_after_batch_1"] == "OK"
    assert all(v is None for v in caps["nvml_peak_mib"].values())
    assert results["context"]["suggested_context_reserve_mib"] is None
    for run in results["sweep"]["runs"]:
        for row in run["rows"]:
            assert row["requests"] > 0 and row["errors"] == 0
            assert row["gpu_util_mean"] is None and row["gpu_mem_used_mib"] is None
    paths = {c["path"] for c in results["overhead"]["cells"]}
    assert paths == {"in-process", "bare gRPC", "REST", "OIP REST binary", "gRPC"}
    assert results["overhead"]["framework"] == "torch"
    assert results["overhead"]["ceiling"]["tiny"]["rows_per_s"] > 0
    mix = results["mix"]
    assert [r["scale"] for r in mix["rows"]] == [1, 2]
    for row in mix["rows"]:
        assert list(row["models"]) == ["tiny", "mobilenet_v2"] and row["errors"] == 0
        assert row["gpus"] is None and row["gpu_util_mean"] is None
        assert all(m["gpu_mem_mib"] is None for m in row["models"].values())
    check_profile_stage(results["profile"])
    multimodel = results["multimodel"]
    for side in ("one process", "separate processes"):
        rows = multimodel["density"]["tiny"][side]
        assert [r["models"] for r in rows] == [1, 4]
        assert [r["processes"] for r in rows] == ([1, 1] if side == "one process" else [1, 4])
        for row in rows:  # host memory is measured on any host; NVML's only on a GPU
            assert row["errors"] == 0 and row["qps"] > 0 and row["host_pss_mib"] > 0
            assert row["gpu_mib"] is None and row["added_gpu_mib_per_model"] is None
    # ONNX and torch.export beside TorchScript, measured alike (ONNX on onnxruntime's CPU here).
    for kind in ("tiny (onnx)", "tiny (export)"):
        for side, rows in multimodel["density"][kind].items():
            assert [r["models"] for r in rows] == [1, 2], (kind, side)
            for row in rows:
                assert row["errors"] == 0 and row["qps"] > 0 and row["host_pss_mib"] > 0
                assert row["gpu_mib"] is None
    check_onnxcap_stage(results["onnxcap"])
    paging = multimodel["paging"]
    # Round-robin over 4 models of which 2 fit: every request after the first round paged its
    # model in (on a CPU host the device copy is a no-op, the accounting is not).
    assert paging["errors"] == 0 and paging["page_ins"]["reload"] == 0
    assert paging["page_ins"]["device_copy"] >= paging["paged_requests"] > 0
    assert paging["states"] == {"resident": 2, "paged_out": 2}
    assert paging["memory"]["held_mib"] <= paging["memory"]["capacity_mib"] == paging["cap_mib"]
    mps = results["mps"]["sides"]
    assert [r["density"] for r in mps["mps"]] == [2]
    assert mps["mps"][0]["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    with tarfile.open(out / "logs.tar.gz") as logs:
        members = logs.getnames()
    assert any(m.endswith(".log") for m in members)
    assert not any(m.endswith(".pt") for m in members)


@pytest.mark.slow
@pytest.mark.tensorflow
@pytest.mark.torch
@pytest.mark.timeout(600)
def test_a_finished_stage_is_not_run_again(dry_run: tuple[Path, Any]) -> None:
    out, _ = dry_run
    again = run_kit("--dry-run", "caps,sweep", str(out))
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("done already") == 2


def test_plan_packs_stages_into_few_commands() -> None:
    plan = run_kit("--plan").stdout.strip().splitlines()
    minutes = {
        line.split()[0]: int(line.split("(")[1].split()[0])
        for line in run_kit("--list").stdout.splitlines()
    }
    planned = []
    for line in plan:
        stages = re.search(r"run\.sh (\S+) ", line).group(1).split(",")  # type: ignore[union-attr]
        assert len(stages) <= 3  # 2 files each and the logs: within 8 returned files
        assert sum(minutes[s] for s in stages) <= 9
        planned += stages
    assert sorted(planned) == sorted(minutes)
    assert len(plan) < len(minutes)


def test_unknown_stage_and_usage() -> None:
    done = run_kit("caps,warp", "/tmp/unused")
    assert done.returncode == 2 and "no stage 'warp'" in done.stderr
    assert run_kit("caps").returncode == 2
    assert run_kit("--bogus").returncode == 2


STAGE = '''"""A stage dropped in."""
# minutes: {minutes}
# order: {order}
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
(out / "{name}.json").write_text(json.dumps({{"status": "pass"}}))
(out / "{name}.md").write_text("# {name}")
'''


def test_a_dropped_in_stage_joins_and_the_budget_splits_commands(tmp_path: Path) -> None:
    kit = tmp_path / "benchmarks" / "gpu"
    (kit / "stages").mkdir(parents=True)
    shutil.copy(KIT / "run.sh", kit / "run.sh")
    for name, order, minutes in (("second", 20, 4), ("first", 10, 4)):
        text = STAGE.format(name=name, order=order, minutes=minutes)
        (kit / "stages" / f"{name}.py").write_text(text)
    assert stage_names(kit) == ["first", "second"]
    out = tmp_path / "out"
    env = {**without_tensorflow(tmp_path / "hide"), "KIT_BUDGET_S": "200"}
    done = run_kit("all", str(out), env=env, kit=kit)
    # The first stage runs whatever its length; the second's 4 minutes do not fit what is left
    # of 200 s, so it waits for the next command.
    assert done.returncode == 3, done.stdout + done.stderr
    assert (out / "first.json").exists() and not (out / "second.json").exists()
    done = run_kit("all", str(out), env=env, kit=kit)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "second.json").exists()


SCRATCH_STAGE = '''"""A stage that leaves a log in its scratch folder."""
# minutes: 1
# order: 10
import json, sys
from pathlib import Path
out, work = Path(sys.argv[1]), Path(sys.argv[sys.argv.index("--work") + 1])
work.mkdir(parents=True)
(work / "replica.log").write_text("a replica's log")
(out / "scratch.json").write_text(json.dumps({"status": "pass"}))
(out / "scratch.md").write_text("# scratch")
'''


def test_the_kit_leaves_no_scratch_folder_behind(tmp_path: Path) -> None:
    kit = tmp_path / "benchmarks" / "gpu"
    (kit / "stages").mkdir(parents=True)
    shutil.copy(KIT / "run.sh", kit / "run.sh")
    (kit / "stages" / "scratch.py").write_text(SCRATCH_STAGE)
    temp = tmp_path / "tmp"
    temp.mkdir()
    out = tmp_path / "out"
    done = run_kit(
        "all", str(out), env=without_tensorflow(tmp_path / "hide", TMPDIR=str(temp)), kit=kit
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The log is kept where the results are; the scratch folder run.sh made is gone.
    with tarfile.open(out / "logs.tar.gz") as logs:
        assert "scratch/replica.log" in logs.getnames()
    assert not list(temp.iterdir())

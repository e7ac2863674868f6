"""``sharedserve size --fleet``: a plan from bench reports, and a GPU's pack spec that pack runs.

The profiles are report.json files in bench's format, built with bench's own row code (a run of
real bench would measure this CPU, which is not what sizing a GPU fleet is about); the models
are real, and ``pack --spec`` runs a GPU's share of the plan for real on a simulated GPU of the
fleet's size.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.summary import Pattern, Samples, TargetResult, build_row
from sharedserve.pack.spec import load_spec
from sharedserve.size.profile import load_profiles
from tests.support.cli import invoke
from tests.support.gpus import fake_gpu_file
from tests.support.pack import PackRun, alive
from tests.support.servers import SHAREDSERVE, clean_env, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

GPU = {"name": "NVIDIA L4", "memory_mib": 23034}


def sweep(model: str, points: list[tuple[int, float, float, int]]) -> dict[str, Any]:
    """A density sweep of ``model``: (density, QPS per replica, p99 ms, NVML MiB) per row."""
    rows = []
    for density, qps, p99, mib in points:
        targets = []
        for i in range(density):
            hist = LatencyHistogram()
            for _ in range(int(qps * 10)):
                hist.record(round(p99 * 1000))
            targets.append(TargetResult(f"{model}-{i}", int(qps * 10), 0, 0, hist, model=model,
                                        gpu_mem_mib=mib, cpu_limit=0.5))  # fmt: skip
        samples = Samples(gpu_util_mean=10.0 * density, gpu_util_max=50.0, gpu_mem_used_mib=None,
                          cpu_util_mean=0.4 * density)  # fmt: skip
        rows.append(build_row(density=density, pattern=Pattern.PARALLEL, window_s=10.0,
                              targets=targets, samples=samples, loadgen_cpu_util=0.2,
                              slo_p99_ms=None, gpu_name=GPU["name"]))  # fmt: skip
    return {"rows": rows, "environment": {"gpus": [GPU]}}


def check_manifests(plan: dict[str, Any], out: Path) -> None:
    """The plan's manifests: a Deployment per model, its planned replicas as pods, vGPUs that
    hold its memory and reserve, under a cut of the GPU that holds every planned GPU's share."""
    kube = plan["kubernetes"]
    objects = [o for o in yaml.safe_load_all((out / "k8s.yaml").read_text()) if o]
    deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    assert set(deployments) == {"tiny", "edge"}
    assert deployments["tiny"]["spec"]["replicas"] == 5
    vgpus = {}
    for name, d in deployments.items():
        (container,) = d["spec"]["template"]["spec"]["containers"]
        vgpus[name] = int(container["resources"]["limits"]["sharedserve.io/vgpu"])
        planned = 700 if name == "tiny" else 900  # NVML MiB, and the reserve beside it
        assert vgpus[name] * kube["vgpu_memory_mib"] >= planned + 512
    for gpu in plan["gpus"]:
        assert sum(vgpus[r["model"]] for r in gpu["replicas"]) <= kube["vgpus_per_gpu"]
    assert kube["vgpus"] == sum(vgpus[n] * d["spec"]["replicas"] for n, d in deployments.items())
    assert f"`{kube['allocator_flag']}`" in (out / "plan.md").read_text()


def test_size_plans_a_fleet_and_a_gpus_share_runs_under_pack(
    models_dir: Path, tmp_path: Path
) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "tiny.json").write_text(
        json.dumps(sweep("tiny", [(1, 400, 5, 700), (4, 300, 12, 700)]))
    )
    (profiles / "edge.json").write_text(
        json.dumps(sweep("edge", [(1, 100, 20, 900), (2, 90, 40, 900)]))
    )
    rel = os.path.relpath(models_dir, tmp_path)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "gpu: {name: L4, memory_mib: 23034, price_per_hour: 0.8}\n"
        "node: {gpus: 4, cpu_cores: 32}\n"
        "models:\n"
        f"  - {{name: tiny, profile: profiles/tiny.json, peak_qps: 1500, slo_p99_ms: 50,\n"
        f"      model: {rel}/tiny}}\n"
        f"  - {{name: edge, profile: profiles/edge.json, peak_qps: 100, slo_p99_ms: 30,\n"
        f"      model: {rel}/edge}}\n"
    )
    out = tmp_path / "plan"
    result = run_cli("size", "--fleet", str(fleet), "--out", str(out))
    assert result.returncode == 0, result.stderr
    plan = json.loads((out / "plan.json").read_text())
    tiny, edge = plan["models"]
    # tiny: 400 req/s per replica met 50 ms (alone); 80% of it is 320: 1500 / 320 -> 5. It was
    # measured up to 4 to a GPU, and no GPU holds more.
    assert (tiny["replicas"], tiny["capacity_qps_per_replica"], tiny["measured_at_density"]) == (
        5, 400.0, 1,
    )  # fmt: skip
    assert tiny["max_density"] == 4
    # edge: only density 1 met 30 ms (100 req/s): 100 / 80 -> 2 replicas, never more than 2 a GPU.
    assert (edge["replicas"], edge["max_density"]) == (2, 2)
    assert tiny["gpu_memory_source"] == "nvml" and tiny["gpu_memory_mib"] == 700
    # Every replica placed once, within memory and the densities measured.
    placed = [r["model"] for g in plan["gpus"] for r in g["replicas"]]
    assert sorted(placed) == ["edge"] * 2 + ["tiny"] * 5
    for gpu in plan["gpus"]:
        assert gpu["memory_used_mib"] <= 23034 and gpu["busy_share"] <= 0.8 + 1e-9
        assert len(gpu["replicas"]) <= gpu["replica_limit"]
    assert len(set(edge["gpus"])) == 2  # its two replicas on different GPUs
    assert plan["gpu_count"] >= plan["lower_bound_gpus"] >= 1
    assert plan["baseline_gpu_count"] == 7
    assert plan["cost_per_month"] == round(plan["gpu_count"] * 730 * 0.8, 2)
    assert plan["saving_factor"] == round(7 / plan["gpu_count"], 3)
    # The profiles' GPU is an NVIDIA L4: the fleet's L4, no warning.
    assert plan["warnings"] == []
    assert f"{plan['gpu_count']} GPUs" in result.stdout
    assert "saving factor" in (out / "plan.html").read_text()
    markdown = (out / "plan.md").read_text()
    assert "| one replica per GPU | 7 |" in markdown and "gpu-000.yaml" in markdown
    check_manifests(plan, out)
    # GPU 0's share as a pack spec, loaded by pack's own loader and run by pack.
    assert plan["pack_specs"] == [f"gpu-{i:03d}.yaml" for i in range(plan["gpu_count"])]
    spec_path = out / "gpu-000.yaml"
    spec = load_spec(spec_path)
    held = {r["model"] for r in plan["gpus"][0]["replicas"]}
    assert {e.name for e in spec.entries} == held
    assert {e.cpu_limit_cores for e in spec.entries} == {0.5}  # as the profiles were measured
    assert all(e.model_dir.resolve().parent == models_dir.resolve() for e in spec.entries)
    gpus = fake_gpu_file(tmp_path, [23034], name="L4")
    run = PackRun(tmp_path / "pack", None, "--spec", str(spec_path), "--fake-gpus", str(gpus))
    try:
        targets = run.wait_targets()["targets"]
        assert len(targets) == len(plan["gpus"][0]["replicas"])
        assert len({t["gpu"] for t in targets}) == 1  # one GPU's share, on one GPU
    finally:
        assert run.stop() == 0, run.log()


def test_a_fleet_whose_profile_never_met_the_objective_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tiny.json").write_text(json.dumps(sweep("tiny", [(1, 400, 60, 700)])))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "gpu: {name: L4, memory_mib: 23034, price_per_hour: 0.8}\nnode: {gpus: 4, cpu_cores: 32}\n"
        "models: [{name: tiny, profile: tiny.json, peak_qps: 10, slo_p99_ms: 50}]\n"
    )
    result = invoke("size", "--fleet", str(fleet), "--out", str(tmp_path / "plan"))
    assert result.exit_code == 2, result.output
    assert "model tiny: its profile" in result.stderr and "never met p99 <= 50 ms" in result.stderr
    assert not (tmp_path / "plan").exists()


def test_profile_two_models_size_them_and_verify_a_gpu_on_this_cpu(
    models_dir: Path, tmp_path: Path
) -> None:
    gpus = fake_gpu_file(tmp_path, [23034], name="L4")
    # One profile serves both models of the fleet: profiling edge as well went down the same
    # path again (a pack per density and pattern) for half a minute, and the plan still sizes
    # edge from its own files on disk.
    result = run_cli(
        "profile", "--model", str(models_dir / "tiny"), "--out", str(tmp_path / "tiny"),
        # One density (two replicas sharing the GPU) per sweep: each density starts a pack.
        "--densities", "2", "--duration", "1.5", "--warmup", "0.5", "--stability-windows", "1",
        "--concurrency", "2", "--cpu-limit", "0.5", "--fake-gpus", str(gpus),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # The two sweeps, and an open-loop row of one replica: what size takes service times from.
    for pattern in ("sequential", "parallel", "poisson"):
        assert (tmp_path / "tiny" / pattern / "report.json").is_file()
    (row,) = json.loads((tmp_path / "tiny" / "poisson" / "report.json").read_text())["rows"]
    assert row["pattern"] == "poisson" and row["density"] == 1
    # Before any sweep, the whole profile's estimate from its settings (test_bench_estimate has
    # its arithmetic); then a line per step with what is left of it (not a terminal: no bar).
    # Unjudged by design, and said so.
    lines = result.stderr.splitlines()
    (estimate,) = [ln for ln in lines if ln.startswith("profile tiny: estimate: about ")]
    assert " for 2 sweeps of 1 density and an open-loop row (each 0.5 s warm-up + 1.5 s " in (
        estimate
    )
    assert "each replica, 5 in all" in estimate, estimate  # 2 + 2 + the open-loop row's 1
    total = estimate.removeprefix("profile tiny: estimate: about ").split(" for ")[0]
    steps = [
        f"sequential density 2 (step 1 of 3): about {total} left",
        "parallel density 2 (step 2 of 3): about ",
        "poisson density 1 (step 3 of 3): about ",
    ]
    at = [next(i for i, ln in enumerate(lines) if ln.startswith(s)) for s in steps]
    assert at == sorted(at) and lines.index(estimate) < at[0], result.stderr
    unjudged = "objective: none given; measured, not judged (size judges each density against "
    assert result.stdout.count(unjudged) == 3, result.stdout
    rel = os.path.relpath(models_dir, tmp_path)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "gpu: {name: L4, memory_mib: 23034, price_per_hour: 0.8}\nnode: {gpus: 4, cpu_cores: 32}\n"
        "models:\n"
        f"  - {{name: tiny, profile: tiny, peak_qps: 40, slo_p99_ms: 1000,\n"
        f"      model: {rel}/tiny}}\n"
        f"  - {{name: edge, profile: tiny, profile_model: tiny, peak_qps: 40, slo_p99_ms: 1000,\n"
        f"      model: {rel}/edge}}\n"
    )
    result = run_cli("size", "--fleet", str(fleet), "--out", str(tmp_path / "plan"))
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    # CPU profiles (simulated GPUs): memory from the files on disk, time from throughput, and
    # the plan says the profiles are not a GPU's.
    for model in plan["models"]:
        assert model["gpu_memory_source"] == "weights" and model["busy_source"] == "throughput"
        assert model["cpu_limit"] == 0.5 and model["replicas"] == 2
    assert any("without a GPU" in w for w in plan["warnings"])
    spec = tmp_path / "plan" / "gpu-000.yaml"
    # Twice on the same servers: whether the measurement repeats.
    result = run_cli("size", "--verify", str(spec), "--duration", "2", "--warmup", "0.5",
                     "--repeat", "2", "--fake-gpus", str(gpus))  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    verified = json.loads((tmp_path / "plan" / "verify-gpu-000" / "verify.json").read_text())
    _check_repeated(tmp_path / "plan", verified, result.stdout)
    planned = {m["name"]: m["rate_per_replica"] for m in plan["models"]}
    for line in verified["models"]:
        rate = planned[line["model"]] * line["replicas"]
        assert line["planned_qps"] == pytest.approx(rate, rel=1e-3)
        assert 0.6 * rate <= line["measured_qps"] <= 1.4 * rate, line
        assert line["predicted_p99_ms"] > 0 and line["measured_p99_ms"] > 0
        assert line["slo_p99_ms"] == 1000.0 and line["errors"] == 0
        # QPS, p50 and p99, each predicted against measured with its error.
        for figure in ("qps", "p50", "p99"):
            assert line[f"{figure}_error"] is not None, (figure, line)
        assert line["predicted_p50_ms"] > 0 and line["measured_p50_ms"] > 0
    assert verified["held"] == all(m["slo_met"] for m in verified["models"])
    # Over the protocol the profile was measured with, and saying so.
    assert verified["protocol"] == "rest" and "tiny/" in verified["protocol_source"]
    conditions = verified["conditions"]
    assert conditions["cores"] >= 1 and conditions["load_before"] is not None
    out = " ".join(result.stdout.split())
    for said in ("p50 pred", "p99 meas", "negative means the plan was optimistic",
                 "Measurement:", "load average", "next:"):  # fmt: skip
        assert said in out, said
    # Two seconds on a busy test host: whatever it flags is printed, each with its marker.
    for flag in verified["flags"]:
        assert f"(!) {flag.split(':')[0]}" in out
    assert result.returncode == (0 if verified["held"] else 1)


def _check_repeated(plan: Path, verified: dict[str, Any], stdout: str) -> None:
    """``--repeat 2``: two rows of one pack, each model's two runs, and the plan's pages show it."""
    report = json.loads((plan / "verify-gpu-000" / "report.json").read_text())
    assert verified["repeat"] == 2 and len(report["rows"]) == 2
    # The load generator ran twice against the servers started once.
    assert (plan / "verify-gpu-000" / "loadgen" / "scale-1-run-2.log").is_file()
    for line in verified["models"]:
        assert line["runs"][0]["measured_p99_ms"] == line["measured_p99_ms"]
        assert len(line["runs"]) == 2 and line["spread_p99"] is not None
    assert verified["repeat_spread"]["p99"] == max(m["spread_p99"] for m in verified["models"])
    assert (verified["within_targets"] is None) == (not verified["trustworthy"])
    assert "Repeats: 2 runs on the same servers" in " ".join(stdout.split())
    assert "## Predicted against measured" in (plan / "plan.md").read_text()
    assert "verify-point-" in (plan / "plan.html").read_text()


def test_the_500_model_example_plans_from_its_committed_profiles(
    models_dir: Path, tmp_path: Path
) -> None:
    # The example as committed, its profiles read where they are; only the models' files are
    # the session's tiny for all three kinds (their size on disk is all a CPU profile lacks).
    example = Path(__file__).resolve().parents[3] / "examples" / "fleet-500"
    text = (example / "fleet.yaml").read_text()
    text = text.replace("profile: profiles/", f"profile: {example}/profiles/")
    for kind in ("tiny", "mobilenet_v2", "resnet50"):
        text = text.replace(f"model: ../../models/{kind}", f"model: {models_dir / 'tiny'}")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(text)
    result = run_cli("size", "--fleet", str(fleet), "--out", str(tmp_path / "plan"))
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert len(plan["models"]) == 500
    assert plan["lower_bound_gpus"] <= plan["gpu_count"] <= 1.2 * plan["lower_bound_gpus"]
    assert plan["saving_factor"] > 1.5
    cpu = [w for w in plan["warnings"] if "without a GPU (a CPU profile)" in w]
    assert len(cpu) == 3  # one per profile, not one per model


def test_sigterm_stops_profile_in_order(models_dir: Path, tmp_path: Path) -> None:
    # `profile` once ran its sweeps without bench's signal handling: killed, it left its
    # replicas' cgroups behind, which the next pack on the host tripped over.
    out = tmp_path / "profile"
    command = [
        *SHAREDSERVE, "profile", "--model", str(models_dir / "tiny"), "--out", str(out),
        "--densities", "1", "--duration", "30", "--warmup", "0", "--cpu-limit", "0.5",
    ]  # fmt: skip
    log = (tmp_path / "profile.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=clean_env())
    try:
        targets = out / "sequential" / "targets-scale-1.json"
        deadline = time.monotonic() + 120
        while not targets.exists():  # the replica is up and under load
            assert process.poll() is None, (tmp_path / "profile.log").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        pids = [t["pid"] for t in json.loads(targets.read_text())["targets"]]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 128 + signal.SIGTERM, (
            tmp_path / "profile.log"
        ).read_text()
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    assert pids and not any(alive(pid) for pid in pids)
    assert not list(Path("/sys/fs/cgroup/cpu").glob(f"sharedserve-pack-{process.pid}"))
    assert "interrupted" in (tmp_path / "profile.log").read_text()


def test_profile_beside_a_neighbour_measures_a_row_size_reads_as_its_interference(
    models_dir: Path, tmp_path: Path
) -> None:
    # tiny profiled for real, then once more beside edge's own process at 4 requests/s.
    out = tmp_path / "tiny"
    result = run_cli(
        "profile", "--model", str(models_dir / "tiny"), "--out", str(out), "--densities", "1",
        "--duration", "3", "--warmup", "0", "--stability-windows", "1", "--cpu-limit", "0.5",
        "--beside", str(models_dir / "edge"), "--beside-rate", "4", timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    assert "beside edge at 4 requests/s" in result.stdout
    rate = json.loads((out / "poisson" / "report.json").read_text())["settings"]["rate"]
    beside = json.loads((out / "beside-edge" / "report.json").read_text())
    (row,) = beside["rows"]
    # One row of both models, each process weighted by its requests/s: tiny at its open-loop
    # row's rate, edge at the rate asked for, the row's rate their sum.
    assert (row["pattern"], row["density"]) == ("poisson", 2)
    assert {n: m["weight"] for n, m in row["models"].items()} == {"tiny": rate, "edge": 4.0}
    assert beside["settings"]["rate"] == pytest.approx(rate + 4.0)
    assert all(m["replicas"] == 1 and m["cpu_limit"] == 0.5 for m in row["models"].values())
    # size reads it as tiny's row beside edge, not as a profile of edge.
    profiles = load_profiles(out)
    assert list(profiles) == ["tiny"]
    (measured,) = profiles["tiny"].beside
    assert [name for name, _ in measured.neighbours] == ["edge"]
    assert measured.source == str(out / "beside-edge")

"""``sharedserve bench`` for real: packed tiny replicas, real Locust processes, real reports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.pack import PackRun, alive
from tests.support.servers import SHAREDSERVE, clean_env, free_port, run_cli
from tests.support.stub_server import StubServer, two_level_law

ROW_KEYS = {
    "density", "pattern", "requests", "errors", "dropped", "qps", "p50_ms", "p90_ms", "p99_ms",
    "p999_ms", "max_ms", "scaling_efficiency", "gpu_util_mean", "gpu_util_max",
    "gpu_mem_used_mib", "cpu_util_mean", "loadgen_cpu_util", "slo_met", "per_model",
}  # fmt: skip


def test_density_sweep_writes_a_full_report_and_recommends(
    models_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    result = run_cli(
        "bench", "--model", str(models_dir / "tiny"), "--densities", "1,2", "--duration", "3",
        "--warmup", "1", "--slo-p99-ms", "500", "--cpu-limit", "0.5", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["partial"] is False
    rows = report["rows"]
    assert [r["density"] for r in rows] == [1, 2]
    for row in rows:
        assert set(row) >= ROW_KEYS
        assert row["pattern"] == "sequential"
        assert row["requests"] > 50 and row["errors"] == 0 and row["dropped"] == 0
        assert (
            0 < row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"] <= row["p999_ms"] <= row["max_ms"]
        )
        # No GPU here: every GPU figure is null, never a made-up number.
        assert row["gpu_util_mean"] is None and row["gpu_mem_used_mib"] is None
        # Each replica is held to half a core by its cgroup.
        assert 0 < row["cpu_util_mean"] <= 0.5 * row["density"] + 0.1
        assert 0 < row["loadgen_cpu_util"] < 2
        assert len(row["per_model"]) == row["density"]
        assert sum(m["requests"] for m in row["per_model"]) == row["requests"]
    assert rows[0]["scaling_efficiency"] == 1.0
    assert rows[1]["scaling_efficiency"] == pytest.approx(
        rows[1]["qps"] / (2 * rows[0]["qps"]), abs=1e-3
    )
    assert report["recommendation"]["density"] == 2
    assert report["environment"]["gpus"] is None
    assert report["environment"]["command"].startswith("sharedserve bench")
    for name in ("report.csv", "report.md", "report.html", "p99_vs_density.png"):
        assert (out / name).stat().st_size > 0
    assert "recommendation: 2" in result.stdout
    assert not list(Path("/sys/fs/cgroup/cpu").glob("sharedserve-pack-*"))


def test_targets_poisson_with_two_locust_workers(models_dir: Path, tmp_path: Path) -> None:
    pack = PackRun(tmp_path / "pack", models_dir / "tiny", "--replicas", "2")
    try:
        pack.wait_targets()
        out = tmp_path / "report"
        rate, duration = 40, 4
        result = run_cli(
            "bench", "--targets", str(pack.targets_path), "--pattern", "poisson", "--rate",
            str(rate), "--duration", str(duration), "--warmup", "1", "--loadgen-workers", "2",
            "--out", str(out),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        report = json.loads((out / "report.json").read_text())
        (row,) = report["rows"]
        assert row["density"] == 2 and row["pattern"] == "poisson"
        # Open loop: each model gets about rate x duration requests, whatever its latency.
        for model in row["per_model"]:
            assert 0.75 * rate * duration <= model["requests"] <= 1.25 * rate * duration, model
        assert row["errors"] == 0 and row["dropped"] == 0
        assert report["recommendation"]["density"] is None  # no SLO given
        assert "SLO" in report["recommendation"]["reason"]
        spec = json.loads((out / "loadgen" / "targets-2-spec.json").read_text())
        assert spec["expect_workers"] == 2
    finally:
        assert pack.stop() == 0, pack.log()


def test_ctrl_c_keeps_the_rows_so_far_as_a_partial_report(models_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    command = [
        *SHAREDSERVE, "bench", "--model", str(models_dir / "tiny"), "--densities", "1,2",
        "--duration", "4", "--warmup", "0", "--out", str(out), "--pattern", "parallel",
        "--concurrency", "2", "--protocol", "grpc",
    ]  # fmt: skip
    log = (tmp_path / "bench.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=clean_env())
    try:
        deadline = time.monotonic() + 120
        density_2 = out / "targets-density-2.json"
        # Interrupt once density 1 is reported and density 2's replicas are up and under load.
        while not ((out / "report.json").exists() and density_2.exists()):
            assert process.poll() is None, (tmp_path / "bench.log").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        pids = [t["pid"] for t in json.loads(density_2.read_text())["targets"]]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130, (tmp_path / "bench.log").read_text()
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    report = json.loads((out / "report.json").read_text())
    assert report["partial"] is True
    assert [r["density"] for r in report["rows"]] == [1]
    assert report["rows"][0]["requests"] > 0 and report["rows"][0]["errors"] == 0
    assert "PARTIAL" in (out / "report.md").read_text()
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)
    assert not density_2.exists()
    assert not list(Path("/sys/fs/cgroup/cpu").glob("sharedserve-pack-*"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--densities", "1,x"], "comma-separated integers"),
        (["--densities", "0"], "positive integers"),
        (["--duration", "0"], "--duration"),
        (["--protocol", "soap"], "rest or grpc"),
    ],
)
def test_bad_bench_options_are_refused_before_anything_starts(
    models_dir: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    result = run_cli("bench", "--model", str(models_dir / "tiny"), "--out", str(tmp_path), *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "logs").exists()


def test_bench_needs_model_or_targets(tmp_path: Path) -> None:
    result = run_cli("bench", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "give --model" in result.stderr


def test_unreachable_targets_fail_clearly(tmp_path: Path) -> None:
    targets = tmp_path / "targets.json"
    body = {"targets": [{"name": "gone", "model": "tiny", "rest": "http://127.0.0.1:9"}]}
    targets.write_text(json.dumps(body))
    result = run_cli(
        "bench", "--targets", str(targets), "--duration", "1", "--warmup", "0",
        "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.returncode == 1
    assert "no request was sent" in result.stderr
    assert "Connection refused" in result.stderr
    assert os.path.exists(tmp_path / "out" / "loadgen")


def test_percentiles_match_a_known_latency_law(tmp_path: Path) -> None:
    # 2% of requests take 50 ms, the rest 5 ms: P50 must read ~5 ms and P99 ~50 ms. Bucketed
    # percentiles (Locust's own, 2 significant digits) or averaging would miss one or the other.
    port = free_port()
    server = StubServer(port, two_level_law(base_ms=5.0, slow_ms=50.0, slow_every=50))
    server.start()
    try:
        targets = tmp_path / "targets.json"
        body = {
            "targets": [{"name": "stub-0", "model": "stub", "rest": f"http://127.0.0.1:{port}"}]
        }
        targets.write_text(json.dumps(body))
        out = tmp_path / "out"
        result = run_cli(
            "bench", "--targets", str(targets), "--duration", "5", "--warmup", "0.5",
            "--out", str(out), "--slo-p99-ms", "60",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    finally:
        server.stop()
    (row,) = json.loads((out / "report.json").read_text())["rows"]
    assert row["requests"] > 300 and row["errors"] == 0
    assert 5.0 <= row["p50_ms"] <= 7.0, row
    assert 50.0 <= row["p99_ms"] <= 53.0, row
    assert row["p90_ms"] <= 7.5, row  # the slow 2% do not leak into lower percentiles

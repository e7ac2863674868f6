"""``sharedserve bench`` for real: packed tiny replicas, real Locust processes, real reports."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import stat
import struct
import subprocess
import termios
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cli import invoke
from tests.support.pack import PackRun, alive, descendants, leaked_pack_cgroups, pack_cgroups
from tests.support.servers import SHAREDSERVE, Server, clean_env, free_port, run_cli
from tests.support.stub_server import StubServer, two_level_law

pytestmark = [pytest.mark.slow]

ROW_KEYS = {
    "density", "pattern", "requests", "errors", "dropped", "qps", "p50_ms", "p90_ms", "p99_ms",
    "p999_ms", "max_ms", "scaling_efficiency", "gpu_name", "gpu_util_mean", "gpu_util_max",
    "gpu_mem_used_mib", "cpu_util_mean", "loadgen_cpu_util", "slo_met", "per_model",
}  # fmt: skip


@pytest.mark.tensorflow
def test_density_sweep_writes_a_full_report_and_recommends(
    models_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    before = pack_cgroups()
    result = run_cli(
        "bench", "--model", str(models_dir / "tiny"), "--densities", "1,2", "--duration", "3",
        "--warmup", "1", "--slo-p99-ms", "500", "--cpu-limit", "0.5", "--out", str(out),
        # One window: 1 s windows on a busy 2-core host need not agree, and this test is about
        # the report, not about stability (test_windows_are_recorded... is).
        "--stability-windows", "1",
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
    # The limits each replica reported it ran under, one entry per density as they agree.
    replica_limits = report["settings"]["replica_limits"]
    limits = replica_limits[0]["limits"]
    assert limits == {
        "cpu_limit_cores": 0.5, "cpu_limit_source": limits["cpu_limit_source"],
        "cpu_quota_enforced": True, "gpu_memory_fraction": None, "gpu_memory_mib": None,
        "gpu_memory_enforced": False, "batching": {"enabled": False},
    }  # fmt: skip
    assert limits["cpu_limit_source"] in ("cgroup-v1", "cgroup-v2")
    assert replica_limits == [
        {"density": 1, "replicas": ["tiny-0"], "limits": limits},
        {"density": 2, "replicas": ["tiny-0", "tiny-1"], "limits": limits},
    ]
    assert "| 0.5 cores (cgroup-v" in (out / "report.md").read_text()  # the limits table
    assert "| enforced |" in (out / "report.md").read_text()
    assert report["environment"]["command"].startswith("sharedserve bench")
    for name in ("report.csv", "report.md", "report.html", "p99_vs_density.png"):
        assert (out / name).stat().st_size > 0
    assert "recommendation: 2" in result.stdout
    assert leaked_pack_cgroups(before) == set()


@pytest.mark.tensorflow
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
        # Open loop: --rate is the mix's total, split over the two replicas of its one model;
        # each gets about rate / 2 x duration requests, whatever its latency.
        for model in row["per_model"]:
            share = rate / 2 * duration
            assert 0.75 * share <= model["requests"] <= 1.25 * share, model
        assert row["models"]["tiny"]["replicas"] == 2
        assert row["errors"] == 0 and row["dropped"] == 0
        assert report["recommendation"]["density"] is None  # no SLO given
        assert "SLO" in report["recommendation"]["reason"]
        spec = json.loads((out / "loadgen" / "targets-spec.json").read_text())
        assert spec["expect_workers"] == 2
    finally:
        assert pack.stop() == 0, pack.log()


@pytest.mark.tensorflow
def test_ctrl_c_keeps_the_rows_so_far_as_a_partial_report(models_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    before = pack_cgroups()
    command = [
        *SHAREDSERVE, "bench", "--model", str(models_dir / "tiny"), "--densities", "1,2",
        "--duration", "4", "--warmup", "0", "--out", str(out), "--pattern", "parallel",
        "--concurrency", "2", "--protocol", "grpc",
    ]  # fmt: skip
    log = (tmp_path / "bench.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=clean_env())
    try:
        deadline = time.monotonic() + 120
        density_2 = out / "targets-scale-2.json"
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
    assert leaked_pack_cgroups(before) == set()


@pytest.mark.tensorflow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--densities", "1,x"], "comma-separated integers"),
        (["--densities", "0"], "positive integers"),
        (["--duration", "0"], "--duration"),
        (["--protocol", "soap"], "'soap' is not one of 'rest',"),
    ],
)
def test_bad_bench_options_are_refused_before_anything_starts(
    models_dir: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    result = invoke("bench", "--model", str(models_dir / "tiny"), "--out", str(tmp_path), *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert not (tmp_path / "logs").exists()


def test_bench_needs_model_or_targets(tmp_path: Path) -> None:
    result = invoke("bench", "--out", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert "give one of --model (a density sweep), --spec (a mix) or --targets" in result.stderr


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
    # Each percentile reads its own mode: p50 and p90 the 5 ms one, p99 the 50 ms one (an
    # average, 5.9 ms, would put p99 there too). The upper bounds are the midpoints between the
    # modes and past the slow one: a loaded machine stretches every sleep, so a tighter bound
    # measured the machine; the histogram's own precision is table-tested (test_bench_histogram).
    assert 5.0 <= row["p50_ms"] <= row["p90_ms"] < 27.5, row
    assert 50.0 <= row["p99_ms"] < 95.0, row


@pytest.mark.tensorflow
def test_fake_gpus_and_batching_are_recorded_as_the_replicas_report_them(
    models_dir: Path, tmp_path: Path, fake_gpus: Path
) -> None:
    out = tmp_path / "report"
    result = run_cli(
        "bench", "--model", str(models_dir / "tiny"), "--densities", "2", "--duration", "1",
        "--warmup", "0", "--fake-gpus", str(fake_gpus), "--gpu-memory-fraction", "0.25",
        "--out", str(out), "--enable-batching", "--max-batch-size", "8",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    ((entry),) = report["settings"]["replica_limits"]
    assert entry["density"] == 2 and entry["replicas"] == ["tiny-0", "tiny-1"]
    limits = entry["limits"]
    # A cap sized against a simulated GPU is no figure to report; that it was not enforced is.
    assert limits["gpu_memory_fraction"] is None and limits["gpu_memory_mib"] is None
    assert limits["gpu_memory_enforced"] is False
    assert limits["cpu_limit_cores"] is None and limits["cpu_quota_enforced"] is False
    assert limits["batching"]["enabled"] is True and limits["batching"]["max_batch_size"] == 8
    (row,) = report["rows"]
    assert row["gpu_name"] is None  # simulated GPUs are never named as measured
    assert all(m["gpu_memory_fraction"] is None for m in row["per_model"])
    assert "up to 8 rows" in (out / "report.md").read_text()


def _stub_bench(targets: Path, out: Path) -> list[str]:
    # An SLO no run meets: the recommendation then says why at length.
    return [
        *SHAREDSERVE, "bench", "--targets", str(targets), "--duration", "1", "--warmup", "0",
        "--slo-p99-ms", "0.01", "--out", str(out),
    ]  # fmt: skip


def _as_in_report(value: object) -> str:
    """A figure as report.json holds it, as text: what the summary must show whole."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return str(value).removesuffix(".0")


def _check_summary(stdout: str, report: dict) -> None:
    assert "…" not in stdout
    (row,) = report["rows"]
    figures = ["density", "qps", "p50_ms", "p99_ms", "p999_ms", "errors", "dropped"]
    figures += ["scaling_efficiency", "gpu_util_mean", "cpu_util_mean", "slo_met"]
    tokens = [t for line in stdout.splitlines() if line.split()[:1] == ["1"] for t in line.split()]
    for key in figures:
        assert _as_in_report(row[key]) in tokens, (key, row[key], stdout)
    assert f"{row['loadgen_cpu_util'] * 100:.0f}%" in tokens
    rec = report["recommendation"]
    assert rec["density"] is None and len(rec["reason"]) > 60
    # Whole: word-wrapped on a terminal at most, never cut.
    assert f"recommendation: none — {rec['reason']}" in " ".join(stdout.split())


def test_the_summary_in_a_pipe_is_whole_whatever_columns_says(
    stub_targets: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = subprocess.run(
        _stub_bench(stub_targets, out), capture_output=True, text=True, timeout=300,
        env=clean_env(COLUMNS="60"), check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    _check_summary(result.stdout, report)
    # Not a terminal: one line per row and one for the recommendation, for logs and grep.
    lines = result.stdout.splitlines()
    assert f"recommendation: none — {report['recommendation']['reason']}" in lines
    assert len([ln for ln in lines if ln.split()[:1] == ["1"]]) == 1


def _run_in_terminal(command: list[str], columns: int, stderr: Path) -> tuple[int, str]:
    """Run ``command`` with its stdout on a pseudo-terminal ``columns`` wide; its exit code and
    what it wrote, without colours."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = clean_env(TERM="xterm-256color")
    env.pop("COLUMNS", None)
    with stderr.open("wb") as err:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=slave, stderr=err, env=env
        )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the terminal's other end is closed
                    break
                if not data:
                    break
                chunks.append(data)
        code = process.wait(timeout=60)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    return code, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def test_the_summary_on_an_80_column_terminal_is_whole(stub_targets: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout = _run_in_terminal(_stub_bench(stub_targets, out), 80, tmp_path / "stderr")
    assert code == 0, (tmp_path / "stderr").read_text()
    _check_summary(stdout, json.loads((out / "report.json").read_text()))
    # Every line fits, but the report's path: cut, it would not name the file any more.
    lines = [ln for ln in stdout.splitlines() if not ln.startswith("report: ")]
    assert all(len(line) <= 80 for line in lines), stdout
    assert f"report: {out / 'report.html'}" in stdout.splitlines()


def test_report_files_can_be_read_by_colleagues(stub_targets: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = subprocess.run(
        _stub_bench(stub_targets, out), capture_output=True, text=True, timeout=300,
        env=clean_env(), umask=0o022, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    names = ["report.json", "report.csv", "report_per_model.csv", "report.md", "report.html"]
    for name in [*names, "p99_vs_density.png"]:
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name
    # A server that is not sharedserve has no limits to report: unknown, not "unlimited".
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["replica_limits"] == [
        {"density": 1, "replicas": ["stub-0"], "limits": None}
    ]


# What a shell that is not interactive does to `cmd &`: SIGINT ignored, inherited through exec.
_SIGINT_IGNORED = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"]


@pytest.mark.tensorflow
@pytest.mark.parametrize(
    ("sig", "wrapper"),
    [(signal.SIGINT, _SIGINT_IGNORED), (signal.SIGTERM, [])],
    ids=["sigint-inherited-ignored", "sigterm"],
)
def test_a_signal_stops_bench_and_everything_it_started(
    models_dir: Path, tmp_path: Path, sig: signal.Signals, wrapper: list[str]
) -> None:
    # `sharedserve bench ... &` from a script starts with SIGINT ignored; it must stop on
    # SIGINT all the same, and on SIGTERM (a job runner's stop) alike, leaving nothing behind.
    out = tmp_path / "report"
    command = [
        *wrapper, *SHAREDSERVE, "bench", "--model", str(models_dir / "tiny"), "--densities", "1,2",
        "--duration", "120", "--warmup", "0", "--cpu-limit", "0.5", "--out", str(out),
    ]  # fmt: skip
    log_path = tmp_path / "bench.log"
    started: set[int] = set()
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=clean_env())
    try:
        deadline = time.monotonic() + 120
        # Under load: the replica is up and the load generator has started.
        while not (out / "loadgen" / "scale-1.log").exists():
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        time.sleep(1.0)
        started = descendants(process.pid)
        replicas = json.loads((out / "targets-scale-1.json").read_text())["targets"]
        assert {t["pid"] for t in replicas} <= started and len(started) >= 2
        process.send_signal(sig)
        begun = time.monotonic()
        assert process.wait(timeout=45) == 128 + sig, log_path.read_text()
        assert time.monotonic() - begun < 30
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        leaked = [pid for pid in started if alive(pid)]
        for pid in leaked:
            os.kill(pid, signal.SIGKILL)
    assert not leaked, log_path.read_text()
    assert "interrupted: the rows measured so far" in log_path.read_text()
    report = json.loads((out / "report.json").read_text())
    assert report["partial"] is True and report["rows"] == []
    assert not (out / "targets-scale-1.json").exists()
    for root in (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")):
        assert not (root / f"sharedserve-pack-{process.pid}").exists()


@pytest.mark.tensorflow
def test_a_throttled_replica_says_its_quota_sets_its_tail(models_dir: Path, tmp_path: Path) -> None:
    # 0.3 of a core against 4 requests in flight: the CFS quota runs out in most periods, and
    # the tail is the wait for the next period.
    out = tmp_path / "report"
    result = run_cli(
        "bench", "--model", str(models_dir / "tiny"), "--densities", "1", "--duration", "3",
        "--max-duration", "3", "--warmup", "1", "--cpu-limit", "0.3", "--pattern", "parallel",
        "--concurrency", "4", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    ((model,),) = [r["per_model"] for r in report["rows"]]
    assert model["cpu_throttled_share"] > 0.2, model
    assert model["cpu_throttled_ms"] > 0, model
    assert model["p99_ms"] >= 3 * model["p50_ms"], model
    note = "model tiny-0: p99 "
    quota = "the quota, not its neighbours, sets the tail; try a larger --cpu-limit"
    for text in ((out / "report.md").read_text(), (out / "report.html").read_text()):
        assert note in text and quota in text
    assert quota in " ".join(result.stdout.split())


def test_windows_are_recorded_and_max_duration_bounds_the_measurement(
    stub_targets: Path, tmp_path: Path
) -> None:
    # Windows of 0.5 s, at most 4 of them (--max-duration 2) whether or not they agree.
    out = tmp_path / "out"
    result = run_cli(
        "bench", "--targets", str(stub_targets), "--duration", "1.5", "--stability-windows", "3",
        "--max-duration", "2", "--warmup", "0", "--pattern", "poisson", "--rate", "200",
        "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (row,) = json.loads((out / "report.json").read_text())["rows"]
    # The bound: no more windows than --max-duration holds (a wall-clock check of the whole
    # command measured Locust's start-up on a loaded machine as much as the bound).
    assert 3 <= len(row["windows"]) <= 4, row["windows"]
    for window in row["windows"]:
        assert window["duration_s"] == pytest.approx(0.5, abs=0.1)
        assert window["qps"] > 0 and window["p99_ms"] > 0
    assert isinstance(row["stable"], bool)
    assert row["duration_s"] == pytest.approx(1.5, abs=0.15)  # the last 3 windows
    assert 0 <= row["late_share"] <= 1
    # Without a cgroup (a targets file of remote endpoints), no throttling figure.
    assert row["per_model"][0]["cpu_throttled_share"] is None


def _served(server: Server, protocol: str) -> float:
    """Successful predict calls ``server`` counted under ``protocol``."""
    text = httpx.get(f"{server.base}/metrics").text
    ok = {"oip-rest": "200", "oip-grpc": "OK"}[protocol]
    wanted = {"protocol": protocol, "code": ok}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {k: sample.labels.get(k) for k in wanted}
            if sample.name == "sharedserve_requests_total" and labels == wanted:
                return sample.value
    return 0.0


@pytest.mark.tensorflow
@pytest.mark.parametrize("protocol", ["oip-rest", "oip-grpc"])
def test_bench_drives_the_open_inference_protocol(
    tiny_server: Server, tmp_path: Path, protocol: str
) -> None:
    targets = tmp_path / "targets.json"
    target = {
        "name": "tiny-0",
        "model": "tiny",
        "rest": tiny_server.base,
        "grpc": f"127.0.0.1:{tiny_server.grpc_port}",
    }
    targets.write_text(json.dumps({"targets": [target]}))
    before = _served(tiny_server, protocol)
    result = run_cli(
        "bench", "--targets", str(targets), "--duration", "1", "--warmup", "0",
        "--stability-windows", "1", "--protocol", protocol, "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (row,) = json.loads((tmp_path / "out" / "report.json").read_text())["rows"]
    assert row["requests"] > 0 and row["errors"] == 0, row
    # The server counted them as that protocol's: the bench spoke it, not TF Serving's API.
    assert _served(tiny_server, protocol) - before >= row["requests"]

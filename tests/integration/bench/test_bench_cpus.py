"""Bench keeps its load generator off the servers' CPUs, records where each ran, and does not
trust a row whose load generator sent late: real bench runs, CPU sets read from ``/proc``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.pack import descendants
from tests.support.servers import SHAREDSERVE, clean_env

pytestmark = [pytest.mark.slow]

CPUS = sorted(os.sched_getaffinity(0))
SERVER_CPU, LOADGEN_CPU = CPUS[0], CPUS[-1]  # one CPU: both there, pinned all the same


def _cpus_allowed(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no Cpus_allowed_list for {pid}")


def _loadgen_master(bench: subprocess.Popen[bytes], log: Path) -> int:
    """The load generator's master, once it runs its own program (after the pinning exec)."""
    deadline = time.monotonic() + 120
    while True:
        assert bench.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        for pid in descendants(bench.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            # Not the pinning wrapper (``python -c ... python -m ...``), whose argv names it too.
            if argv[1:4] == [b"-m", b"sharedserve.bench.loadgen", b"master"]:
                return pid
        time.sleep(0.05)


def _stop(bench: subprocess.Popen[bytes]) -> None:
    """A bench a failed assertion left running stopped in order: SIGTERM stops its replicas
    (in sessions of their own, which a SIGKILL of bench would orphan), then SIGKILL."""
    if bench.poll() is None:
        bench.terminate()
        try:
            bench.wait(timeout=60)
        except subprocess.TimeoutExpired:
            bench.kill()
            bench.wait()


@pytest.mark.tensorflow
def test_servers_and_load_generator_run_on_the_cpus_given_and_the_report_says_so(
    models_dir: Path, tmp_path: Path
) -> None:
    out, log = tmp_path / "report", tmp_path / "bench.log"
    command = [
        *SHAREDSERVE, "bench", "--model", str(models_dir / "tiny"), "--densities", "2",
        "--duration", "3", "--warmup", "1", "--stability-windows", "1", "--out", str(out),
        "--server-cpus", str(SERVER_CPU), "--loadgen-cpus", str(LOADGEN_CPU),
    ]  # fmt: skip
    with log.open("wb") as sink:
        bench = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=clean_env())
    try:
        master = _loadgen_master(bench, log)
        assert _cpus_allowed(master) == str(LOADGEN_CPU)
        servers = json.loads((out / "targets-scale-2.json").read_text())["targets"]
        assert len(servers) == 2
        for server in servers:  # the serve processes themselves, past the pinning exec
            assert _cpus_allowed(server["pid"]) == str(SERVER_CPU)
        assert bench.wait(timeout=180) == 0, log.read_text()
    finally:
        _stop(bench)
    settings = json.loads((out / "report.json").read_text())["settings"]
    assert (settings["server_cpus"], settings["loadgen_cpus"]) == (
        str(SERVER_CPU),
        str(LOADGEN_CPU),
    )
    assert settings["cpu_pinning"] == "as given"


def test_a_starved_load_generator_is_reported_not_trustworthy(
    stub_targets: Path, tmp_path: Path
) -> None:
    # The load generator is stopped half of every 100 ms, as a CPU taken by the servers it
    # measures would hold it: about half the requests leave late, far over the 5% trusted.
    out, log = tmp_path / "report", tmp_path / "bench.log"
    command = [
        *SHAREDSERVE, "bench", "--targets", str(stub_targets), "--pattern", "poisson",
        "--rate", "100", "--duration", "4", "--warmup", "0", "--stability-windows", "1",
        "--slo-p99-ms", "1000", "--loadgen-cpus", str(LOADGEN_CPU), "--out", str(out),
    ]  # fmt: skip
    with log.open("wb") as sink:
        bench = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=clean_env())
    try:
        master = _loadgen_master(bench, log)
        while bench.poll() is None:
            try:
                os.kill(master, signal.SIGSTOP)
                time.sleep(0.05)
            except ProcessLookupError:
                break
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(master, signal.SIGCONT)
            time.sleep(0.05)
        assert bench.wait(timeout=120) == 0, log.read_text()
    finally:
        _stop(bench)
    report = json.loads((out / "report.json").read_text())
    (row,) = report["rows"]
    assert row["late_share"] > 0.05
    assert row["unreliable"] is True
    assert report["settings"]["loadgen_cpus"] == str(LOADGEN_CPU)
    # Its figures are not a verdict: the objective it met is not recommended.
    assert report["recommendation"]["density"] is None
    assert "not trustworthy" in report["recommendation"]["reason"]
    assert "sent over 1 ms late (over 5%)" in report["recommendation"]["reason"]
    said = " ".join(log.read_text().split())
    assert "NOT TRUSTWORTHY" in said
    assert "Not trustworthy" in (out / "report.md").read_text()

"""What a first run on a host without a GPU prints, and how fast a busy port fails.

The frameworks' own lines (TensorFlow's oneDNN notice, its "Could not find cuda drivers", cuInit's
E-line) stay hidden unless ``--log-level debug``; sharedserve says itself that the cap is not
enforced. A port in use is reported before any framework is imported, in sharedserve's words
rather than gRPC core's ``add_port.cc`` E-line.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import SHAREDSERVE, Server, first_run_env, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

# absl's and glog's line prefix (severity, MMDD, time), absl's banner before it is initialised,
# and the start-up lines seen on CPU-only hosts.
FRAMEWORK_LINE = re.compile(
    r"^[IWEF]\d{4} |absl::InitializeLog|oneDNN|cuda_platform|cuInit|cudart_stub", re.M
)
FRAMEWORKS = {"tensorflow", "torch", "keras"}


def framework_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if FRAMEWORK_LINE.search(line)]


def served_log(model: Path, log_path: Path, level: str, *args: str) -> tuple[str, bool]:
    """The log of a server that started, served and stopped; and whether the cap was enforced."""
    server = Server(model, log_path, args, env=first_run_env(SHAREDSERVE_LOG_LEVEL=level))
    try:
        server.wait_available(model.name)
        enforced = server.client.get("/sharedserve/v1/limits").json()["gpu_memory_enforced"]
    finally:
        code = server.stop()
    assert code == 0, server.log()
    return server.log(), enforced


def test_serve_hides_the_frameworks_start_up_lines(models_dir: Path, tmp_path: Path) -> None:
    log, enforced = served_log(models_dir / "tiny", tmp_path / "serve.log", "info")
    assert framework_lines(log) == [], log
    limits = [
        line for line in log.splitlines() if "sharedserve.server.process.start_up: limits:" in line
    ]
    assert len(limits) == 1, log
    assert enforced or "not enforced" in limits[0]


def test_at_warning_the_one_line_left_says_the_cap_is_not_enforced(
    models_dir: Path, tmp_path: Path
) -> None:
    log, enforced = served_log(
        models_dir / "tiny", tmp_path / "serve.log", "warning", "--gpu-memory-mib", "1024"
    )
    if enforced:  # a host with a GPU: nothing to warn about
        assert log.strip() == "", log
    else:
        lines = log.strip().splitlines()
        assert len(lines) == 1, log
        assert "WARNING" in lines[0] and "NOT enforced" in lines[0] and "mib=1024" in lines[0]


def test_debug_shows_the_frameworks_again(models_dir: Path, tmp_path: Path) -> None:
    log, _ = served_log(models_dir / "tiny", tmp_path / "serve.log", "debug")
    assert framework_lines(log), log


@pytest.mark.parametrize("level", ["info", "debug"])
def test_models_build_is_as_quiet_as_serve(
    tmp_path: Path, level: str, tiny_build: subprocess.CompletedProcess[str]
) -> None:
    if level == "info":  # the default: the session's own build, made in a first-run shell
        result = tiny_build
    else:
        env = first_run_env(SHAREDSERVE_LOG_LEVEL=level)
        result = run_cli("models", "build", "tiny", "--out", str(tmp_path), env=env)
    assert result.returncode == 0, result.stderr
    assert "built tiny (tf)" in result.stderr
    if level == "debug":
        assert framework_lines(result.stderr), result.stderr
    else:
        assert framework_lines(result.stderr) == [], result.stderr
        # Keras' tracing notes come through Python logging, at INFO: routine, not for the user.
        assert " INFO absl:" not in result.stderr and " INFO tensorflow:" not in result.stderr


def test_pack_at_debug_shows_the_frameworks_in_replica_logs(
    models_dir: Path, tmp_path: Path
) -> None:
    targets = tmp_path / "targets.json"
    command = [*SHAREDSERVE, "--log-level", "debug", "pack", "--model", str(models_dir / "tiny")]
    command += ["--replicas", "1", "--log-dir", str(tmp_path / "logs")]
    command += ["--targets-out", str(targets)]
    with (tmp_path / "pack.log").open("wb") as pack_log:
        process = subprocess.Popen(
            command, stdout=pack_log, stderr=subprocess.STDOUT, env=first_run_env()
        )
        try:
            deadline = time.monotonic() + 120
            while not targets.exists():
                assert process.poll() is None, (tmp_path / "pack.log").read_text()
                assert time.monotonic() < deadline, (tmp_path / "pack.log").read_text()
                time.sleep(0.2)
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0, (tmp_path / "pack.log").read_text()
    replica_log = (tmp_path / "logs" / "tiny-0.log").read_text()
    assert framework_lines(replica_log), replica_log
    assert " DEBUG " in replica_log


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port some other program listens on."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield int(other.getsockname()[1])


def imported_modules(importtime: str) -> set[str]:
    # -X importtime: "import time: self [us] | cumulative | <indented module name>"
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime.splitlines()
        if line.startswith("import time:") and "|" in line
    }


@pytest.mark.parametrize("api", ["rest", "grpc"])
def test_a_busy_port_fails_before_any_framework_loads(
    models_dir: Path, busy_port: int, api: str
) -> None:
    ports = {"rest": "0", "grpc": "0", api: str(busy_port)}
    command = [*SHAREDSERVE[:1], "-X", "importtime", *SHAREDSERVE[1:], "serve"]
    command += ["--model", str(models_dir / "tiny"), "--host", "127.0.0.1"]
    command += ["--rest-port", ports["rest"], "--grpc-port", ports["grpc"]]
    # At debug nothing of a framework's would be hidden, were one loaded.
    env = first_run_env(SHAREDSERVE_LOG_LEVEL="debug")
    result = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=120, check=False
    )
    messages = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert result.returncode == 2, result.stderr
    # The line names the API and the flag that moves it: a second server given only another
    # --rest-port meets the first one's gRPC port, and must be told which flag to add.
    name, flag = {"rest": ("REST", "--rest-port"), "grpc": ("gRPC", "--grpc-port")}[api]
    assert messages[-1] == (
        f"error: cannot listen for {name} on 127.0.0.1:{busy_port}: Address already in use; "
        f"give this server another {flag} (0 picks a free one)"
    )
    modules = imported_modules(result.stderr)
    assert "sharedserve.server.process.run" in modules  # the server did start up to the ports
    assert not {m for m in modules if m.split(".")[0] in FRAMEWORKS}
    assert framework_lines(result.stderr) == [] and "add_port" not in result.stderr


def test_one_port_for_both_apis_is_refused_in_one_line(models_dir: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    model = str(models_dir / "tiny")
    args = ("--host", "127.0.0.1", "--rest-port", port, "--grpc-port", port)
    result = run_cli("serve", "--model", model, *args, env=first_run_env())
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"error: cannot listen for gRPC on 127.0.0.1:{port}: Address already in use; "
        "give this server another --grpc-port (0 picks a free one)"
    ]

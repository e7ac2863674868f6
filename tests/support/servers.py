"""Run the real ``sharedserve`` CLI as a child process and talk to it over loopback HTTP."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

from sharedserve.contract import without_grant

SHAREDSERVE = [sys.executable, "-m", "sharedserve"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment minus the env contract (the contract's own list), plus
    ``extra``. The log level goes too: a test that wants one says so."""
    env = without_grant(os.environ)
    env.pop("SHAREDSERVE_LOG_LEVEL", None)
    env.update(extra)
    return env


# The frameworks' log switches, which sharedserve sets only where the user has not; a test
# process may carry them (the CLI sets them in its own process).
FRAMEWORK_SWITCHES = ("TF_CPP_MIN_LOG_LEVEL", "TORCH_CPP_LOG_LEVEL", "GRPC_VERBOSITY")


def first_run_env(**extra: str) -> dict[str, str]:
    """``clean_env`` of a shell that never heard of the frameworks' log switches."""
    env = clean_env(**extra)
    for name in FRAMEWORK_SWITCHES:
        env.pop(name, None)
    return env


def without_tensorflow(root: Path, **extra: str) -> dict[str, str]:
    """``clean_env`` for a child in which TensorFlow is missing, as in a ``[torch]``-only
    install."""
    return _hiding(root, ("tensorflow", "tensorflow_serving", "keras"), **extra)


def without_torch(root: Path, **extra: str) -> dict[str, str]:
    """``clean_env`` for a child in which PyTorch is missing, as after ``make demo`` (TensorFlow
    only)."""
    return _hiding(root, ("torch",), **extra)


def without_onnx(root: Path, **extra: str) -> dict[str, str]:
    """``clean_env`` for a child in which onnxruntime and onnx are missing (no ``[onnx]``)."""
    return _hiding(root, ("onnxruntime", "onnx"), **extra)


def without_tf2onnx(root: Path, **extra: str) -> dict[str, str]:
    """``clean_env`` for a child in which tf2onnx is missing (no ``[convert]``)."""
    return _hiding(root, ("tf2onnx",), **extra)


def _hiding(root: Path, names: Sequence[str], **extra: str) -> dict[str, str]:
    # Packages of the same names placed first on PYTHONPATH fail on import, as absent ones do;
    # and a sitecustomize marks them absent in sys.modules, so that looking for one without
    # importing it (importlib.util.find_spec) finds nothing too, as for a package not installed.
    for name in names:
        package = root / name
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            f"raise ModuleNotFoundError({name!r} + ' is hidden by the test', name={name!r})\n"
        )
    root.mkdir(parents=True, exist_ok=True)
    (root / "sitecustomize.py").write_text(
        f"import sys\n\nsys.modules.update(dict.fromkeys({sorted(names)!r}))\n"
    )
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return clean_env(PYTHONPATH=path, **extra)


class Server:
    """A ``sharedserve serve`` child process; ``base`` is its REST URL."""

    def __init__(
        self,
        model: Path | None,
        log_path: Path,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        prefix: Sequence[str] = (),
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``model`` None: ``args`` name the models (--model-config-file, --model-repository);
        ``tls``: ``args`` serve TLS, and ``client`` speaks https with this client context."""
        self.port = free_port()
        self.grpc_port = free_port()
        self.base = f"{'http' if tls is None else 'https'}://127.0.0.1:{self.port}"
        self.grpc_target = f"127.0.0.1:{self.grpc_port}"
        self.log_path = log_path
        named = [] if model is None else ["--model", str(model)]
        command = [*prefix, *SHAREDSERVE, "serve", *named, "--host", "127.0.0.1"]
        command += ["--rest-port", str(self.port), "--grpc-port", str(self.grpc_port), *args]
        self._log = log_path.open("wb")
        self.env = env or clean_env()
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=self.env
        )
        self.client = httpx.Client(base_url=self.base, timeout=60, verify=tls or True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_listening(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"server exited early:\n{self.log()}"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"server did not listen within {timeout} s:\n{self.log()}")

    def wait_available(self, name: str, timeout: float = 90) -> None:
        self.wait_listening(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"server exited early:\n{self.log()}"
            status = self.client.get(f"/v1/models/{name}")
            if status.json()["model_version_status"][0]["state"] == "AVAILABLE":
                return
            time.sleep(0.1)
        raise AssertionError(f"{name} not AVAILABLE within {timeout} s:\n{self.log()}")

    def stop(self) -> int:
        self.client.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SHAREDSERVE, *args],
        capture_output=True,
        text=True,
        env=env or clean_env(),
        timeout=timeout,
        check=False,
    )


def serving(
    model: Path,
    log_path: Path,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Iterator[Server]:
    """For a fixture to ``yield from``: the model served and AVAILABLE, then stopped, which
    must end with exit 0."""
    server = Server(model, log_path, args, env, tls=tls)
    server.wait_available(model.name)
    yield server
    assert server.stop() == 0, server.log()

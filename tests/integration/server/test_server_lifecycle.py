"""Model life cycle as clients see it: LOADING answers 503, AVAILABLE after warm-up, clean stop.

The readiness test runs the real TensorFlow backend and a real uvicorn server in this process, with
the backend's load held on an event so the LOADING window is deterministic instead of a race.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from sharedserve.server.repository import VersionToServe
from sharedserve.server.version.backends.tensorflow import TensorFlowBackend
from sharedserve.server.version.source import find_model
from tests.support.cli import invoke
from tests.support.in_process import serving_in_process
from tests.support.servers import Server

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]


class GatedBackend(TensorFlowBackend):
    """The real TensorFlow backend whose load waits until the test opens the gate."""

    def __init__(self, path: Path, gate: threading.Event) -> None:
        super().__init__(path)
        self.gate = gate

    def load(self) -> None:
        assert self.gate.wait(60)
        super().load()


def test_not_ready_is_503_until_warm(models_dir: Path) -> None:
    source = find_model(models_dir / "tiny")
    gate = threading.Event()
    body = {"instances": [[0.0] * 8]}
    gated = serving_in_process(
        [VersionToServe(source)],
        backends=lambda s: GatedBackend(s.path, gate),
        wait_loaded=False,
    )
    try:
        with gated as served, httpx.Client(base_url=served.base, timeout=30) as client:
            status = client.get("/v1/models/tiny").json()["model_version_status"][0]
            assert status["state"] in ("START", "LOADING")
            response = client.post("/v1/models/tiny:predict", json=body)
            assert response.status_code == 503
            assert "not ready" in response.json()["error"]
            assert client.get("/v1/models/tiny/metadata").status_code == 503
            assert client.get("/v1/models/nope").status_code == 404  # unknown beats not ready
            gate.set()
            assert served.server.loaded.wait(60)
            status = client.get("/v1/models/tiny").json()["model_version_status"][0]
            assert status["state"] == "AVAILABLE"
            assert client.post("/v1/models/tiny:predict", json=body).status_code == 200
    finally:
        gate.set()


def test_corrupt_model_fails_with_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken" / "1"
    broken.mkdir(parents=True)
    (broken / "saved_model.pb").write_bytes(b"this is not a protobuf")
    server = Server(tmp_path / "broken", tmp_path / "serve.log")
    assert server.process.wait(90) == 1
    assert "failed to load model 'broken'" in server.log()
    server.stop()


def test_sigterm_stops_cleanly(models_dir: Path, tmp_path: Path) -> None:
    server = Server(models_dir / "tiny", tmp_path / "serve.log")
    server.wait_available("tiny")
    assert server.stop() == 0
    assert "server stopped" in server.log()


def test_missing_model_dir_is_a_usage_error(tmp_path: Path) -> None:
    result = invoke("serve", "--model", str(tmp_path / "nothing-here"), "--rest-port", "0")
    assert result.exit_code == 2, result.output
    assert "does not exist" in result.stderr

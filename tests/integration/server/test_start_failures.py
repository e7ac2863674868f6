"""`sharedserve serve` of many models, some of which cannot load at start: start-up forgives
what run time forgives. A missing base path in a model config file, an empty folder and
half-copied ones in a model repository (a version folder with variables but no
``saved_model.pb``, a ``saved_model.pb`` cut short): the server starts, the others serve, and
each broken one is reported the way a model that fails to load is (TF Serving's status END with
its error, the repository index UNAVAILABLE with the reason, the log, metrics, the gRPC health
service). Readiness: ready once the loads settle (the default), or not while a model failed
(``--strict-readiness``). ``--exit-on-error`` stops instead; what cannot be served at all (no
model, no repository) is still refused at once.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from tests.support.servers import Server, free_port, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

BODY = {"instances": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]}
BROKEN = {
    "empty": "holds no model",
    "half": "hold no saved_model.pb, model.pt, model.onnx or model.pt2: copied in part",
    "truncated": "TensorFlow could not load",
}


def _repository(root: Path, tiny: Path) -> Path:
    """``good`` (tiny), beside an empty folder, a version folder with variables and no
    ``saved_model.pb``, and tiny with its ``saved_model.pb`` cut to half."""
    shutil.copytree(tiny, root / "good")
    (root / "empty").mkdir()
    shutil.copytree(tiny / "1" / "variables", root / "half" / "1" / "variables")
    shutil.copytree(tiny, root / "truncated")
    graph = root / "truncated" / "1" / "saved_model.pb"
    graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])
    return root


def _wait(done: Callable[[], bool], what: str, server: Server, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert server.process.poll() is None, f"server exited early:\n{server.log()}"
        assert time.monotonic() < deadline, f"waited in vain for {what}:\n{server.log()}"
        time.sleep(0.05)


def _status(server: Server, name: str) -> dict[str, Any]:
    (status,) = server.client.get(f"/v1/models/{name}").json()["model_version_status"]
    return dict(status)


def _settled(server: Server, names: list[str]) -> bool:
    rows = server.client.post("/v2/repository/index").json()
    states = {row["name"]: row["state"] for row in rows}
    return all(states.get(name) in ("READY", "UNAVAILABLE") for name in names)


def _index(server: Server) -> dict[str, tuple[str, str, str]]:
    rows = server.client.post("/v2/repository/index").json()
    return {row["name"]: (row["version"], row["state"], row["reason"]) for row in rows}


def _load_failed(server: Server) -> dict[str, float]:
    text = server.client.get("/metrics").text
    return {
        sample.labels["model"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "sharedserve_model_load_failed"
    }


def _health(server: Server, service: str) -> int:
    with grpc.insecure_channel(server.grpc_target) as channel:
        request = health_pb2.HealthCheckRequest(service=service)
        return int(health_pb2_grpc.HealthStub(channel).Check(request, timeout=30).status)


SERVING, NOT_SERVING = (
    health_pb2.HealthCheckResponse.SERVING,
    health_pb2.HealthCheckResponse.NOT_SERVING,
)


@pytest.fixture(scope="module")
def repository(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository, and ``late``, an empty folder that a test fills while serving."""
    root = _repository(tmp_path_factory.mktemp("start-failures") / "models", models_dir / "tiny")
    (root / "late").mkdir()
    return root


@pytest.fixture(scope="module")
def repository_server(repository: Path) -> Iterator[Server]:
    served = Server(None, repository.parent / "serve.log", ["--model-repository", str(repository)])
    try:
        served.wait_listening()
        _wait(lambda: served.client.get("/v2/health/ready").status_code == 200, "ready", served)
        yield served
    finally:
        assert served.stop() == 0, served.log()


def test_a_repository_with_broken_models_starts_and_the_others_serve(
    repository_server: Server,
) -> None:
    server = repository_server
    answer = server.client.post("/v1/models/good:predict", json=BODY)
    assert answer.status_code == 200, answer.text
    assert server.client.get("/v2/models/good/ready").status_code == 200
    index = _index(server)
    assert index["good"] == ("1", "READY", "")
    for name, fragment in BROKEN.items():
        status = _status(server, name)
        assert status["state"] == "END", status
        message = status["status"]["error_message"]
        assert fragment in message, message
        version, state, reason = index[name]
        assert (state, reason) == ("UNAVAILABLE", message)
        # A model with no version on disk has no version in the index (status needs one: 0).
        assert version == ("1" if name == "truncated" else ""), index[name]
        refused = server.client.post(f"/v1/models/{name}:predict", json=BODY)
        assert refused.status_code == 503, refused.text
        assert fragment in refused.json()["error"]
        assert server.client.get(f"/v2/models/{name}/ready").status_code == 503
        assert f"failed to load '{name}'" in server.log()
    failed = _load_failed(server)
    assert [failed[name] for name in ("good", *BROKEN)] == [0, 1, 1, 1]


def test_without_strict_readiness_the_server_is_ready_with_failed_models(
    repository_server: Server,
) -> None:
    server = repository_server
    assert server.client.get("/v2/health/ready").json() == {"ready": True}
    assert _health(server, "") == SERVING
    assert _health(server, "good") == SERVING
    for name in BROKEN:
        assert _health(server, name) == NOT_SERVING


def test_a_broken_model_fixed_while_serving_loads(
    repository_server: Server, repository: Path, models_dir: Path
) -> None:
    server = repository_server
    assert _status(server, "late")["state"] == "END"
    shutil.copytree(models_dir / "tiny" / "1", repository / "late" / "1")
    answer = server.client.post("/v2/repository/models/late/load")
    assert answer.status_code == 200, answer.text
    assert _status(server, "late") == {
        "version": "1",
        "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""},
    }
    assert server.client.post("/v1/models/late:predict", json=BODY).status_code == 200
    assert _load_failed(server)["late"] == 0
    assert _health(server, "late") == SERVING


def test_a_config_file_with_a_missing_path_starts_and_strict_readiness_says_not_ready(
    models_dir: Path, tmp_path: Path
) -> None:
    config = tmp_path / "models.config"
    config.write_text(
        "model_config_list {\n"
        f"  config {{ name: 'tiny' base_path: '{models_dir / 'tiny'}' }}\n"
        f"  config {{ name: 'gone' base_path: '{tmp_path / 'not-here'}' }}\n"
        "}\n"
    )
    args = ["--model-config-file", str(config), "--strict-readiness"]
    server = Server(None, tmp_path / "serve.log", args)
    try:
        server.wait_available("tiny")
        _wait(lambda: _settled(server, ["tiny", "gone"]), "the loads to settle", server)
        assert server.client.post("/v1/models/tiny:predict", json=BODY).status_code == 200
        status = _status(server, "gone")
        assert status["state"] == "END"
        assert "does not exist" in status["status"]["error_message"]
        assert _index(server)["gone"][1:] == ("UNAVAILABLE", status["status"]["error_message"])
        ready = server.client.get("/v2/health/ready")
        assert ready.status_code == 503, ready.text
        assert "'gone' failed to load" in ready.json()["error"]
        assert server.client.get("/v2/models/tiny/ready").status_code == 200
        assert _health(server, "tiny") == SERVING
        assert _health(server, "") == NOT_SERVING
        assert _load_failed(server) == {"tiny": 0, "gone": 1}
        assert "failed to load 'gone'" in server.log()
    finally:
        assert server.stop() == 0, server.log()


def _ports() -> list[str]:
    return ["--host", "127.0.0.1", "--rest-port", str(free_port()), "--grpc-port", str(free_port())]


def test_exit_on_error_refuses_a_model_that_cannot_be_read(
    models_dir: Path, tmp_path: Path
) -> None:
    root = _repository(tmp_path / "models", models_dir / "tiny")
    shutil.rmtree(root / "half")
    shutil.rmtree(root / "truncated")
    result = run_cli("serve", "--model-repository", str(root), "--exit-on-error", *_ports())
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: model repository: 'empty' holds no model: {(root / 'empty').resolve()} is "
        "neither a SavedModel, TorchScript, ONNX or torch.export directory (saved_model.pb, "
        "model.pt, model.onnx, model.pt2) nor a model base path with numeric version "
        "subdirectories"
    ]


def test_exit_on_error_stops_when_a_model_fails_to_load(models_dir: Path, tmp_path: Path) -> None:
    root = _repository(tmp_path / "models", models_dir / "tiny")
    shutil.rmtree(root / "empty")
    shutil.rmtree(root / "half")
    result = run_cli("serve", "--model-repository", str(root), "--exit-on-error", *_ports())
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-2]  # then "server stopped"
    assert "stopping (--exit-on-error): 'truncated' failed to load: TensorFlow could not" in last


@pytest.mark.parametrize(
    ("make", "line"),
    [
        pytest.param(
            lambda root: root.mkdir(),
            "error: no model to serve: the model config file or repository names none",
            id="no-model",
        ),
        pytest.param(
            lambda root: None,
            "error: model repository {root} does not exist or is not a directory",
            id="no-repository",
        ),
        pytest.param(
            lambda root: (root / "a" / "1").mkdir(parents=True),
            "error: no model to serve: none of the 1 models named can be read: model "
            "repository: 'a' holds no model: {root}/a is neither a SavedModel, TorchScript, "
            "ONNX or torch.export directory (saved_model.pb, model.pt, model.onnx, model.pt2) "
            "nor a model base path with numeric version subdirectories; its version folders [1] "
            "hold no saved_model.pb, model.pt, model.onnx or model.pt2: copied in part, or "
            "still being copied?",
            id="none-readable",
        ),
    ],
)
def test_what_cannot_be_served_at_all_is_refused_at_once(
    make: Callable[[Path], None], line: str, tmp_path: Path
) -> None:
    root = tmp_path / "models"
    make(root)
    result = run_cli("serve", "--model-repository", str(root), *_ports())
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [line.format(root=root.resolve())]

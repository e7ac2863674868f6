"""Models loaded and unloaded while `sharedserve serve --model-repository` serves: Triton's
repository API with NVIDIA's own client (HTTP and gRPC), under traffic to another model, with a
request in flight on the model being unloaded, and with a model that cannot load.

One server on a repository of TensorFlow ``tiny``, ``held`` (``tiny`` again, batching with a
long batch timeout, so that a request waits in its batcher) and ``torchy`` (TorchScript
``tiny``), beside ``broken`` (a SavedModel that is not one), which fails at start.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.servers import Server
from tests.support.triton_client import TritonClient

pytestmark = [pytest.mark.tensorflow, pytest.mark.torch]

SCRIPT = Path(__file__).parents[2] / "support" / "triton_repository.py"
BODY = {"instances": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]}
# A request to `held` waits in its batcher for this long unless 64 rows arrive first.
HELD_BATCHING = "batching:\n  max_batch_size: 64\n  batch_timeout_micros: 1500000\n"


@pytest.fixture(scope="module")
def triton(request: pytest.FixtureRequest) -> TritonClient:
    return TritonClient(request.config.cache.mkdir("tritonclient-env"))


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("load-unload") / "models"


@pytest.fixture(scope="module")
def server(
    triton: TritonClient,
    repository: Path,
    models_dir: Path,
    torch_models_dir: Path,
) -> Iterator[Server]:
    shutil.copytree(models_dir / "tiny", repository / "tiny")
    shutil.copytree(models_dir / "tiny", repository / "held")
    (repository / "held" / "sharedserve.yaml").write_text(HELD_BATCHING)
    shutil.copytree(torch_models_dir / "tiny", repository / "torchy")
    (repository / "broken" / "1").mkdir(parents=True)
    (repository / "broken" / "1" / "saved_model.pb").write_bytes(b"not a SavedModel")
    served = Server(None, repository.parent / "serve.log", ["--model-repository", str(repository)])
    try:
        for name in ("tiny", "held", "torchy"):
            served.wait_available(name)
        _wait(lambda: _state(served, "broken") == "END", "broken to fail")
        yield served
    finally:
        served.stop()


def _wait(done: Any, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"waited in vain for {what}"
        time.sleep(0.05)


def _state(server: Server, name: str) -> str | None:
    answer = server.client.get(f"/v1/models/{name}")
    if answer.status_code == 404:
        return None
    return str(answer.json()["model_version_status"][0]["state"])


def _queue_depth(server: Server, name: str) -> float:
    for family in text_string_to_metric_families(server.client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "sharedserve_queue_depth" and sample.labels["model"] == name:
                return sample.value
    return 0.0


def _index(server: Server) -> dict[str, tuple[str, str]]:
    rows = server.client.post("/v2/repository/index").json()
    return {row["name"]: (row["state"], row["reason"]) for row in rows}


def test_a_model_that_fails_to_load_is_reported_and_the_others_serve(server: Server) -> None:
    assert server.process.poll() is None  # with many models, one failure does not stop the rest
    (status,) = server.client.get("/v1/models/broken").json()["model_version_status"]
    assert status["state"] == "END"
    assert status["status"]["error_message"]
    state, reason = _index(server)["broken"]
    assert state == "UNAVAILABLE" and reason == status["status"]["error_message"]
    assert server.client.get("/v2/health/ready").status_code == 200
    assert server.client.post("/v1/models/tiny:predict", json=BODY).status_code == 200
    refused = server.client.post("/v1/models/broken:predict", json=BODY)
    assert refused.status_code == 503, refused.text


def test_tritonclient_indexes_loads_and_unloads(
    server: Server, triton: TritonClient, repository: Path, models_dir: Path
) -> None:
    shutil.copytree(models_dir / "tiny", repository / "late")  # added since the server started
    calls = [
        ["http", "index", ""],
        ["http", "load", "late"],
        ["grpc", "index", ""],
        ["grpc", "unload", "late"],
        ["http", "index", ""],
        ["grpc", "load", "late"],
        ["http", "load", "no-such-model"],
        ["grpc", "load", "no-such-model"],
        ["http", "load", "broken"],
        ["grpc", "load", "broken"],
        ["grpc", "unload", "no-such-model"],
    ]
    arguments = {"http": server.base.removeprefix("http://"), "grpc": server.grpc_target}
    results = triton.run(SCRIPT, arguments | {"calls": calls})
    rows = [{r["name"]: r for r in result.get("value") or []} for result in results]
    before, loaded, unloaded = rows[0], rows[2], rows[4]
    assert before["late"] | {"reason": ""} == {
        "name": "late",
        "version": "",
        "state": "UNAVAILABLE",
        "reason": "",
    }
    assert before["tiny"]["state"] == "READY" and before["tiny"]["version"] == "1"
    assert loaded["late"]["state"] == "READY"
    assert unloaded["late"]["state"] == "UNAVAILABLE"
    for i in (1, 3, 5):
        assert results[i] == {"value": None}, results[i]
    assert _state(server, "late") == "AVAILABLE"  # the gRPC load, last
    assert server.client.post("/v1/models/late:predict", json=BODY).status_code == 200
    # Loaded while serving, it takes its turn in the shared scheduler like the others.
    shares = server.client.get("/sharedserve/v1/limits").json()["models"]
    assert set(shares) >= {"tiny", "late"}, shares
    http_unknown, grpc_unknown = results[6]["error"], results[7]["error"]
    assert http_unknown["status"] == "404" and "no-such-model" in http_unknown["message"]
    assert grpc_unknown["status"] == "StatusCode.NOT_FOUND"
    http_broken, grpc_broken = results[8]["error"], results[9]["error"]
    assert http_broken["status"] == "400" and "broken" in http_broken["message"]
    assert grpc_broken["status"] == "StatusCode.INVALID_ARGUMENT"
    assert results[10]["error"]["status"] == "StatusCode.NOT_FOUND"
    assert server.client.post("/v1/models/tiny:predict", json=BODY).status_code == 200


def test_loading_and_unloading_fails_no_request_to_another_model(
    server: Server, repository: Path, models_dir: Path
) -> None:
    shutil.copytree(models_dir / "tiny", repository / "extra")
    statuses: Counter[int] = Counter()
    stop = threading.Event()

    def traffic() -> None:
        with httpx.Client(base_url=server.base, timeout=60) as client:
            while not stop.is_set():
                statuses[client.post("/v1/models/tiny:predict", json=BODY).status_code] += 1

    senders = [threading.Thread(target=traffic) for _ in range(2)]
    for sender in senders:
        sender.start()
    try:
        _wait(lambda: statuses.total() >= 10, "traffic to start")
        load = server.client.post("/v2/repository/models/extra/load")
        unload = server.client.post("/v2/repository/models/torchy/unload")
        counted = statuses.total()
        _wait(lambda: statuses.total() >= counted + 10, "traffic after the changes")
    finally:
        stop.set()
        for sender in senders:
            sender.join(60)
    assert (load.status_code, unload.status_code) == (200, 200), (load.text, unload.text)
    assert statuses == {200: statuses.total()}, statuses
    assert _state(server, "extra") == "AVAILABLE"
    assert _state(server, "torchy") is None  # not served: TF Serving's 404
    gone = server.client.post("/v1/models/torchy:predict", json=BODY)
    assert gone.status_code == 404, gone.text
    assert _index(server)["torchy"] == ("UNAVAILABLE", "unloaded")


def test_a_request_in_flight_on_an_unloaded_model_gets_its_answer(server: Server) -> None:
    answers: list[httpx.Response] = []

    def request() -> None:
        with httpx.Client(base_url=server.base, timeout=60) as client:
            answers.append(client.post("/v1/models/held:predict", json=BODY))

    sender = threading.Thread(target=request)
    sender.start()
    _wait(lambda: _queue_depth(server, "held") >= 1, "the request to wait in held's batcher")
    unload = server.client.post("/v2/repository/models/held/unload")
    sender.join(60)
    assert unload.status_code == 200, unload.text
    assert [a.status_code for a in answers] == [200], [a.text for a in answers]
    assert len(answers[0].json()["predictions"][0]) == 4
    assert server.client.post("/v1/models/held:predict", json=BODY).status_code == 404
    assert server.client.post("/v2/repository/models/held/load").status_code == 200
    assert _state(server, "held") == "AVAILABLE"

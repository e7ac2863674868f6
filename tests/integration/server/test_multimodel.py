"""Many models in one server process: every wire format routes by name, version and label.

One in-process ``ModelServer`` holds TensorFlow ``tiny`` versions 1 and 2 (a copy of
version 1), labelled ``stable`` and ``canary``; TorchScript ``tiny`` served as ``tiny_torch``;
and ``slow``, TensorFlow ``tiny`` again, whose load waits until the fixture has seen the others
turn AVAILABLE without it. Its HTTP app and gRPC server run in this process on loopback, and
are asked with TF Serving's own client messages and Triton's client.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_service_pb2_grpc,
    prediction_service_pb2_grpc,
)

from sharedserve.server.metrics import EVERY_MODEL
from sharedserve.server.repository import VersionToServe
from sharedserve.server.version import Backend, ModelSource, find_model, make_backend
from sharedserve.server.version.backends.tensorflow import TensorFlowBackend
from tests.support import protos
from tests.support.in_process import loopback_settings, serving_in_process
from tests.support.triton_client import TritonClient

# TorchScript loads in this process here, where pytest makes warnings errors; torch warns that
# its own torch.jit is deprecated (a served process only logs it).
pytestmark = [
    pytest.mark.tensorflow,
    pytest.mark.torch,
    pytest.mark.filterwarnings("ignore:`torch.jit"),
]

ROWS = [[0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]
SCRIPT = Path(__file__).parents[2] / "support" / "triton_models.py"


class GatedBackend(TensorFlowBackend):
    """The real TensorFlow backend whose load waits until the test opens the gate."""

    def __init__(self, path: Path, gate: threading.Event) -> None:
        super().__init__(path)
        self.gate = gate

    def load(self) -> None:
        assert self.gate.wait(120)
        super().load()


@dataclass
class Served:
    client: httpx.Client
    grpc_target: str
    http_target: str
    before_slow: dict[str, int]  # path -> status while ``slow`` was still loading


def _poll(client: httpx.Client, path: str, status: int = 200, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while client.get(path).status_code != status:
        assert time.monotonic() < deadline, f"{path} never answered {status}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def triton(request: pytest.FixtureRequest) -> TritonClient:
    """Requested before the server, so its venv builds while the models load."""
    return TritonClient(request.config.cache.mkdir("tritonclient-env"))


@pytest.fixture(scope="module")
def served(
    triton: TritonClient,
    models_dir: Path,
    torch_models_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Served]:
    second = tmp_path_factory.mktemp("repository") / "tiny" / "2"
    shutil.copytree(models_dir / "tiny" / "1", second)
    gate = threading.Event()
    sources = [
        find_model(models_dir / "tiny" / "1", "tiny"),
        find_model(second, "tiny"),
        find_model(torch_models_dir / "tiny" / "1", "tiny_torch"),
        find_model(models_dir / "tiny" / "1", "slow"),
    ]
    entries = [
        VersionToServe(s, labels={"stable": 1, "canary": 2} if s.name == "tiny" else {})
        for s in sources
    ]

    def backend(source: ModelSource) -> Backend:
        return GatedBackend(source.path, gate) if source.name == "slow" else make_backend(source)

    settings = loopback_settings(max_request_elements=1 << 20)
    try:
        with (
            serving_in_process(entries, settings, backends=backend, wait_loaded=False) as served,
            httpx.Client(base_url=served.base, timeout=60) as client,
        ):
            _poll(client, "/v2/models/tiny_torch/ready")  # the last before slow
            paths = ["/v2/health/ready", "/v2/models/tiny/ready", "/v2/models/slow/ready"]
            before = {path: client.get(path).status_code for path in paths}
            gate.set()
            _poll(client, "/v2/health/ready")
            yield Served(client, served.grpc_target, served.base.removeprefix("http://"), before)
    finally:
        gate.set()


def test_each_model_turns_available_on_its_own(served: Served) -> None:
    # The server is ready once every model is (the OIP's wording); each model on its own.
    assert served.before_slow == {
        "/v2/health/ready": 503,
        "/v2/models/tiny/ready": 200,
        "/v2/models/slow/ready": 503,
    }


def test_tf_serving_rest_lists_and_routes_versions_and_labels(served: Served) -> None:
    client = served.client
    statuses = client.get("/v1/models/tiny").json()["model_version_status"]
    assert [(s["version"], s["state"]) for s in statuses] == [
        ("1", "AVAILABLE"),
        ("2", "AVAILABLE"),
    ]
    for path, version in [("/versions/1", "1"), ("/labels/stable", "1"), ("/labels/canary", "2")]:
        (status,) = client.get(f"/v1/models/tiny{path}").json()["model_version_status"]
        assert status["version"] == version
    metadata = client.get("/v1/models/tiny/labels/canary/metadata").json()
    assert metadata["model_spec"] == {"name": "tiny", "signature_name": "", "version": "2"}
    unknown = client.get("/v1/models/tiny/labels/nope")
    assert unknown.status_code == 404
    assert unknown.json()["error"] == "Unrecognized servable version label: 'nope'"
    assert client.get("/v1/models/tiny_torch/labels/stable").status_code == 404  # tiny's label
    assert client.get("/v1/models/tiny/versions/3").status_code == 404
    body = {"instances": ROWS}
    answers = [
        client.post(f"/v1/models/{path}:predict", json=body)
        for path in ("tiny", "tiny/versions/1", "tiny/labels/canary", "tiny_torch", "slow")
    ]
    assert [a.status_code for a in answers] == [200] * 5, [a.text for a in answers]
    tiny, v1, canary, torch, slow = (np.asarray(a.json()["predictions"]) for a in answers)
    for same in (v1, canary, slow):  # copies of one SavedModel
        np.testing.assert_allclose(same, tiny, rtol=1e-6)
    assert not np.allclose(torch, tiny, atol=1e-3)  # TorchScript's tiny has weights of its own
    assert client.post("/v1/models/nope:predict", json=body).status_code == 404


def test_tf_serving_grpc_routes_by_name_version_and_label(served: Served) -> None:
    x = np.asarray(ROWS, dtype=np.float32)
    with grpc.insecure_channel(served.grpc_target) as channel:
        predict = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict
        status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus

        def spec(name: str, version: int | None = None, label: str = "") -> tuple[str, int]:
            request = protos.predict_request(name, {"x": x})
            if version is not None:
                request.model_spec.version.value = version
            if label:
                request.model_spec.version_label = label
            answered = predict(request, timeout=30).model_spec
            return answered.name, answered.version.value

        assert spec("tiny") == ("tiny", 2)  # the latest
        assert spec("tiny", 1) == ("tiny", 1)
        assert spec("tiny", label="stable") == ("tiny", 1)
        assert spec("tiny_torch") == ("tiny_torch", 1)
        with pytest.raises(grpc.RpcError) as info:
            spec("tiny", label="nope")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert "Unrecognized servable version label" in str(info.value.details())
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = "tiny"
        versions = status(request, timeout=30).model_version_status
        assert [(v.version, v.state) for v in versions] == [(1, 30), (2, 30)]  # 30: AVAILABLE
        request.model_spec.version_label = "canary"
        assert [v.version for v in status(request, timeout=30).model_version_status] == [2]


def test_oip_rest_routes_by_name_and_version(served: Served) -> None:
    client = served.client
    assert client.get("/v2/models/tiny").json()["versions"] == ["1", "2"]
    assert client.get("/v2/models/tiny_torch").json()["platform"] == "pytorch_libtorch"
    assert client.get("/v2/models/tiny/versions/2").json()["platform"] == "tensorflow_savedmodel"
    tensor = {"name": "x", "datatype": "FP32", "shape": [2, 8], "data": ROWS}
    for path, name, version in [
        ("tiny", "tiny", "2"),
        ("tiny/versions/1", "tiny", "1"),
        ("tiny_torch", "tiny_torch", "1"),
    ]:
        answer = client.post(f"/v2/models/{path}/infer", json={"inputs": [tensor]})
        assert answer.status_code == 200, answer.text
        assert (answer.json()["model_name"], answer.json()["model_version"]) == (name, version)
    assert (
        client.post("/v2/models/tiny/versions/3/infer", json={"inputs": [tensor]}).status_code
        == 404
    )


def test_tritonclient_routes_by_name_and_version(served: Served, triton: TritonClient) -> None:
    targets = [["tiny", ""], ["tiny", "1"], ["tiny", "2"], ["tiny_torch", ""], ["slow", ""]]
    arguments = {"http": served.http_target, "grpc": served.grpc_target, "input": "x"}
    answers = triton.run(SCRIPT, arguments | {"rows": ROWS, "targets": targets})
    assert answers["http_ready"] is True and answers["grpc_ready"] is True
    expected = {"tiny/": "2", "tiny/1": "1", "tiny/2": "2", "tiny_torch/": "1", "slow/": "1"}
    for target, version in expected.items():
        name = target.split("/")[0]
        answer = answers[target]
        for protocol in ("http", "grpc"):
            assert "error" not in answer[protocol], answer
            assert (answer[protocol]["model_name"], answer[protocol]["model_version"]) == (
                name,
                version,
            )
            assert answer[f"{protocol}_model_ready"] is True
        versions = ["1", "2"] if name == "tiny" else ["1"]
        assert answer["http_metadata"]["versions"] == versions
        assert answer["grpc_metadata"]["versions"] == versions


def _requests(client: httpx.Client) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "sharedserve_requests_total":
                counts[sample.labels["model"], sample.labels["protocol"]] += int(sample.value)
    return counts


def test_metrics_count_each_model_under_its_name(served: Served) -> None:
    client = served.client
    before = _requests(client)
    assert client.post("/v1/models/tiny_torch:predict", json={"instances": ROWS}).status_code == 200
    assert client.post("/v1/models/slow:predict", json={"instances": ROWS}).status_code == 200
    assert client.post("/v1/models/made-up:predict", json={"instances": ROWS}).status_code == 404
    counted = _requests(client)
    counted.subtract(before)
    assert +counted == Counter(
        {("tiny_torch", "rest"): 1, ("slow", "rest"): 1, (EVERY_MODEL, "rest"): 1}
    )
    text = client.get("/metrics").text
    queues = {
        line.split()[0] for line in text.splitlines() if line.startswith("sharedserve_queue_depth")
    }
    assert queues == {
        f'sharedserve_queue_depth{{model="{n}"}}' for n in ("tiny", "tiny_torch", "slow")
    }
    assert f'sharedserve_request_body_arriving_bytes{{model="{EVERY_MODEL}"}}' in text


def test_openapi_names_every_model(served: Served) -> None:
    document = served.client.get("/openapi.json").json()
    (name,) = [
        p for p in document["paths"]["/v1/models/{name}"]["parameters"] if p["name"] == "name"
    ]
    assert name["schema"]["enum"] == ["tiny", "tiny_torch", "slow"]

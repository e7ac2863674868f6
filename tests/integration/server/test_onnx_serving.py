"""An ONNX ``tiny`` exported by the CLI from the torch module, served by the real server over
every API (TF Serving's REST and gRPC, the Open Inference Protocol's REST and gRPC), answering
as the TorchScript ``tiny`` it came from (same seed, same weights) to float tolerance; and a
malformed ``model.onnx`` beside a good model (batched): a clear load error, the other model
serving.

The ONNX server runs with TensorFlow hidden, as the TorchScript one (``torch_server``); the test
process keeps it, to be TF Serving's own gRPC client.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.support.onnx_models import write_malformed
from tests.support.servers import Server, serving
from tests.support.tiny_apis import APIS, ROWS, TOLERANCE, assert_answers_as

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow, pytest.mark.torch, pytest.mark.onnx]

BATCHED = "batching: {max_batch_size: 8, batch_timeout_micros: 0}\n"


@pytest.fixture(scope="module")
def onnx_server(
    onnx_models_dir: Path, without_tf_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("logs") / "onnx.log"
    yield from serving(onnx_models_dir / "tiny", log, ["--cpu-limit", "1"], env=without_tf_env)


@pytest.mark.parametrize("api", APIS, ids=lambda f: f.__name__)
def test_every_api_answers_as_the_torchscript_model_it_came_from(
    api: Callable[[Server], np.ndarray], onnx_server: Server, torch_server: Server
) -> None:
    assert_answers_as(api(onnx_server), api(torch_server))


def test_the_signature_is_read_from_the_model(onnx_server: Server) -> None:
    metadata = onnx_server.client.get("/v1/models/tiny/metadata").json()
    signature = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]
    x, out = signature["inputs"]["x"], signature["outputs"]["probabilities"]
    assert (x["dtype"], out["dtype"]) == ("DT_FLOAT", "DT_FLOAT")
    assert [d["size"] for d in x["tensor_shape"]["dim"]] == ["-1", "8"]  # the batch: dynamic
    assert [d["size"] for d in out["tensor_shape"]["dim"]] == ["-1", "4"]
    model = onnx_server.client.get("/v2/models/tiny").json()
    assert model["platform"] == "onnxruntime_onnx"
    assert model["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}]
    bad = onnx_server.client.post("/v1/models/tiny:predict", json={"instances": [[1.0, 2.0]]})
    assert bad.status_code == 400 and "expected shape [-1, 8]" in bad.json()["error"]


def test_threads_follow_the_cpu_limit_and_limits_say_how_it_pages(onnx_server: Server) -> None:
    limits = onnx_server.client.get("/sharedserve/v1/limits").json()
    assert (limits["intra_op_threads"], limits["cpu_limit_source"]) == (1, "flag")
    version = limits["models"]["tiny"]["versions"]["1"]
    assert version["page_in_from"] == "mapped_file"
    assert version["enforced"] is False  # no budget: no arena cap
    assert version["weights_mib"] > 0 and version["measured_on"] == "host"


@pytest.fixture(scope="module")
def with_malformed(
    onnx_models_dir: Path, without_tf_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("malformed") / "models"
    shutil.copytree(onnx_models_dir / "tiny", root / "good")
    (root / "good" / "sharedserve.yaml").write_text(BATCHED)
    write_malformed(root / "broken" / "1")
    log = root.parent / "serve.log"
    server = Server(None, log, ["--model-repository", str(root)], env=without_tf_env)
    try:
        server.wait_available("good")
        yield server
    finally:
        assert server.stop() == 0, server.log()


def _one(server: Server, row: list[float]) -> list[float]:
    response = server.client.post("/v1/models/good:predict", json={"instances": [row]})
    assert response.status_code == 200, response.text
    return list(response.json()["predictions"][0])


def test_a_malformed_file_fails_to_load_with_its_reason_and_the_other_model_serves(
    with_malformed: Server,
) -> None:
    response = with_malformed.client.post(
        "/v1/models/good:predict", json={"instances": ROWS.tolist()}
    )
    assert response.status_code == 200, response.text
    (status,) = with_malformed.client.get("/v1/models/broken").json()["model_version_status"]
    message = status["status"]["error_message"]
    assert status["state"] == "END", status
    assert message.startswith("onnxruntime could not load ") and "broken/1/model.onnx" in message
    rows = ROWS.tolist() * 3
    with ThreadPoolExecutor(len(rows)) as pool:  # one row each, batched as they meet
        answers = list(pool.map(lambda row: _one(with_malformed, row), rows))
    expected = np.asarray(response.json()["predictions"] * 3)
    np.testing.assert_allclose(np.asarray(answers), expected, **TOLERANCE)
    refused = with_malformed.client.post(
        "/v1/models/broken:predict", json={"instances": ROWS.tolist()}
    )
    assert refused.status_code == 503 and "failed to load" in refused.json()["error"]

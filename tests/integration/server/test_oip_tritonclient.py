"""The Open Inference Protocol against NVIDIA's own client, ``tritonclient`` (HTTP and gRPC).

Both backends are served by the real ``sharedserve serve``: the TensorFlow ``tiny`` and its
TorchScript build (the session's ``tiny_server`` and ``torch_server``). The client cannot share a
process with sharedserve (its protobuf pin), so one child process per server makes every call
(``support/triton_calls.py``) and this module checks its answers, each output against what the
same server says on TF Serving's REST API.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.servers import Server
from tests.support.triton_client import TritonClient

pytestmark = [pytest.mark.tensorflow, pytest.mark.torch]

CALLS = Path(__file__).parents[2] / "support" / "triton_calls.py"
ROWS = [
    [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0],
    [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
    [-2.0, 1.0, 0.0, 4.0, -0.5, 0.75, 1.25, -3.0],
]
PLATFORM = {"tensorflow": "tensorflow_savedmodel", "torch": "pytorch_libtorch"}


@pytest.fixture(scope="session")
def triton(request: pytest.FixtureRequest) -> TritonClient:
    """Requested before the servers, so its venv builds while they start."""
    return TritonClient(request.config.cache.mkdir("tritonclient-env"))


@dataclass
class Run:
    """One client process's answers, and what to hold them to."""

    framework: str
    http: dict[str, Any]
    grpc: dict[str, Any]
    expected: np.ndarray  # TF Serving REST's predictions for ROWS
    requests: Counter[tuple[str, str]]  # (protocol, code) -> calls counted during the run


def _requests(server: Server) -> Counter[tuple[str, str]]:
    text = server.client.get("/metrics").text
    counts: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "sharedserve_requests_total":
                counts[sample.labels["protocol"], sample.labels["code"]] += int(sample.value)
    return counts


@pytest.fixture(scope="module", params=["tensorflow", "torch"])
def run(request: pytest.FixtureRequest, triton: TritonClient) -> Run:
    framework = request.param
    server: Server = request.getfixturevalue(
        "tiny_server" if framework == "tensorflow" else "torch_server"
    )
    before = _requests(server)
    arguments = {"http": server.base.removeprefix("http://"), "grpc": server.grpc_target}
    arguments |= {"model": "tiny", "input": "x", "output": "probabilities", "rows": ROWS}
    answers = triton.run(CALLS, arguments)
    requests = _requests(server)
    requests.subtract(before)
    predicted = server.client.post("/v1/models/tiny:predict", json={"instances": ROWS})
    assert predicted.status_code == 200, predicted.text
    expected = np.asarray(predicted.json()["predictions"], dtype=np.float32)
    assert expected.shape == (3, 4)
    return Run(framework, answers["http"], answers["grpc"], expected, +requests)


def value(result: dict[str, Any]) -> Any:
    assert "error" not in result, result
    return result["value"]


def error(result: dict[str, Any]) -> dict[str, str]:
    assert "error" in result, f"expected an error, got {result}"
    return result["error"]


def test_health_and_readiness(run: Run) -> None:
    for answers in (run.http, run.grpc):
        assert value(answers["live"]) is True
        assert value(answers["ready"]) is True
        assert value(answers["model_ready"]) is True
    assert value(run.http["unknown_model_ready"]) is False  # the client reads a 404 as "no"
    unknown = error(run.grpc["unknown_model_ready"])
    assert unknown["status"] == "StatusCode.NOT_FOUND"
    assert "Servable not found" in unknown["message"]


def test_server_metadata(run: Run) -> None:
    for answers in (run.http, run.grpc):
        metadata = value(answers["server_metadata"])
        assert metadata["name"] == "sharedserve"
        assert metadata["version"]
        assert "binary_tensor_data" in metadata["extensions"]


def test_model_metadata(run: Run) -> None:
    expected = {
        "name": "tiny",
        "versions": ["1"],
        "platform": PLATFORM[run.framework],
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}],
        "outputs": [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 4]}],
    }
    assert value(run.http["model_metadata"]) == expected
    grpc = value(run.grpc["model_metadata"])
    for tensor in grpc["inputs"] + grpc["outputs"]:  # protobuf's JSON writes int64 as strings
        tensor["shape"] = [int(d) for d in tensor["shape"]]
    assert grpc == expected
    assert error(run.http["unknown_model_metadata"])["status"] == "404"
    assert error(run.grpc["unknown_model_metadata"])["status"] == "StatusCode.NOT_FOUND"


@pytest.mark.parametrize(
    ("call", "binary"),
    [
        ("json_in_json_out", False),
        ("binary_in_binary_out", True),
        ("binary_in_json_out", False),
        ("json_in_binary_out", True),
        ("no_outputs", True),  # the client then asks for binary_data_output
    ],
)
def test_http_infer_matches_tf_serving(run: Run, call: str, binary: bool) -> None:
    result = value(run.http[call])
    assert (result["model_name"], result["outputs"]) == ("tiny", ["probabilities"])
    assert (result["datatype"], result["shape"], result["dtype"]) == ("FP32", [3, 4], "float32")
    assert result["binary"] is binary
    np.testing.assert_allclose(result["values"], run.expected, rtol=1e-5, atol=1e-7)


def test_request_id_is_echoed(run: Run) -> None:
    assert value(run.http["json_in_json_out"])["id"] == "rest-1"
    assert value(run.http["binary_in_binary_out"])["id"] == "rest-2"
    assert value(run.http["binary_in_json_out"])["id"] is None
    assert value(run.grpc["output_requested"])["id"] == "grpc-1"
    assert value(run.grpc["no_outputs"])["id"] == ""
    assert run.grpc["typed_contents"]["id"] == "typed"


@pytest.mark.parametrize("call", ["output_requested", "no_outputs"])
def test_grpc_infer_matches_tf_serving(run: Run, call: str) -> None:
    result = value(run.grpc[call])
    assert (result["model_name"], result["outputs"]) == ("tiny", ["probabilities"])
    assert (result["datatype"], result["shape"], result["dtype"]) == ("FP32", [3, 4], "float32")
    np.testing.assert_allclose(result["values"], run.expected, rtol=1e-5, atol=1e-7)


def test_grpc_typed_contents_match_tf_serving(run: Run) -> None:
    result = run.grpc["typed_contents"]
    assert result["shape"] == [3, 4]
    np.testing.assert_allclose(result["values"], run.expected, rtol=1e-5, atol=1e-7)


def test_wrong_datatype_is_the_clients_error(run: Run) -> None:
    http = error(run.http["wrong_datatype"])
    assert http == {"status": "400", "message": "input 'x': expected datatype FP32, got FP64"}
    grpc = error(run.grpc["wrong_datatype"])
    assert grpc["status"] == "StatusCode.INVALID_ARGUMENT"
    assert grpc["message"] == "input 'x': expected datatype FP32, got FP64"


def test_wrong_shape_is_invalid_argument(run: Run) -> None:
    grpc = error(run.grpc["wrong_shape"])
    assert grpc["status"] == "StatusCode.INVALID_ARGUMENT"
    assert grpc["message"] == "input 'x': expected shape [-1, 8], got [3, 7]"


def test_unknown_model_infer_is_not_found(run: Run) -> None:
    http = error(run.http["unknown_model_infer"])
    assert http["status"] == "404"
    assert "Servable not found" in http["message"]
    assert error(run.grpc["unknown_model_infer"])["status"] == "StatusCode.NOT_FOUND"


def test_metrics_count_every_infer_by_protocol(run: Run) -> None:
    oip = {key: n for key, n in run.requests.items() if key[0].startswith("oip-")}
    assert oip == {
        ("oip-rest", "200"): 5,
        ("oip-rest", "400"): 1,
        ("oip-rest", "404"): 1,
        ("oip-grpc", "OK"): 3,
        ("oip-grpc", "INVALID_ARGUMENT"): 2,
        ("oip-grpc", "NOT_FOUND"): 1,
    }

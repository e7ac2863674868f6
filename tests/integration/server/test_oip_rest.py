"""The Open Inference Protocol's REST routes on a real server, with the requests no client library
would send: each answers its status with an ``{"error": ...}`` body, and the server serves on."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from tests.support.servers import Server

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

ROW = np.array([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]], dtype=np.float32)
INFER = "/v2/models/tiny/infer"
HEADER = "Inference-Header-Content-Length"


def tensor(**fields: Any) -> dict[str, Any]:
    """Input ``x`` of the row as JSON ``data``, with ``fields`` changed."""
    return {"name": "x", "datatype": "FP32", "shape": [1, 8], "data": ROW[0].tolist()} | fields


def binary(header: dict[str, Any], raw: bytes, length: str | None = None) -> dict[str, Any]:
    """httpx arguments for a binary extension body: the JSON header, then ``raw``."""
    head = orjson.dumps(header)
    return {"content": head + raw, "headers": {HEADER: length or str(len(head))}}


def raw_input(size: int) -> dict[str, Any]:
    """Input ``x`` as binary data of ``size`` bytes (the row takes 32)."""
    fields = tensor(parameters={"binary_data_size": size})
    del fields["data"]
    return fields


GOOD = {"inputs": [tensor()]}
ROW_BYTES = ROW.tobytes()

CASES = [
    pytest.param(INFER, {"content": b'{"inputs": ['}, 400, "JSON is not valid", id="bad-json"),
    pytest.param(INFER, {"content": b""}, 400, "JSON is not valid", id="empty-body"),
    pytest.param(INFER, {"json": [GOOD]}, 400, "must be a JSON object", id="not-an-object"),
    pytest.param(INFER, {"json": {"inputs": {}}}, 400, "'inputs' must be a list", id="inputs"),
    pytest.param(
        INFER,
        binary({"inputs": [raw_input(32)]}, ROW_BYTES, length="1000"),
        400,
        "inference-header-content-length is 1000, but the body has only",
        id="header-length-past-body",
    ),
    pytest.param(
        INFER,
        binary({"inputs": [raw_input(32)]}, ROW_BYTES, length="abc"),
        400,
        "inference-header-content-length must be a byte count, got 'abc'",
        id="header-length-not-a-number",
    ),
    pytest.param(
        INFER,
        binary({"inputs": [raw_input(32)]}, ROW_BYTES, length="-5"),
        400,
        "must be a byte count",
        id="header-length-negative",
    ),
    pytest.param(
        INFER,
        binary({"inputs": [raw_input(32)]}, ROW_BYTES, length="20"),
        400,
        "JSON is not valid",
        id="header-length-cuts-the-json",
    ),
    pytest.param(
        INFER,
        binary({"inputs": [raw_input(64)]}, ROW_BYTES),
        400,
        "binary_data_size 64 runs past the binary data (32 bytes left)",
        id="binary-size-past-data",
    ),
    pytest.param(
        INFER,
        binary({"inputs": [raw_input(-1)]}, ROW_BYTES),
        400,
        "binary_data_size must be a whole number",
        id="binary-size-negative",
    ),
    pytest.param(
        INFER,
        binary({"inputs": [raw_input(32)]}, ROW_BYTES + b"tail"),
        400,
        "4 bytes of binary data after the request's header are claimed by no input",
        id="trailing-binary-bytes",
    ),
    pytest.param(
        INFER,
        binary(GOOD, ROW_BYTES),
        400,
        "32 bytes of binary data after the request's header are claimed by no input",
        id="json-data-and-unclaimed-bytes",
    ),
    pytest.param(
        INFER,
        binary({"inputs": [raw_input(28) | {"shape": [1, 7]}]}, ROW_BYTES[:28]),
        400,
        "input 'x': expected shape [-1, 8], got [1, 7]",
        id="binary-wrong-shape",
    ),
    pytest.param(
        INFER,
        binary({"inputs": [raw_input(30)]}, ROW_BYTES[:30]),
        400,
        "30 bytes of raw data, shape [1, 8] of FP32 needs 32",
        id="binary-size-not-the-shapes",
    ),
    pytest.param(
        INFER,
        {"json": {"inputs": [tensor(name="y")]}},
        400,
        "unknown input 'y'; the signature's inputs are x",
        id="unknown-input",
    ),
    pytest.param(
        INFER,
        {"json": {"inputs": [tensor(), tensor()]}},
        400,
        "input 'x' is given twice",
        id="duplicate-input",
    ),
    pytest.param(INFER, {"json": {"inputs": []}}, 400, "missing input 'x'", id="missing-input"),
    pytest.param(
        INFER,
        {"json": GOOD | {"outputs": [{"name": "logits"}]}},
        400,
        "outputs[0] names unknown output 'logits'; the model's outputs are probabilities",
        id="unknown-output",
    ),
    pytest.param(
        INFER,
        {"json": GOOD | {"outputs": [{"name": "probabilities", "parameters": {"binary_data": 1}}]}},
        400,
        "parameter 'binary_data' must be true or false, got an integer",
        id="binary-data-not-a-flag",
    ),
    pytest.param(
        INFER,
        {"json": {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8]}]}},
        400,
        "input 'x' has neither 'data' nor binary_data_size",
        id="missing-data",
    ),
    pytest.param(
        INFER,
        {"json": {"inputs": [tensor(datatype="FP64")]}},
        400,
        "input 'x': expected datatype FP32, got FP64",
        id="wrong-datatype",
    ),
    pytest.param(
        INFER,
        {"json": {"inputs": [tensor(shape=[1, -8])]}},
        400,
        "'shape' has a negative dimension",
        id="negative-shape",
    ),
    pytest.param(
        INFER,
        {"json": {"inputs": [tensor(data=[True] * 8)]}},
        400,
        "input 'x': expected FP32, got booleans",
        id="booleans-in-fp32",
    ),
    pytest.param(
        INFER,
        {"json": {"inputs": [tensor(shape=[1] * 65, data=[1.0])]}},
        400,
        "input 'x'",
        id="shape-of-65-dimensions",
    ),
    pytest.param(
        INFER,
        {"json": GOOD | {"id": 7}},
        400,
        "'id' must be a string, got an integer",
        id="id-not-a-string",
    ),
    pytest.param(
        INFER,
        {"json": GOOD | {"parameters": {"signature_name": "nope"}}},
        404,
        "Serving signature name: 'nope' not found",
        id="unknown-signature",
    ),
    pytest.param(
        INFER,
        {"content": b"[" + b"0.5," * 20000 + b"0.5]"},
        413,
        "",
        id="body-over-the-limit",
    ),
    pytest.param(
        "/v2/models/tiny/versions/2/infer",
        {"json": GOOD},
        404,
        "Servable not found for request: Specific('tiny', 2)",
        id="unknown-version",
    ),
    pytest.param(
        "/v2/models/tiny/versions/one/infer",
        {"json": GOOD},
        400,
        "version 'one' is not an integer",
        id="malformed-version",
    ),
    pytest.param(
        "/v2/models/nope/infer",
        {"json": GOOD},
        404,
        "Servable not found for request: Latest('nope')",
        id="unknown-model",
    ),
]


@pytest.mark.parametrize(("path", "request_args", "status", "message"), CASES)
def test_infer_refused(
    tiny_server: Server, path: str, request_args: dict[str, Any], status: int, message: str
) -> None:
    response = tiny_server.client.post(path, **request_args)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert message in response.json()["error"]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v2/nope", 404),
        ("GET", "/v2/models/tiny/nope", 404),
        ("GET", "/v2/models/nope", 404),
        ("GET", "/v2/models/nope/ready", 404),
        ("GET", "/v2/models/tiny/versions/2", 404),
        ("GET", "/v2/models/tiny/versions/2/ready", 404),
        ("GET", "/v2/models/tiny/versions/x/ready", 400),
        ("GET", INFER, 405),
        ("POST", "/v2/health/live", 405),
    ],
)
def test_other_routes_refused(tiny_server: Server, method: str, path: str, status: int) -> None:
    response = tiny_server.client.request(method, path)
    assert response.status_code == status, response.text
    assert isinstance(response.json()["error"], str)


def test_health_and_metadata(tiny_server: Server) -> None:
    client = tiny_server.client
    assert client.get("/v2/health/live").json() == {"live": True}
    assert client.get("/v2/health/ready").json() == {"ready": True}
    assert client.get("/v2/models/tiny/ready").json() == {"name": "tiny", "ready": True}
    assert client.get("/v2/models/tiny/versions/1/ready").status_code == 200
    server = client.get("/v2").json()
    assert (server["name"], server["extensions"]) == ("sharedserve", ["binary_tensor_data"])
    metadata = client.get("/v2/models/tiny/versions/1").json()
    assert metadata["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}]


@pytest.mark.parametrize(("own", "binary_out"), [(False, False), (True, True), (None, True)])
def test_an_outputs_own_binary_data_wins_over_binary_data_output(
    tiny_server: Server, own: bool | None, binary_out: bool
) -> None:
    """As Triton does: ``binary_data_output`` is the default for outputs that do not say."""
    output: dict[str, Any] = {"name": "probabilities"}
    if own is not None:
        output["parameters"] = {"binary_data": own}
    request = GOOD | {"outputs": [output], "parameters": {"binary_data_output": True}}
    response = tiny_server.client.post(INFER, json=request)
    assert response.status_code == 200, response.text
    assert (HEADER.lower() in response.headers) == binary_out


def test_still_serves_after_errors(tiny_server: Server) -> None:
    """Last in the module: a binary request and a binary answer, after every refusal above."""
    request = {"id": "after", "inputs": [raw_input(32)]}
    request["outputs"] = [{"name": "probabilities", "parameters": {"binary_data": True}}]
    response = tiny_server.client.post(INFER, **binary(request, ROW_BYTES))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"
    split = int(response.headers[HEADER])
    header = orjson.loads(response.content[:split])
    (output,) = header["outputs"]
    assert (header["id"], output["shape"], output["parameters"]) == (
        "after",
        [1, 4],
        {"binary_data_size": 16},
    )
    values = np.frombuffer(response.content[split:], dtype="<f4")
    expected = tiny_server.client.post(INFER, json=GOOD).json()["outputs"][0]["data"]
    np.testing.assert_allclose(values, expected, rtol=1e-6)

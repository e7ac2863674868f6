"""The TF Serving REST API of a real ``sharedserve serve`` process with real models.

Every error case is followed by a successful request: a bad request must never stop serving.
"""

from __future__ import annotations

import base64
import socket

import pytest

from tests.support.servers import Server

pytestmark = [pytest.mark.tensorflow]

ROW = [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], [1, 2, 3, 4, 5, 6, 7, 8]]


def assert_still_serving(server: Server) -> None:
    response = server.client.post("/v1/models/tiny:predict", json={"instances": ROW[:1]})
    assert response.status_code == 200, response.text
    assert len(response.json()["predictions"][0]) == 4


def test_row_format_returns_predictions_without_output_name(tiny_server: Server) -> None:
    response = tiny_server.client.post("/v1/models/tiny:predict", json={"instances": ROW})
    assert response.status_code == 200
    predictions = response.json()["predictions"]
    assert len(predictions) == 2
    for row in predictions:
        assert len(row) == 4
        assert sum(row) == pytest.approx(1.0, abs=1e-5)  # softmax


def test_columnar_format_matches_row_format(tiny_server: Server) -> None:
    row = tiny_server.client.post("/v1/models/tiny:predict", json={"instances": ROW}).json()
    columnar = tiny_server.client.post("/v1/models/tiny:predict", json={"inputs": {"x": ROW}})
    bare = tiny_server.client.post("/v1/models/tiny/versions/1:predict", json={"inputs": ROW})
    assert columnar.status_code == bare.status_code == 200
    assert columnar.json() == bare.json() == {"outputs": row["predictions"]}


def test_explicit_signature_name(tiny_server: Server) -> None:
    body = {"signature_name": "serving_default", "instances": ROW}
    assert tiny_server.client.post("/v1/models/tiny:predict", json=body).status_code == 200


def test_model_status_and_metadata_shape(tiny_server: Server) -> None:
    status = tiny_server.client.get("/v1/models/tiny").json()
    assert status == {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    assert tiny_server.client.get("/v1/models/tiny/versions/1").json() == status
    metadata = tiny_server.client.get("/v1/models/tiny/metadata").json()
    assert metadata["model_spec"] == {"name": "tiny", "signature_name": "", "version": "1"}
    signature = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]
    x = signature["inputs"]["x"]
    assert x["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in x["tensor_shape"]["dim"]] == ["-1", "8"]
    assert x["tensor_shape"]["unknown_rank"] is False
    assert x["name"] == "serving_default_x:0"
    probabilities = signature["outputs"]["probabilities"]
    assert [d["size"] for d in probabilities["tensor_shape"]["dim"]] == ["-1", "4"]
    assert signature["method_name"] == "tensorflow/serving/predict"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "JSON"),
        (b"[1, 2]", "object"),
        (b'{"instances": [[1, 2, 3]]}', "shape"),
        (b'{"inputs": [[1, 2, 3, 4, 5, 6, 7, 8, 9]]}', "shape"),
        (b'{"instances": [["a", "b", "c", "d", "e", "f", "g", "h"]]}', "DT_FLOAT"),
        (b'{"instances": [[1, 2], [1, 2, 3]]}', ""),
        (b'{"instances": [[1,2,3,4,5,6,7,8]], "inputs": [[1,2,3,4,5,6,7,8]]}', "instances"),
        (b'{"signature_name": "serving_default"}', "instances"),
        (b'{"instances": []}', ""),
    ],
    ids=[
        "malformed",
        "not-object",
        "row-shape",
        "columnar-shape",
        "dtype",
        "ragged",
        "both",
        "neither",
        "empty",
    ],
)
def test_bad_requests_are_400_and_server_lives_on(
    tiny_server: Server, body: bytes, fragment: str
) -> None:
    response = tiny_server.client.post("/v1/models/tiny:predict", content=body)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]
    assert_still_serving(tiny_server)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/models/nope:predict", {"instances": ROW}),
        ("POST", "/v1/models/tiny/versions/7:predict", {"instances": ROW}),
        ("POST", "/v1/models/tiny:predict", {"signature_name": "nope", "instances": ROW}),
        ("GET", "/v1/models/nope", None),
        ("GET", "/v1/models/tiny/versions/2", None),
        ("GET", "/v1/models/nope/metadata", None),
        ("GET", "/v1/models/tiny/labels/stable", None),
        ("GET", "/no/such/path", None),
    ],
    ids=[
        "model",
        "version",
        "signature",
        "status-model",
        "status-version",
        "metadata",
        "label",
        "path",
    ],
)
def test_unknown_things_are_404_and_server_lives_on(
    tiny_server: Server, method: str, path: str, body: dict[str, object] | None
) -> None:
    response = tiny_server.client.request(method, path, json=body)
    assert response.status_code == 404, response.text
    assert response.json()["error"]
    assert_still_serving(tiny_server)


def test_body_over_limit_is_413_by_content_length(tiny_server: Server) -> None:
    body = b'{"instances": [' + b"[1,2,3,4,5,6,7,8]," * 4000 + b"[1,2,3,4,5,6,7,8]]}"
    assert len(body) > 65536
    response = tiny_server.client.post("/v1/models/tiny:predict", content=body)
    assert response.status_code == 413
    assert "65536" in response.json()["error"]
    assert_still_serving(tiny_server)


def test_chunked_body_over_limit_is_413(tiny_server: Server) -> None:
    # A chunked body declares no length: the server counts it as it arrives, answers 413 past
    # its 64 KiB and closes. The client stops at the first chunk past the limit and waits for
    # that answer: one that sent on (as httpx did with the whole body) left bytes unread at the
    # close, and the kernel's reset could overtake the 413 on a loaded machine.
    def chunk(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    head = b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
    rows = b"[1,2,3,4,5,6,7,8]," * 100  # 1,800 bytes a chunk
    with socket.create_connection(("127.0.0.1", tiny_server.port), timeout=30) as sock:
        sock.sendall(head + b"Content-Type: application/json\r\n\r\n" + chunk(b'{"instances": ['))
        for _ in range(65536 // len(rows) + 1):
            sock.sendall(chunk(rows))
        answer = b""
        while data := sock.recv(65536):
            answer += data
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"65536" in answer
    assert_still_serving(tiny_server)


def test_body_just_under_limit_is_served(tiny_server: Server) -> None:
    instances = ",".join(["[1,2,3,4,5,6,7,8]"] * 3000)
    body = ('{"instances": [' + instances + "]}").encode()
    assert len(body) < 65536
    response = tiny_server.client.post("/v1/models/tiny:predict", content=body)
    assert response.status_code == 200
    assert len(response.json()["predictions"]) == 3000


def test_unsupported_verbs(tiny_server: Server) -> None:
    assert tiny_server.client.post("/v1/models/tiny:classify", json={}).status_code == 501
    assert tiny_server.client.post("/v1/models/tiny:explode", json={}).status_code == 400
    wrong_method = tiny_server.client.get("/v1/models/tiny:predict")
    assert (wrong_method.status_code, wrong_method.headers["allow"]) == (405, "POST")
    assert_still_serving(tiny_server)


def test_named_inputs_and_outputs_in_both_formats(edge_server: Server) -> None:
    row = {"instances": [{"a": [1.0, 2.0, 3.0], "b": 5}, {"a": [0.5, 0.5, 0.5], "b": -1}]}
    response = edge_server.client.post("/v1/models/edge:predict", json=row)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "predictions": [{"doubled_b": 10, "total": 6.0}, {"doubled_b": -2, "total": 1.5}]
    }
    columnar = {"inputs": {"a": [[1.0, 2.0, 3.0]], "b": [5]}}
    response = edge_server.client.post("/v1/models/edge:predict", json=columnar)
    assert response.json() == {"outputs": {"doubled_b": [10], "total": [6.0]}}


def test_missing_and_wrongly_typed_named_inputs_are_400(edge_server: Server) -> None:
    client = edge_server.client
    missing = client.post("/v1/models/edge:predict", json={"instances": [{"a": [1, 2, 3]}]})
    assert missing.status_code == 400
    assert "b" in missing.json()["error"]
    fractional = {"inputs": {"a": [[1.0, 2.0, 3.0]], "b": [1.5]}}
    assert client.post("/v1/models/edge:predict", json=fractional).status_code == 400
    ok = client.post("/v1/models/edge:predict", json={"inputs": {"a": [[1, 1, 1]], "b": [1]}})
    assert ok.status_code == 200


def test_b64_binary_inputs_and_bytes_outputs(edge_server: Server) -> None:
    raw = bytes([0, 159, 255, 10, 65])
    body = {
        "signature_name": "strings",
        "instances": [{"b64": base64.b64encode(raw).decode()}, "héllo"],
    }
    response = edge_server.client.post("/v1/models/edge:predict", json=body)
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert predictions[0]["length"] == 5
    assert base64.b64decode(predictions[0]["echo_bytes"]["b64"]) == raw
    assert predictions[1]["length"] == len("héllo".encode())
    assert base64.b64decode(predictions[1]["echo_bytes"]["b64"]) == "héllo".encode()


def test_resource_exhausted_is_503_and_server_lives_on(edge_server: Server) -> None:
    huge = {"signature_name": "alloc", "inputs": {"n": [2**42]}}
    response = edge_server.client.post("/v1/models/edge:predict", json=huge)
    assert response.status_code == 503, response.text
    assert "memory" in response.json()["error"].lower()
    small = {"signature_name": "alloc", "inputs": {"n": [10]}}
    response = edge_server.client.post("/v1/models/edge:predict", json=small)
    assert response.status_code == 200
    assert response.json() == {"outputs": [10.0]}


@pytest.mark.parametrize(
    "version",
    ["%C2%B2", "%D9%A1", "%EF%BC%91", "1.0", "-1", str(2**63), "9" * 4301],
    ids=[
        "superscript-2",
        "arabic-1",
        "fullwidth-1",
        "float",
        "negative",
        "over-int64",
        "4301-digits",
    ],
)
def test_versions_are_ascii_digits_only(tiny_server: Server, version: str) -> None:
    # U+00B2 made int() raise (a 500 with a traceback); U+0661, an Arabic-Indic one, was version 1.
    # 4,301 digits made int() raise too (CPython's limit on converting long strings): a 500.
    for path in (
        f"/v1/models/tiny/versions/{version}",
        f"/v1/models/tiny/versions/{version}:predict",
    ):
        response = tiny_server.client.request(
            "POST" if ":" in path else "GET", path, json={"instances": ROW}
        )
        assert response.status_code == 400, response.text
        assert "not an integer" in response.json()["error"]
    assert_still_serving(tiny_server)

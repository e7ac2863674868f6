"""What a fuzzing and abuse run of the servers found: each input, and the answer it now gets.

Every case sends what the abuse run sent and checks for a clear 4xx / gRPC status, that the
server's own counters saw it, and that the server goes on serving.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from tests.support.cli import invoke
from tests.support.servers import Server, serving

pytestmark = [pytest.mark.tensorflow]

ROW = [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]


def filled(shape: list[int], values: list[float]) -> predict_pb2.PredictRequest:
    """``x`` declaring ``shape`` with a few typed values (one value fills any shape in TF)."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "tiny"
    proto = request.inputs["x"]
    proto.dtype = types_pb2.DT_FLOAT
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    proto.float_val.extend(values)
    return request


def code_of(stub: prediction_service_pb2_grpc.PredictionServiceStub, request: object) -> str:
    try:
        stub.Predict(request, timeout=60)
    except grpc.RpcError as e:
        return f"{e.code().name}: {e.details()}"
    return "OK"


@pytest.fixture(scope="module")
def stub(tiny_server: Server) -> Iterator[prediction_service_pb2_grpc.PredictionServiceStub]:
    with grpc.insecure_channel(tiny_server.grpc_target) as channel:
        yield prediction_service_pb2_grpc.PredictionServiceStub(channel)


@pytest.mark.parametrize(
    ("shape", "values", "expected"),
    [
        # Were INTERNAL: "cannot reshape", "array is too big", "Unable to allocate 32.0 TiB".
        ([2**61, 8], [], "INVALID_ARGUMENT"),
        ([2**63 - 1, 8], [], "INVALID_ARGUMENT"),  # said "(-8 elements)"
        ([2**40, 8], [1.0], "RESOURCE_EXHAUSTED"),
        # ~40 bytes that became a 128 MB tensor and 10.8 s of work.
        ([4_000_000, 8], [1.0], "RESOURCE_EXHAUSTED"),
    ],
    ids=["2^61-rows", "int64-max-rows", "2^40-rows-filled", "4e6-rows-filled"],
)
def test_declared_shapes_are_counted_before_anything_is_allocated(
    tiny_server: Server,
    stub: prediction_service_pb2_grpc.PredictionServiceStub,
    shape: list[int],
    values: list[float],
    expected: str,
) -> None:
    assert code_of(stub, filled(shape, values)).startswith(expected)
    assert code_of(stub, filled([1, 8], ROW[0])) == "OK"
    metrics = tiny_server.client.get("/metrics").text
    assert 'code="INTERNAL"' not in metrics


@pytest.fixture(scope="module")
def small_server(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("small") / "serve.log"
    yield from serving(models_dir / "tiny", log, ["--max-request-elements", "64"])


def test_element_limit_for_both_protocols(small_server: Server) -> None:
    with grpc.insecure_channel(small_server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        assert code_of(stub, filled([8, 8], [1.0])) == "OK"  # 64 elements: at the limit
        answer = code_of(stub, filled([9, 8], [1.0]))
    assert answer.startswith("RESOURCE_EXHAUSTED") and "64" in answer
    response = small_server.client.post("/v1/models/tiny:predict", json={"instances": ROW * 9})
    assert response.status_code == 413, response.text
    assert "elements" in response.json()["error"]
    ok = small_server.client.post("/v1/models/tiny:predict", json={"instances": ROW * 8})
    assert ok.status_code == 200
    metrics = small_server.client.get("/metrics").text
    assert 'code="413"' in metrics and 'code="RESOURCE_EXHAUSTED"' in metrics


def test_element_limit_follows_the_body_limit(
    tiny_server: Server, stub: prediction_service_pb2_grpc.PredictionServiceStub
) -> None:
    # The session server's 65,536 bytes of body carry at most 32,768 elements as JSON (a digit
    # and a comma each): 4,097 rows of 8 are too many, for gRPC too, though its body is not JSON.
    assert code_of(stub, filled([100, 8], [1.0])) == "OK"
    answer = code_of(stub, filled([4097, 8], [1.0]))
    assert answer.startswith("RESOURCE_EXHAUSTED") and "over the limit of 32768" in answer


def test_bad_element_limit_is_a_usage_error(models_dir: Path) -> None:
    result = invoke("serve", "--model", str(models_dir / "tiny"), "--max-request-elements", "0")
    assert result.exit_code == 2, result.output
    assert "--max-request-elements" in result.stderr


def test_long_client_strings_are_cut_in_errors(
    stub: prediction_service_pb2_grpc.PredictionServiceStub, tiny_server: Server
) -> None:
    # Echoed whole, these overflowed gRPC's metadata limit: RESOURCE_EXHAUSTED, not the answer.
    request = filled([1, 8], ROW[0])
    request.model_spec.name = "m" * 20_000
    answer = code_of(stub, request)
    assert answer.startswith("NOT_FOUND") and "(20000 long)" in answer and len(answer) < 400
    request = filled([1, 8], ROW[0])
    request.inputs["i" * 50_000].CopyFrom(request.inputs["x"])
    answer = code_of(stub, request)
    assert answer.startswith("INVALID_ARGUMENT") and "(50000 long)" in answer
    response = tiny_server.client.get("/v1/models/" + "n" * 20_000)
    assert response.status_code == 404 and len(response.text) < 400
    assert code_of(stub, filled([1, 8], ROW[0])) == "OK"


@pytest.mark.parametrize(
    "method",
    [
        "/tensorflow.serving.PredictionService/Predict",
        "/tensorflow.serving.PredictionService/GetModelMetadata",
        "/tensorflow.serving.ModelService/GetModelStatus",
    ],
)
def test_random_bytes_are_invalid_argument(tiny_server: Server, method: str) -> None:
    # Were UNKNOWN, with a full traceback in the log for each.
    with grpc.insecure_channel(tiny_server.grpc_target) as channel:
        call = channel.unary_unary(method)  # no serializer: the bytes go as they are
        with pytest.raises(grpc.RpcError) as info:
            call(b"\xff\xfe\x00garbage\x12\x9f", timeout=30)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid" in info.value.details()
    assert "Traceback" not in tiny_server.log()


def test_a_client_that_leaves_mid_upload_is_499_and_no_traceback(tiny_server: Server) -> None:
    # Was code="500" and two full ClientDisconnect tracebacks (~7.5 KB of log) per request.
    head = (
        b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 60000\r\n\r\n"  # under the session server's 64 KiB limit
    )
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", tiny_server.port), timeout=10) as sock:
            sock.sendall(head + b'{"instances": [[0.1, 0.2')
    deadline = time.monotonic() + 10
    while 'code="499"' not in tiny_server.client.get("/metrics").text:
        assert time.monotonic() < deadline, "no disconnect was counted"
        time.sleep(0.1)
    metrics = tiny_server.client.get("/metrics").text
    assert 'code="500"' not in metrics
    assert "ClientDisconnect" not in tiny_server.log()
    assert (
        tiny_server.client.post("/v1/models/tiny:predict", json={"instances": ROW}).status_code
        == 200
    )

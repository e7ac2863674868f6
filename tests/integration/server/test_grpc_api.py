"""TF Serving's gRPC API against a real server, driven by the real tensorflow-serving-api stubs."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from google.protobuf import wrappers_pb2
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from tests.support import protos
from tests.support.servers import Server

pytestmark = [pytest.mark.tensorflow]

ROW = np.array([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]], dtype=np.float32)


@pytest.fixture(scope="module")
def channel(tiny_server: Server) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(tiny_server.grpc_target) as ch:
        yield ch


def predict_request(x: np.ndarray, name: str = "tiny") -> predict_pb2.PredictRequest:
    return protos.predict_request(name, {"x": x})


def test_predict_matches_rest(tiny_server: Server, channel: grpc.Channel) -> None:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    response = stub.Predict(predict_request(np.repeat(ROW, 3, axis=0)), timeout=30)
    out = response.outputs["probabilities"]
    assert [d.size for d in out.tensor_shape.dim] == [3, 4]
    values = np.frombuffer(out.tensor_content, dtype=np.float32).reshape(3, 4)
    rest = tiny_server.client.post("/v1/models/tiny:predict", json={"instances": ROW.tolist()})
    np.testing.assert_allclose(values[0], rest.json()["predictions"][0], rtol=1e-6)
    assert response.model_spec.name == "tiny"
    assert response.model_spec.version.value == 1
    assert response.model_spec.signature_name == "serving_default"


def test_predict_with_typed_float_val(channel: grpc.Channel) -> None:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "tiny"
    proto = request.inputs["x"]
    proto.dtype = types_pb2.DT_FLOAT
    proto.tensor_shape.dim.add(size=1)
    proto.tensor_shape.dim.add(size=8)
    proto.float_val.extend(ROW[0].tolist())
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    assert len(stub.Predict(request, timeout=30).outputs["probabilities"].tensor_content) == 16


def test_get_model_metadata(channel: grpc.Channel) -> None:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "tiny"
    response = stub.GetModelMetadata(request, timeout=30)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signatures)
    x = signatures.signature_def["serving_default"].inputs["x"]
    assert x.dtype == types_pb2.DT_FLOAT
    assert [d.size for d in x.tensor_shape.dim] == [-1, 8]
    assert x.name == "serving_default_x:0"
    assert response.model_spec.version.value == 1


def test_get_model_status(channel: grpc.Channel) -> None:
    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "tiny"
    response = stub.GetModelStatus(request, timeout=30)
    (status,) = response.model_version_status
    assert status.version == 1
    assert status.state == get_model_status_pb2.ModelVersionStatus.AVAILABLE
    assert status.status.error_code == 0


def _code(call) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code()


def test_error_codes_and_server_lives_on(channel: grpc.Channel) -> None:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    wrong_shape = predict_request(np.zeros((1, 3), dtype=np.float32))
    assert _code(lambda: stub.Predict(wrong_shape, timeout=30)) == grpc.StatusCode.INVALID_ARGUMENT
    unknown = predict_request(ROW, name="nope")
    assert _code(lambda: stub.Predict(unknown, timeout=30)) == grpc.StatusCode.NOT_FOUND
    version = predict_request(ROW)
    version.model_spec.version.CopyFrom(wrappers_pb2.Int64Value(value=9))
    assert _code(lambda: stub.Predict(version, timeout=30)) == grpc.StatusCode.NOT_FOUND
    signature = predict_request(ROW)
    signature.model_spec.signature_name = "nope"
    assert _code(lambda: stub.Predict(signature, timeout=30)) == grpc.StatusCode.NOT_FOUND
    wrong_dtype = predict_request(ROW)
    wrong_dtype.inputs["x"].dtype = types_pb2.DT_INT32
    assert _code(lambda: stub.Predict(wrong_dtype, timeout=30)) == grpc.StatusCode.INVALID_ARGUMENT
    truncated = predict_request(ROW)
    truncated.inputs["x"].tensor_content = b"\0" * 7
    assert _code(lambda: stub.Predict(truncated, timeout=30)) == grpc.StatusCode.INVALID_ARGUMENT
    missing = predict_pb2.PredictRequest()
    missing.model_spec.name = "tiny"
    assert _code(lambda: stub.Predict(missing, timeout=30)) == grpc.StatusCode.INVALID_ARGUMENT
    assert stub.Predict(predict_request(ROW), timeout=30).outputs["probabilities"].tensor_content


def test_resource_exhausted_over_grpc(edge_server: Server) -> None:
    with grpc.insecure_channel(edge_server.grpc_target) as ch:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "edge"
        request.model_spec.signature_name = "alloc"
        request.inputs["n"].dtype = types_pb2.DT_INT64
        request.inputs["n"].tensor_shape.dim.add(size=1)
        request.inputs["n"].int64_val.append(2**42)
        assert (
            _code(lambda: stub.Predict(request, timeout=60)) == grpc.StatusCode.RESOURCE_EXHAUSTED
        )
        request.inputs["n"].int64_val[0] = 10
        response = stub.Predict(request, timeout=60)
        assert np.frombuffer(response.outputs["total"].tensor_content, np.float32)[0] == 10.0


def test_metrics_count_both_protocols(tiny_server: Server, channel: grpc.Channel) -> None:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    stub.Predict(predict_request(ROW), timeout=30)
    tiny_server.client.post("/v1/models/tiny:predict", json={"instances": ROW.tolist()})
    text = tiny_server.client.get("/metrics").text
    assert 'sharedserve_requests_total{code="OK",model="tiny",protocol="grpc"}' in text
    assert 'sharedserve_requests_total{code="200",model="tiny",protocol="rest"}' in text
    assert "sharedserve_request_duration_seconds_bucket" in text
    assert "sharedserve_batch_size_bucket" in text
    assert 'sharedserve_queue_depth{model="tiny"} 0.0' in text
    assert "sharedserve_gpu_memory" not in text  # no real GPU here: nothing made up

"""``tiny``'s two rows asked of a server over each API (TF Serving's REST and gRPC, the Open
Inference Protocol's REST and gRPC), each answer as an array: the tests that compare a model
with the TorchScript model it came from ask the same questions of both servers."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import numpy as np
from tensorflow_serving.apis import prediction_service_pb2_grpc

from sharedserve.server.protos.oip import MODEL_INFER_METHOD
from sharedserve.server.protos.oip import grpc_predict_v2_pb2 as oip
from tests.support.protos import predict_request
from tests.support.servers import Server

ROWS = np.array(
    [[0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0], [1.0, 2.0, -3.0, 0.5, 0.0, 4.0, -1.0, 0.1]],
    dtype=np.float32,
)
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
"""float32 through two frameworks' kernels: the same math, summed in another order."""


def rest(server: Server, name: str = "tiny") -> np.ndarray:
    response = server.client.post(f"/v1/models/{name}:predict", json={"instances": ROWS.tolist()})
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["predictions"], dtype=np.float32)


def grpc_predict(server: Server, name: str = "tiny") -> np.ndarray:
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        out = stub.Predict(predict_request(name, {"x": ROWS}), timeout=30).outputs
    proto = out["probabilities"]
    return np.frombuffer(proto.tensor_content, dtype=np.float32).reshape(ROWS.shape[0], -1)


def oip_rest(server: Server, name: str = "tiny") -> np.ndarray:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 8], "data": ROWS.tolist()}]}
    response = server.client.post(f"/v2/models/{name}/infer", json=body)
    assert response.status_code == 200, response.text
    (output,) = response.json()["outputs"]
    assert output["name"] == "probabilities" and output["shape"] == [2, 4]
    return np.asarray(output["data"], dtype=np.float32).reshape(2, 4)


def oip_grpc(server: Server, name: str = "tiny") -> np.ndarray:
    tensor = oip.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[2, 8])
    request = oip.ModelInferRequest(
        model_name=name, inputs=[tensor], raw_input_contents=[ROWS.tobytes()]
    )
    with grpc.insecure_channel(server.grpc_target) as channel:
        infer = channel.unary_unary(
            MODEL_INFER_METHOD,
            request_serializer=oip.ModelInferRequest.SerializeToString,
            response_deserializer=oip.ModelInferResponse.FromString,
        )
        response = infer(request, timeout=30)
    (output,) = response.outputs
    assert output.name == "probabilities" and list(output.shape) == [2, 4]
    return np.frombuffer(response.raw_output_contents[0], dtype=np.float32).reshape(2, 4)


APIS: list[Callable[[Server], np.ndarray]] = [rest, grpc_predict, oip_rest, oip_grpc]


def assert_answers_as(answers: np.ndarray, torchscript: np.ndarray) -> None:
    """A served ``tiny``'s two rows are the TorchScript model's it came from, to float
    tolerance, and two different answers: not a constant."""
    assert answers.shape == (2, 4)
    np.testing.assert_allclose(answers, torchscript, **TOLERANCE)
    assert not np.allclose(answers[0], answers[1])

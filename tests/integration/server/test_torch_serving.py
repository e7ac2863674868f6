"""A TorchScript ``tiny`` built by the CLI, served over REST and gRPC by the real server.

Both the build and the server run with TensorFlow hidden, as in a ``[torch]``-only install (the
session's ``torch_models_dir`` and ``torch_server``, shared with the Open Inference Protocol's
tests); the test process keeps it, to be TF Serving's own gRPC client.
"""

from __future__ import annotations

import subprocess
import sys

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import prediction_service_pb2_grpc

from tests.support.protos import predict_request
from tests.support.servers import Server

pytestmark = [pytest.mark.tensorflow, pytest.mark.torch]

X = [[0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0]]


def test_rest_predict_and_metadata(torch_server: Server) -> None:
    response = torch_server.client.post("/v1/models/tiny:predict", json={"instances": X})
    assert response.status_code == 200, response.text
    (row,) = response.json()["predictions"]
    assert len(row) == 4
    assert sum(row) == pytest.approx(1.0, abs=1e-5)
    metadata = torch_server.client.get("/v1/models/tiny/metadata").json()
    signature = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert [d["size"] for d in signature["inputs"]["x"]["tensor_shape"]["dim"]] == ["-1", "8"]
    bad = torch_server.client.post("/v1/models/tiny:predict", json={"instances": [[1.0, 2.0]]})
    assert bad.status_code == 400
    limits = torch_server.client.get("/sharedserve/v1/limits").json()
    assert (limits["intra_op_threads"], limits["cpu_limit_source"]) == (1, "flag")


def test_tensorflow_is_hidden_from_the_server(torch_server: Server) -> None:
    # Guards the test itself: in the server's environment TensorFlow must be absent, to an
    # import and to a look that does not import (find_spec), as for a package not installed.
    probe = [
        sys.executable, "-c",
        "import importlib.util as u; assert u.find_spec('tensorflow') is None; import tensorflow",
    ]  # fmt: skip
    hidden = subprocess.run(
        probe, env=torch_server.env, capture_output=True, text=True, check=False
    )
    assert hidden.returncode == 1
    assert "ModuleNotFoundError" in hidden.stderr and "tensorflow" in hidden.stderr
    assert "AssertionError" not in hidden.stderr


def test_grpc_predict_matches_rest(torch_server: Server) -> None:
    rest = torch_server.client.post("/v1/models/tiny:predict", json={"instances": X}).json()
    request = predict_request("tiny", {"x": np.asarray(X)})
    with grpc.insecure_channel(torch_server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        out = stub.Predict(request, timeout=30).outputs["probabilities"]
    values = np.frombuffer(out.tensor_content, dtype=np.float32)
    np.testing.assert_allclose(values, rest["predictions"][0], rtol=1e-6)

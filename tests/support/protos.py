"""Build TF Serving gRPC requests the way its own clients do (binary ``tensor_content``)."""

from __future__ import annotations

import numpy as np
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import predict_pb2


def float_tensor(array: np.ndarray) -> tensor_pb2.TensorProto:
    """A float32 TensorProto; tf.make_tensor_proto sends the same bytes."""
    array = np.asarray(array, dtype=np.float32)
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=array.tobytes())
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    return proto


def predict_request(model: str, inputs: dict[str, np.ndarray]) -> predict_pb2.PredictRequest:
    """A PredictRequest for ``model`` with float32 ``inputs``."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    for name, array in inputs.items():
        request.inputs[name].CopyFrom(float_tensor(array))
    return request

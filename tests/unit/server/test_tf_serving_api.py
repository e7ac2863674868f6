"""sharedserve's copy of TF Serving's messages is wire-compatible with the upstream definitions.

Every field of every message in ``sharedserve/server/protos/tfserving/tf_serving.proto`` must have
the number, wire type and cardinality that the same field has in TensorFlow's and TF Serving's
own protos (installed with the dev extras), and every enum value the same number; otherwise a real
client's bytes would be read into the wrong field. Upstream fields we leave out are allowed (they
are skipped as unknown).
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor_pool
from tensorflow.core.framework import tensor_pb2, types_pb2  # noqa: F401  (registers the files)
from tensorflow.core.protobuf import error_codes_pb2, meta_graph_pb2  # noqa: F401
from tensorflow_serving.apis import (  # noqa: F401
    get_model_metadata_pb2,
    get_model_status_pb2,
    predict_pb2,
)

from sharedserve.server.protos.tfserving import tf_serving_pb2 as ours

pytestmark = [pytest.mark.tensorflow]

OURS = "sharedserve.tfserving."
UPSTREAM = {
    "DataType": "tensorflow.DataType",
    "TensorShapeProto": "tensorflow.TensorShapeProto",
    "TensorProto": "tensorflow.TensorProto",
    "ModelSpec": "tensorflow.serving.ModelSpec",
    "PredictRequest": "tensorflow.serving.PredictRequest",
    "PredictResponse": "tensorflow.serving.PredictResponse",
    "TensorInfo": "tensorflow.TensorInfo",
    "SignatureDef": "tensorflow.SignatureDef",
    "SignatureDefMap": "tensorflow.serving.SignatureDefMap",
    "GetModelMetadataRequest": "tensorflow.serving.GetModelMetadataRequest",
    "GetModelMetadataResponse": "tensorflow.serving.GetModelMetadataResponse",
    "ErrorCode": "tensorflow.error.Code",
    "StatusProto": "tensorflow.serving.StatusProto",
    "GetModelStatusRequest": "tensorflow.serving.GetModelStatusRequest",
    "ModelVersionStatus": "tensorflow.serving.ModelVersionStatus",
    "GetModelStatusResponse": "tensorflow.serving.GetModelStatusResponse",
}
POOL = descriptor_pool.Default()


def _upstream_name(full_name: str) -> str:
    """Our full name -> upstream's, nested types included (``X.Dim`` -> ``tensorflow.X.Dim``)."""
    if not full_name.startswith(OURS):
        return full_name  # google.protobuf.* are shared
    top, _, nested = full_name[len(OURS) :].partition(".")
    return UPSTREAM[top] + ("." + nested if nested else "")


def _type_name(field: Any) -> str | None:
    kind = field.message_type or field.enum_type
    return None if kind is None else _upstream_name(kind.full_name)


def _messages(descriptor: Any) -> list[Any]:
    out = [descriptor]
    for nested in descriptor.nested_types:
        out += _messages(nested)
    return out


MESSAGES = [m for top in ours.DESCRIPTOR.message_types_by_name.values() for m in _messages(top)]
ENUMS = [*ours.DESCRIPTOR.enum_types_by_name.values()]
ENUMS += [e for m in MESSAGES for e in m.enum_types]


def test_every_top_level_type_is_mapped() -> None:
    names = {*ours.DESCRIPTOR.message_types_by_name, *ours.DESCRIPTOR.enum_types_by_name}
    assert names == set(UPSTREAM)


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.full_name)
def test_fields_match_upstream(message: Any) -> None:
    upstream = POOL.FindMessageTypeByName(_upstream_name(message.full_name))
    assert message.GetOptions().map_entry == upstream.GetOptions().map_entry
    for field in message.fields:
        theirs = upstream.fields_by_name.get(field.name)
        assert theirs is not None, f"{upstream.full_name} has no field {field.name}"
        assert (field.number, field.type, field.is_repeated) == (
            theirs.number,
            theirs.type,
            theirs.is_repeated,
        ), field.full_name
        assert _type_name(field) == _type_name(theirs), field.full_name
        if field.is_repeated and field.type != field.TYPE_MESSAGE:
            assert field.is_packed == theirs.is_packed, field.full_name
        ours_oneof = field.containing_oneof.name if field.containing_oneof else None
        their_oneof = theirs.containing_oneof.name if theirs.containing_oneof else None
        if their_oneof is None or not their_oneof.startswith("_"):  # proto3 `optional`
            assert ours_oneof == their_oneof, field.full_name


@pytest.mark.parametrize("enum", ENUMS, ids=lambda e: e.full_name)
def test_enum_values_match_upstream(enum: Any) -> None:
    upstream = POOL.FindEnumTypeByName(_upstream_name(enum.full_name))
    for value in enum.values:
        assert upstream.values_by_name[value.name].number == value.number, value.full_name


def test_a_real_client_request_round_trips() -> None:
    # Upstream bytes parsed by ours and back give the same upstream message.
    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = "m", "serving_default"
    request.model_spec.version.value = 3
    tensor = request.inputs["x"]
    tensor.dtype = types_pb2.DT_FLOAT
    tensor.tensor_shape.dim.add(size=2)
    tensor.float_val.extend([1.5, -2.0])
    request.output_filter.append("y")
    parsed = ours.PredictRequest.FromString(request.SerializeToString())
    assert parsed.model_spec.version.value == 3
    assert list(parsed.inputs["x"].float_val) == [1.5, -2.0]
    assert parsed.inputs["x"].dtype == ours.DT_FLOAT
    again = predict_pb2.PredictRequest.FromString(parsed.SerializeToString())
    assert again == request

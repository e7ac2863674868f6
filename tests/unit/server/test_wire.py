"""server/wire.py and the readers built on it: a message parsed in slices is the message
FromString makes, malformed wire data is refused, and a tensor's values are counted (and refused
past its shape or the element limit) as they are walked, the rest unread."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from sharedserve.errors import InvalidInput, PayloadTooLarge
from sharedserve.server.protos.oip import grpc_predict_v2_pb2 as oip
from sharedserve.server.protos.tfserving import tf_serving_pb2 as tf
from sharedserve.server.wire import proto_slices as wire
from sharedserve.server.wire.oip.grpc_split import Split, split_infer
from sharedserve.server.wire.tfserving.grpc_api import split_predict

_TEXT = st.text(max_size=6)
# Few distinct lengths, so runs of fields with one head (tag, length) are common.
_STRINGS = st.lists(st.sampled_from([b"", b"", b"a", b"bc", b"\x80\xff"]), max_size=40)


@st.composite
def tensors(draw: st.DrawFn) -> tf.TensorProto:
    """A TensorProto whose values fit its shape (so the walk refuses none of them)."""
    proto = tf.TensorProto()
    kind = draw(st.sampled_from(["string", "float", "int", "int64", "content", "none"]))
    if kind == "string":
        proto.dtype = tf.DT_STRING
        proto.string_val.extend(draw(_STRINGS))
        count = len(proto.string_val)
    elif kind == "float":
        proto.dtype = tf.DT_FLOAT
        values = st.floats(allow_nan=False, width=32)
        proto.float_val.extend(draw(st.lists(values, max_size=20)))
        count = len(proto.float_val)
    elif kind in {"int", "int64"}:
        proto.dtype = tf.DT_INT32 if kind == "int" else tf.DT_INT64
        values = st.integers(-(2**31), 2**31 - 1)
        getattr(proto, f"{kind}_val").extend(draw(st.lists(values, max_size=20)))
        count = len(getattr(proto, f"{kind}_val"))
    else:
        proto.dtype = tf.DT_FLOAT
        proto.tensor_content = draw(st.binary(max_size=64))
        count = 0
    if kind != "none" or draw(st.booleans()):
        proto.tensor_shape.dim.add(size=count + draw(st.integers(0, 3)))
    return proto


@st.composite
def predicts(draw: st.DrawFn) -> bytes:
    """A PredictRequest's bytes, some the concatenation of several (protobuf's merge: repeated
    fields append, a map key sent again replaces its entry, submessages merge)."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        request = tf.PredictRequest()
        request.model_spec.name = draw(_TEXT)
        if draw(st.booleans()):
            request.model_spec.version.value = draw(st.integers(0, 5))
        request.output_filter.extend(draw(st.lists(_TEXT, max_size=3)))
        for key in draw(st.lists(st.sampled_from(["a", "b", "é"]), max_size=3)):
            request.inputs[key].CopyFrom(draw(tensors()))
        parts.append(request.SerializeToString())
    return b"".join(parts)


def joined(split: tuple[tf.PredictRequest, dict[str, tf.TensorProto]]) -> tf.PredictRequest:
    outer, inputs = split
    request = tf.PredictRequest()
    request.CopyFrom(outer)
    for key, tensor in inputs.items():
        request.inputs[key].CopyFrom(tensor)
    return request


@given(predicts())
@settings(max_examples=200, deadline=None)
def test_a_split_predict_is_the_parsed_one(data: bytes) -> None:
    assert joined(split_predict(None)(data)) == tf.PredictRequest.FromString(data)
    assert wire.parse(tf.PredictRequest, data) == tf.PredictRequest.FromString(data)


@given(st.lists(_STRINGS, min_size=1, max_size=3), st.lists(st.binary(max_size=8), max_size=30))
@settings(max_examples=100, deadline=None)
def test_an_infer_request_parsed_in_slices_is_the_parsed_one(
    contents: list[list[bytes]], raw: list[bytes]
) -> None:
    request = oip.ModelInferRequest(model_name="m", raw_input_contents=raw)
    for i, values in enumerate(contents):
        tensor = request.inputs.add(name=f"in{i}", datatype="BYTES", shape=[len(values)])
        if i:  # the first without contents
            tensor.contents.bytes_contents.extend(values)
        tensor.parameters["p"].int64_param = i
    request.outputs.add(name="out")
    data = request.SerializeToString()
    assert wire.parse(oip.ModelInferRequest, data) == request
    assert infer_joined(split_infer(None)(data)) == request


def infer_joined(split: Split) -> oip.ModelInferRequest:
    outer, inputs = split
    request = oip.ModelInferRequest()
    request.CopyFrom(outer)
    for tensor, contents in inputs:
        joined = request.inputs.add()
        joined.CopyFrom(tensor)
        if contents is not None:
            joined.contents.SetInParent()
            joined.contents.MergeFrom(contents)
    return request


def infer(count: int, field: str, datatype: str = "BYTES", shape: int = 8) -> bytes:
    """A ModelInfer of ``count`` values in ``field`` (zeros, empty strings), declared first;
    its last bytes do not parse (see ``strings``)."""
    request = oip.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="x", datatype=datatype, shape=[shape])
    values = [b""] * count if field == "bytes_contents" else [0] * count
    getattr(tensor.contents, field).extend(values)
    return request.SerializeToString() + b"\x0a\xff"


def test_infer_contents_past_the_declared_shape_are_refused_unwalked() -> None:
    with pytest.raises(InvalidInput, match=r"'x': at least \d+ values in bytes_contents for sh"):
        split_infer(None)(infer(1_000_000, "bytes_contents"))
    with pytest.raises(InvalidInput, match=r"'x': at least 9 values in fp32_contents for shape"):
        split_infer(None)(infer(9, "fp32_contents", "FP32"))


def test_infer_contents_past_the_limit_or_of_the_wrong_kind_are_refused_unwalked() -> None:
    with pytest.raises(PayloadTooLarge, match="'x': more than 1000 values"):
        split_infer(1000)(infer(1_000_000, "bytes_contents", shape=10**6))
    with pytest.raises(InvalidInput, match="'x': bytes_contents given for datatype FP32"):
        split_infer(None)(infer(1_000, "bytes_contents", "FP32", 10**6))


def test_many_small_fields_are_parsed_a_slice_at_a_time() -> None:
    """Runs longer than a slice, broken by other lengths, across slice boundaries."""
    proto = tf.TensorProto(dtype=tf.DT_STRING)
    values = ([b""] * 70_000 + [b"x"] * 3 + [b"yz"] * 70_001) * 2
    proto.string_val.extend(values)
    proto.tensor_shape.dim.add(size=len(values))
    data = tf.PredictRequest(inputs={"t": proto}).SerializeToString()
    outer, inputs = split_predict(len(values))(data)
    assert list(inputs["t"].string_val) == values
    assert joined((outer, inputs)) == tf.PredictRequest.FromString(data)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x0a\xff", "cut short"),  # a length varint that never ends
        (b"\x0a\x05ab", "past the message's end"),
        (b"\x12\x03\x0a\x05a", "past the message's end"),  # inside a map entry
        (b"\x0b", "wire type 3"),  # a group
        (b"\x02\x00", "field number 0"),
        (b"\x0f", "wire type 7"),
        (b"\x0a\x02\xff\xff", "corrupt"),  # model_spec's bytes are not a ModelSpec
        (b"\x12\x04\x0a\x02\xff\xfe", "not UTF-8"),  # an input's key
    ],
)
def test_malformed_wire_data_is_refused_naming_the_message(data: bytes, why: str) -> None:
    with pytest.raises(DecodeError):
        tf.PredictRequest.FromString(data)  # upb refuses it too
    with pytest.raises(InvalidInput, match="not a valid PredictRequest") as refused:
        split_predict(None)(data)
    assert why in refused.value.message


def strings(count: int, shape: int | None, dtype: int = tf.DT_STRING) -> bytes:
    """A Predict of ``count`` empty strings declared (dtype, shape) first; its last bytes do
    not parse, so a refusal that names the values was made before the walk reached them."""
    proto = tf.TensorProto(dtype=dtype)
    if shape is not None:
        proto.tensor_shape.dim.add(size=shape)
    proto.string_val.extend([b""] * count)
    return tf.PredictRequest(inputs={"x": proto}).SerializeToString() + b"\x0a\xff"


def test_values_past_the_declared_shape_are_refused_unwalked() -> None:
    with pytest.raises(InvalidInput, match=r"input 'x': at least \d+ values given for shape \[8\]"):
        split_predict(None)(strings(1_000_000, 8))


def test_values_past_the_element_limit_are_refused_unwalked() -> None:
    with pytest.raises(PayloadTooLarge, match=r"more than 1000 values.*--max-request-elements"):
        split_predict(1000)(strings(1_000_000, None))


def test_values_of_the_wrong_kind_are_refused_unwalked() -> None:
    with pytest.raises(InvalidInput, match="input 'x': string_val given for DT_FLOAT"):
        split_predict(None)(strings(1_000, 1_000, tf.DT_FLOAT))


def test_values_before_their_shape_are_judged_after_the_parse() -> None:
    """Legal protobuf in an unusual order: not refused by the walk (the decoder judges it)."""
    proto = tf.TensorProto(dtype=tf.DT_STRING, string_val=[b""] * 10)
    shape = tf.TensorProto(tensor_shape={"dim": [{"size": 2}]})
    data = tf.PredictRequest(inputs={"x": proto}).SerializeToString()
    data += tf.PredictRequest(inputs={"x": shape}).SerializeToString()
    _, inputs = split_predict(None)(data)
    assert len(inputs["x"].string_val) == 0  # the second entry replaced the first


def test_packed_varints_are_counted_exactly() -> None:
    values = [0, 1, 127, 128, 300, -1, 2**31 - 1, -(2**31)]  # 1 to 10 bytes each
    proto = tf.TensorProto(dtype=tf.DT_INT32, int_val=values)
    proto.tensor_shape.dim.add(size=len(values))
    data = tf.PredictRequest(inputs={"x": proto}).SerializeToString()
    assert list(split_predict(None)(data)[1]["x"].int_val) == values
    proto.tensor_shape.dim[0].size = len(values) - 1
    data = tf.PredictRequest(inputs={"x": proto}).SerializeToString()
    with pytest.raises(InvalidInput, match="at least 8 values given for shape \\[7\\]"):
        split_predict(None)(data)


def raw_infer(datatypes: list[str], sizes: list[int], inputs_first: bool = True) -> bytes:
    """A ModelInfer with one raw entry of ``size`` bytes per input; its last bytes do not parse,
    so a test that gets past the count fails on them instead."""
    inputs = oip.ModelInferRequest()
    for i, datatype in enumerate(datatypes):
        inputs.inputs.add(name=f"x{i}", datatype=datatype, shape=[1])
    raw = oip.ModelInferRequest(raw_input_contents=[bytes(size) for size in sizes])
    parts = [inputs.SerializeToString(), raw.SerializeToString()]
    return b"".join(parts if inputs_first else parts[::-1]) + b"\x0a\xff"


@pytest.mark.parametrize(
    ("datatypes", "sizes", "inputs_first", "refused"),
    [
        (["FP32"], [4004], True, True),  # 1001 elements
        (["FP32"], [4000], True, False),
        (["UINT8", "FP32"], [600, 1604], True, True),  # 600 + 401
        (["FP64"], [8000], True, False),
        (["BYTES"], [1 << 20], True, False),  # one string may be any length
        (["FP32"], [8008], False, True),  # inputs later: counted at 8 bytes each, 1001
        (["UINT8"], [8000], False, False),  # 1000 at 8 bytes: let through to the exact check
    ],
)
def test_raw_contents_are_counted_against_the_element_limit_before_they_are_copied(
    datatypes: list[str], sizes: list[int], inputs_first: bool, refused: bool
) -> None:
    data = raw_infer(datatypes, sizes, inputs_first)
    if refused:
        with pytest.raises(PayloadTooLarge, match="raw_input_contents hold more than 1000"):
            split_infer(1000)(data)
    else:
        with pytest.raises(InvalidInput):  # the trailing bytes: counted, then read on
            split_infer(1000)(data)

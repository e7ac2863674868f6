"""The Open Inference Protocol's tensors <-> numpy: every datatype both ways, every refusal."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson
import pytest

from sharedserve.errors import InvalidInput
from sharedserve.server.protos.oip import grpc_predict_v2_pb2 as pb
from sharedserve.server.version.signature import TensorSpec
from sharedserve.server.wire.oip import tensors


def extremes(dtype: type) -> list[Any]:
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return [info.min, 0, 1, info.max]
    info_f = np.finfo(dtype)
    return [float(info_f.min), -1.5, 0.0, float(info_f.max)]


#: datatype -> a 2x2 array of it reaching the type's limits.
ARRAYS = {
    "BOOL": np.array([[True, False], [False, True]]),
    **{
        datatype: np.array(extremes(dtype), dtype=dtype).reshape(2, 2)
        for datatype, dtype in {
            "UINT8": np.uint8,
            "UINT16": np.uint16,
            "UINT32": np.uint32,
            "UINT64": np.uint64,
            "INT8": np.int8,
            "INT16": np.int16,
            "INT32": np.int32,
            "INT64": np.int64,
            "FP16": np.float16,
            "FP32": np.float32,
            "FP64": np.float64,
        }.items()
    },
    "BYTES": np.array([[b"", b"a"], ["caf\u00e9".encode(), b"x" * 300]], dtype=object),
}


def test_every_served_datatype_is_covered() -> None:
    assert set(ARRAYS) == set(tensors.DATATYPE_OF_DT.values())


@pytest.mark.parametrize("datatype", ARRAYS)
def test_raw_round_trip(datatype: str) -> None:
    array = ARRAYS[datatype]
    assert tensors.datatype_of(array) == datatype
    back = tensors.from_raw("t", datatype, (2, 2), tensors.to_raw(array))
    assert back.shape == (2, 2)
    assert back.dtype == array.dtype
    np.testing.assert_array_equal(back, array)


@pytest.mark.parametrize(
    "datatype",
    [datatype for datatype in ARRAYS],
)
def test_json_round_trip(datatype: str) -> None:
    array = ARRAYS[datatype]
    wire = orjson.dumps(
        {"data": tensors.to_json_data("t", array)}, option=orjson.OPT_SERIALIZE_NUMPY
    )
    data = orjson.loads(wire)["data"]
    assert len(data) == 4  # flat, row-major
    back = tensors.from_json("t", datatype, (2, 2), data)
    assert back.dtype == array.dtype
    np.testing.assert_array_equal(back, array)


@pytest.mark.parametrize("datatype", [d for d in ARRAYS if d != "FP16"])
def test_grpc_contents_round_trip(datatype: str) -> None:
    array = ARRAYS[datatype]
    contents = pb.InferTensorContents()
    getattr(contents, tensors.CONTENTS_FIELD[datatype]).extend(array.reshape(-1).tolist())
    back = tensors.from_contents("t", datatype, (2, 2), contents)
    np.testing.assert_array_equal(back, array)


def test_raw_is_little_endian() -> None:
    raw = struct.pack("<2i", 1, -2)
    np.testing.assert_array_equal(tensors.from_raw("t", "INT32", (2,), raw), [1, -2])
    assert tensors.to_raw(np.array([1.0], dtype=">f4")) == struct.pack("<f", 1.0)


def test_fp16_json_output_is_float32() -> None:
    data = tensors.to_json_data("t", np.array([0.5, 65504.0], dtype=np.float16))
    assert data.dtype == np.float32  # orjson writes no float16
    assert orjson.loads(orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY)) == [0.5, 65504.0]


def _prefixed(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


@pytest.mark.parametrize(
    ("raw", "shape", "expected"),
    [
        (b"", (0,), []),
        (_prefixed(b""), (1,), [b""]),
        (_prefixed(b"abc"), (1,), [b"abc"]),
        (_prefixed(b"ab", b"", b"\xff\x00"), (3,), [b"ab", b"", b"\xff\x00"]),
        (_prefixed(b"a", b"b", b"c", b"d"), (2, 2), [b"a", b"b", b"c", b"d"]),
    ],
)
def test_bytes_length_prefixed(raw: bytes, shape: tuple[int, ...], expected: list[bytes]) -> None:
    array = tensors.from_raw("s", "BYTES", shape, memoryview(raw))
    assert array.shape == shape
    assert array.reshape(-1).tolist() == expected
    assert tensors.to_raw(array) == raw


@pytest.mark.parametrize(
    ("raw", "shape", "message"),
    [
        (b"\x03\x00", (1,), "ends inside an element's length"),
        (_prefixed(b"ab") + b"\x01", (2,), "ends inside an element's length"),
        (struct.pack("<I", 5) + b"abc", (1,), "a raw BYTES element of 5 bytes runs past"),
        (struct.pack("<I", 2**32 - 1), (1,), "runs past the data's end"),
        (_prefixed(b"a", b"b"), (3,), "2 elements given for shape [3]"),
    ],
)
def test_bytes_length_prefixed_refused(raw: bytes, shape: tuple[int, ...], message: str) -> None:
    with pytest.raises(InvalidInput, match="input 's'") as caught:
        tensors.from_raw("s", "BYTES", shape, raw)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("datatype", "data", "message"),
    [
        ("UINT8", [300], "value 300 is out of range for UINT8 [0, 255]"),
        ("UINT8", [-1], "value -1 is out of range for UINT8"),
        ("INT8", [128], "value 128 is out of range for INT8 [-128, 127]"),
        ("UINT64", [-1], "out of range"),
        ("INT32", [2.5], "expected INT32, got floats (integer dtypes take integers only"),
        ("INT64", [2.0], "integer dtypes take integers only"),
        ("FP32", [True], "expected FP32, got booleans"),
        ("FP32", [1e39], "a value is out of range for FP32"),
        ("FP32", ["1.0"], "expected FP32, got strings"),
        ("BOOL", [1], "expected BOOL, got integers"),
        ("BYTES", [1], "BYTES data must be strings, got an integer"),
        ("FP32", [[1.0], [2.0, 3.0]], "ragged"),
    ],
)
def test_json_values_refused(datatype: str, data: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match="input 't'") as caught:
        tensors.from_json("t", datatype, (len(data),), data)
    assert message in str(caught.value)


def test_contents_values_refused() -> None:
    contents = pb.InferTensorContents(uint_contents=[300])
    with pytest.raises(InvalidInput, match="value 300 is out of range for UINT8"):
        tensors.from_contents("t", "UINT8", (1,), contents)
    with pytest.raises(InvalidInput, match="FP16 travels in raw_input_contents only"):
        tensors.from_contents("t", "FP16", (1,), pb.InferTensorContents())


@pytest.mark.parametrize(
    ("decode", "message"),
    [
        (
            lambda: tensors.from_json("t", "FP32", (2, 2), [1.0, 2.0, 3.0]),
            "3 elements given for shape [2, 2] (4 elements)",
        ),
        (
            lambda: tensors.from_json("t", "FP32", (3,), [[1.0], [2.0]]),
            "2 elements given for shape [3]",
        ),
        (
            lambda: tensors.from_raw("t", "FP32", (2,), b"\x00" * 7),
            "7 bytes of raw data, shape [2] of FP32 needs 8",
        ),
        (
            lambda: tensors.from_raw("t", "INT64", (0,), b"\x00"),
            "1 bytes of raw data, shape [0] of INT64 needs 0",
        ),
        (
            lambda: tensors.from_contents(
                "t", "FP32", (2,), pb.InferTensorContents(fp32_contents=[1.0])
            ),
            "1 values in fp32_contents for shape [2] (2 elements)",
        ),
    ],
)
def test_size_mismatch(decode: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match="input 't'") as caught:
        decode()
    assert message in str(caught.value)


def test_nested_json_is_row_major() -> None:
    array = tensors.from_json("t", "INT32", (2, 2), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(array, [[1, 2], [3, 4]])
    strings = tensors.from_json("t", "BYTES", (2, 2), [["a", "b"], ["c", "d"]])
    assert strings.tolist() == [[b"a", b"b"], [b"c", b"d"]]


@pytest.mark.parametrize(
    ("shape", "expected"), [([], ()), ([0], (0,)), ([2, 3], (2, 3)), ((1,), (1,))]
)
def test_shape_accepted(shape: Any, expected: tuple[int, ...]) -> None:
    assert tensors.parse_shape("t", shape) == expected


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([1, -1], "'shape' has a negative dimension [1, -1]"),
        ([2.0], "'shape' must be a list of integers"),
        ([1.5], "'shape' must be a list of integers"),
        (["2"], "'shape' must be a list of integers"),
        ([True], "'shape' must be a list of integers"),
        ([None], "'shape' must be a list of integers"),
        ("2", "'shape' must be a list of integers"),
        (None, "'shape' must be a list of integers"),
        ({"0": 1}, "'shape' must be a list of integers"),
        ([2**62, 2**62], "more than any tensor can hold"),
        ([1] * 65, "'shape' has 65 dimensions, more than 64"),
    ],
)
def test_shape_refused(shape: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match="input 't'") as caught:
        tensors.parse_shape("t", shape)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "decode",
    [
        lambda shape: tensors.from_json("t", "FP32", shape, [1.0]),
        lambda shape: tensors.from_raw("t", "FP32", shape, b"\x00" * 4),
        lambda shape: tensors.from_contents(
            "t", "FP32", shape, pb.InferTensorContents(fp32_contents=[1.0])
        ),
    ],
    ids=["json", "raw", "contents"],
)
def test_more_dimensions_than_numpy_holds(decode: Any) -> None:
    with pytest.raises(InvalidInput, match="input 't'"):
        decode(tensors.parse_shape("t", [1] * 65))


X = TensorSpec("x", "DT_FLOAT", (-1, 8))


@pytest.mark.parametrize(
    ("datatype", "message"),
    [
        ("FP64", "input 'x': expected datatype FP32, got FP64"),
        ("fp32", "datatype 'fp32' is not one sharedserve serves; the model takes FP32"),
        ("FP8", "datatype 'FP8' is not one sharedserve serves"),
        (None, "is not one sharedserve serves"),
        (32, "is not one sharedserve serves"),
    ],
)
def test_datatype_refused(datatype: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        tensors.check_datatype(X, datatype)
    assert message in str(caught.value)


def test_datatype_accepted() -> None:
    tensors.check_datatype(X, "FP32")
    tensors.check_datatype(TensorSpec("s", "DT_STRING", (-1,)), "BYTES")


def test_tensor_metadata() -> None:
    assert tensors.tensor_metadata(X) == {"name": "x", "datatype": "FP32", "shape": [-1, 8]}
    unknown_rank = TensorSpec("u", "DT_UINT8", None)
    assert tensors.tensor_metadata(unknown_rank) == {
        "name": "u",
        "datatype": "UINT8",
        "shape": [-1],
    }


def test_bytes_json_output_must_be_text() -> None:
    text = np.array(["caf\u00e9".encode(), "plain"], dtype=object)
    assert tensors.to_json_data("s", text) == ["caf\u00e9", "plain"]
    with pytest.raises(InvalidInput, match="binary_data"):
        tensors.to_json_data("s", np.array([b"\xff"], dtype=object))

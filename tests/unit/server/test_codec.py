"""Table-driven tests of the TF Serving REST codec: request decoding and response encoding."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import orjson
import pytest

from sharedserve.errors import InvalidInput, SharedServeError
from sharedserve.server.inference.validate import check_inputs
from sharedserve.server.version.signature import Signature, TensorSpec
from sharedserve.server.wire.tfserving.codec import (
    PredictRequest,
    RequestFormat,
    decode_predict_request,
    encode_predict_response,
    parse_json_body,
    read_signature_name,
)

ROW, COL = RequestFormat.ROW, RequestFormat.COLUMNAR


def sig(**inputs: tuple[str, tuple[int, ...] | None]) -> Signature:
    """A signature whose inputs are name=(dtype, shape); one dummy output."""
    specs = {name: TensorSpec(name, dtype, shape) for name, (dtype, shape) in inputs.items()}
    return Signature("serving_default", specs, {"y": TensorSpec("y", "DT_FLOAT", (-1,))})


def b64(raw: bytes) -> dict[str, str]:
    return {"b64": base64.b64encode(raw).decode("ascii")}


def strings(*values: Any) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


X = sig(x=("DT_FLOAT", (-1, 3)))
MULTI = sig(a=("DT_FLOAT", (-1, 2)), b=("DT_INT64", (-1,)))
S = sig(s=("DT_STRING", (-1,)))
S2 = sig(s=("DT_STRING", (-1, 2)))
MIXED = sig(img=("DT_STRING", (-1,)), k=("DT_INT32", (-1,)))


def any_shape(dtype: str) -> Signature:
    return sig(v=(dtype, None))


# --- decoding: successes ----------------------------------------------------------------------

DECODE_OK: list[tuple[str, dict[str, Any], Signature, dict[str, np.ndarray], RequestFormat]] = [
    (
        "row single input",
        {"instances": [[1, 2, 3], [4.5, 5, 6]]},
        X,
        {"x": np.array([[1, 2, 3], [4.5, 5, 6]], np.float32)},
        ROW,
    ),
    (
        "row single input, named objects",
        {"instances": [{"x": [1, 2, 3]}]},
        X,
        {"x": np.array([[1, 2, 3]], np.float32)},
        ROW,
    ),
    (
        "columnar single input, bare value",
        {"inputs": [[1, 2, 3]]},
        X,
        {"x": np.array([[1, 2, 3]], np.float32)},
        COL,
    ),
    (
        "columnar single input, named",
        {"inputs": {"x": [[0, 0, 1]]}},
        X,
        {"x": np.array([[0, 0, 1]], np.float32)},
        COL,
    ),
    (
        "row multi input stacks per input",
        {"instances": [{"a": [1, 2], "b": 7}, {"b": 8, "a": [3, 4]}]},
        MULTI,
        {"a": np.array([[1, 2], [3, 4]], np.float32), "b": np.array([7, 8], np.int64)},
        ROW,
    ),
    (
        "columnar multi input, batch sizes may differ",
        {"inputs": {"a": [[1, 2]], "b": [1, 2, 3]}},
        MULTI,
        {"a": np.array([[1, 2]], np.float32), "b": np.array([1, 2, 3], np.int64)},
        COL,
    ),
    (
        "row b64 value is not a named-input object",
        {"instances": [b64(b"\x00\xff")]},
        S,
        {"s": strings(b"\x00\xff")},
        ROW,
    ),
    (
        "row plain strings are utf-8",
        {"instances": ["héllo", "", b64(b"x")]},
        S,
        {"s": strings("héllo".encode(), b"", b"x")},
        ROW,
    ),
    (
        "columnar b64 nested in lists",
        {"inputs": [[b64(b"a"), "b"], [b64(b""), "\u2603"]]},
        S2,
        {"s": np.array([[b"a", b"b"], [b"", "\u2603".encode()]], dtype=object)},
        COL,
    ),
    (
        "columnar single b64 value",
        {"inputs": b64(b"jpeg")},
        any_shape("DT_STRING"),
        {"v": np.array(b"jpeg", dtype=object)},
        COL,
    ),
    (
        "row named inputs with b64 inside",
        {"instances": [{"img": b64(b"\x89PNG"), "k": 1}, {"img": "t", "k": 2}]},
        MIXED,
        {"img": strings(b"\x89PNG", b"t"), "k": np.array([1, 2], np.int32)},
        ROW,
    ),
    (
        "signature_name is read",
        {"signature_name": "serving_default", "inputs": [[1, 2, 3]]},
        X,
        {"x": np.array([[1, 2, 3]], np.float32)},
        COL,
    ),
    (
        "float64 keeps precision",
        {"inputs": [0.1, 1e300]},
        any_shape("DT_DOUBLE"),
        {"v": np.array([0.1, 1e300], np.float64)},
        COL,
    ),
    (
        "int32",
        {"inputs": [[-2147483648, 2147483647]]},
        any_shape("DT_INT32"),
        {"v": np.array([[-2147483648, 2147483647]], np.int32)},
        COL,
    ),
    (
        "int64 extremes",
        {"inputs": [-9223372036854775808, 9223372036854775807]},
        any_shape("DT_INT64"),
        {"v": np.array([-9223372036854775808, 9223372036854775807], np.int64)},
        COL,
    ),
    (
        "uint8 range edges",
        {"instances": [0, 255]},
        any_shape("DT_UINT8"),
        {"v": np.array([0, 255], np.uint8)},
        ROW,
    ),
    (
        "bool",
        {"instances": [[True, False]]},
        any_shape("DT_BOOL"),
        {"v": np.array([[True, False]])},
        ROW,
    ),
    (
        "float16",
        {"inputs": [0.5, 2]},
        any_shape("DT_HALF"),
        {"v": np.array([0.5, 2], np.float16)},
        COL,
    ),
    (
        "scalar with unknown rank",
        {"inputs": 3},
        any_shape("DT_FLOAT"),
        {"v": np.array(3, np.float32)},
        COL,
    ),
    (
        "empty tensor takes the target dtype",
        {"inputs": [[], []]},
        any_shape("DT_INT32"),
        {"v": np.zeros((2, 0), np.int32)},
        COL,
    ),
    (
        "empty string tensor",
        {"inputs": []},
        S,
        {"s": np.empty(0, dtype=object)},
        COL,
    ),
]


@pytest.mark.parametrize(
    ("payload", "signature", "expected", "fmt"),
    [case[1:] for case in DECODE_OK],
    ids=[case[0] for case in DECODE_OK],
)
def test_decode_ok(
    payload: dict[str, Any],
    signature: Signature,
    expected: dict[str, np.ndarray],
    fmt: RequestFormat,
) -> None:
    request = decode_predict_request(payload, signature)
    assert isinstance(request, PredictRequest)
    assert request.format is fmt
    assert request.signature_name == payload.get("signature_name")
    assert list(request.inputs) == list(signature.inputs)
    for name, want in expected.items():
        got = request.inputs[name]
        assert got.dtype == want.dtype, name
        assert got.shape == want.shape, name
        np.testing.assert_array_equal(got, want)


# --- decoding: errors -------------------------------------------------------------------------

DECODE_ERRORS: list[tuple[str, dict[str, Any], Signature, str]] = [
    ("both keys", {"instances": [[1, 2, 3]], "inputs": [[1, 2, 3]]}, X, "got both"),
    ("neither key", {"signature_name": "x"}, X, "got neither"),
    ("instances not a list", {"instances": {"b64": "AA=="}}, S, "'instances' must be a list"),
    ("empty instances", {"instances": []}, X, "non-empty"),
    ("row missing input", {"instances": [{"a": [1, 2], "b": 1}, {"a": [1, 2]}]}, MULTI, "'b'"),
    (
        "row unknown input",
        {"instances": [{"a": [1, 2], "b": 1, "c": 0}]},
        MULTI,
        "unknown input 'c'",
    ),
    ("row mixes named and plain", {"instances": [{"x": [1, 2, 3]}, [1, 2, 3]]}, X, "instances[1]"),
    ("row plain list, several inputs", {"instances": [[1, 2]]}, MULTI, "has 2 inputs"),
    ("row b64 with several inputs", {"instances": [b64(b"x")]}, MIXED, "has 2 inputs"),
    ("columnar missing input", {"inputs": {"a": [[1, 2]]}}, MULTI, "missing input 'b'"),
    ("columnar unknown input", {"inputs": {"x": [[1, 2, 3]], "z": 1}}, X, "unknown input 'z'"),
    ("columnar bare value, several inputs", {"inputs": [1]}, MULTI, "has 2 inputs"),
    ("ragged numeric", {"instances": [[1, 2, 3], [4, 5]]}, X, "ragged"),
    ("ragged strings", {"inputs": [["a", "b"], ["c"]]}, S2, "ragged"),
    (
        "ragged across named instances",
        {"instances": [{"a": [1, 2], "b": 1}, {"a": [1], "b": 2}]},
        MULTI,
        "input 'a': nested lists are ragged",
    ),
    ("wrong rank", {"inputs": [1, 2, 3]}, X, "input 'x': expected shape [-1, 3], got [3]"),
    (
        "wrong size",
        {"inputs": [[1, 2], [3, 4]]},
        X,
        "input 'x': expected shape [-1, 3], got [2, 2]",
    ),
    (
        "string for float",
        {"inputs": [["1.5", 2, 3]]},
        X,
        "input 'x': expected DT_FLOAT, got strings",
    ),
    ("booleans for float", {"inputs": [[True, False, True]]}, X, "expected DT_FLOAT, got booleans"),
    ("null for float", {"inputs": [[1, None, 3]]}, X, "expected DT_FLOAT, got null"),
    ("b64 for float", {"inputs": [b64(b"x")]}, any_shape("DT_FLOAT"), "only for DT_STRING"),
    (
        "fractional for int",
        {"inputs": [1, 1.5]},
        any_shape("DT_INT32"),
        "expected DT_INT32, got floats",
    ),
    ("integral float for int", {"inputs": [2.0]}, any_shape("DT_INT64"), "got floats"),
    ("uint8 over range", {"inputs": [1, 300]}, any_shape("DT_UINT8"), "value 300 is out of range"),
    (
        "uint8 negative",
        {"inputs": [-1]},
        any_shape("DT_UINT8"),
        "value -1 is out of range for DT_UINT8",
    ),
    ("int32 over range", {"inputs": [2**31]}, any_shape("DT_INT32"), "out of range for DT_INT32"),
    ("int64 from uint64 range", {"inputs": [2**63]}, any_shape("DT_INT64"), "out of range"),
    ("float32 overflow", {"inputs": [1e39]}, any_shape("DT_FLOAT"), "out of range for DT_FLOAT"),
    ("ints for bool", {"inputs": [0, 1]}, any_shape("DT_BOOL"), "expected DT_BOOL, got integers"),
    ("number for string", {"instances": ["a", 1]}, S, "expected DT_STRING"),
    ("null for string", {"inputs": [None]}, S, "got null"),
    ("bad base64", {"instances": [{"b64": "not base64!"}]}, S, "invalid base64"),
    ("b64 not a string", {"instances": [{"b64": 5}]}, S, "expected DT_STRING"),
    (
        "signature_name not a string",
        {"signature_name": 1, "inputs": [[1, 2, 3]]},
        X,
        "must be a string",
    ),
]


@pytest.mark.parametrize(
    ("payload", "signature", "message"),
    [case[1:] for case in DECODE_ERRORS],
    ids=[case[0] for case in DECODE_ERRORS],
)
def test_decode_errors(payload: dict[str, Any], signature: Signature, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        # Decoding, then the server's one validator: between them every bad body is refused.
        check_inputs(signature, decode_predict_request(payload, signature).inputs)
    assert message in info.value.message
    assert info.value.http_status == 400


def test_decode_large_image_is_float32() -> None:
    image = np.random.default_rng(0).random((224, 224, 3))
    payload = parse_json_body(orjson.dumps({"instances": [image.tolist()]}))
    signature = sig(images=("DT_FLOAT", (-1, 224, 224, 3)))
    request = decode_predict_request(payload, signature)
    got = request.inputs["images"]
    assert got.dtype == np.float32
    assert got.shape == (1, 224, 224, 3)
    np.testing.assert_array_equal(got[0], image.astype(np.float32))


# --- body and signature name ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"", "not valid JSON"),
        (b'{"inputs": NaN}', "not valid JSON"),
        (b"[1, 2]", "must be a JSON object, got a list"),
        (b'"text"', "must be a JSON object, got a string"),
        (b"null", "must be a JSON object, got null"),
    ],
    ids=["malformed", "empty", "nan literal", "list", "string", "null"],
)
def test_parse_json_body_errors(body: bytes, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_json_body(body)
    assert message in info.value.message


def test_parse_json_body_ok() -> None:
    assert parse_json_body(b'{"instances": [1]}') == {"instances": [1]}


@pytest.mark.parametrize(
    ("payload", "expected"),
    [({}, None), ({"signature_name": "s"}, "s"), ({"signature_name": ""}, "")],
)
def test_read_signature_name(payload: dict[str, Any], expected: str | None) -> None:
    assert read_signature_name(payload) == expected


@pytest.mark.parametrize("bad", [None, 1, ["s"], {"n": "s"}])
def test_read_signature_name_rejects_non_strings(bad: Any) -> None:
    with pytest.raises(InvalidInput, match="'signature_name' must be a string"):
        read_signature_name({"signature_name": bad})


# --- encoding ---------------------------------------------------------------------------------

ENCODE_OK: list[tuple[str, dict[str, np.ndarray], RequestFormat, Any]] = [
    (
        "row single output drops the name",
        {"scores": np.array([[0.5, 0.25], [1, 0]], np.float32)},
        ROW,
        {"predictions": [[0.5, 0.25], [1.0, 0.0]]},
    ),
    (
        "row several outputs, one object per row",
        {"cls": np.array([3, 1], np.int64), "p": np.array([[0.5], [0.75]], np.float64)},
        ROW,
        {"predictions": [{"cls": 3, "p": [0.5]}, {"cls": 1, "p": [0.75]}]},
    ),
    (
        "columnar single output",
        {"scores": np.array([[1, 2]], np.int32)},
        COL,
        {"outputs": [[1, 2]]},
    ),
    (
        "columnar several outputs may differ in dim 0",
        {"a": np.array([True, False]), "b": np.array([1, 2, 3], np.uint8)},
        COL,
        {"outputs": {"a": [True, False], "b": [1, 2, 3]}},
    ),
    (
        "columnar scalar output",
        {"n": np.array(7, np.int64)},
        COL,
        {"outputs": 7},
    ),
    (
        "columnar scalar among several",
        {"n": np.float32(0.5), "v": np.array([1.5], np.float32)},
        COL,
        {"outputs": {"n": 0.5, "v": [1.5]}},
    ),
    (
        "float16 widened",
        {"h": np.array([0.5, -2], np.float16)},
        ROW,
        {"predictions": [0.5, -2.0]},
    ),
    (
        "non-finite floats become null",
        {"f": np.array([np.nan, np.inf, 1], np.float32)},
        COL,
        {"outputs": [None, None, 1.0]},
    ),
    (
        "non-contiguous and big-endian arrays",
        {"t": np.arange(6, dtype=">i4").reshape(2, 3).T},
        COL,
        {"outputs": [[0, 3], [1, 4], [2, 5]]},
    ),
    (
        "string output is utf-8 text",
        {"label": strings(b"chat", "\u00e9t\u00e9".encode())},
        ROW,
        {"predictions": ["chat", "\u00e9t\u00e9"]},
    ),
    (
        "non-utf8 string falls back to b64",
        {"label": strings(b"ok", b"\xff\xfe")},
        COL,
        {"outputs": ["ok", b64(b"\xff\xfe")]},
    ),
    (
        "_bytes output is always b64",
        {"image_bytes": np.array([[b"ab"], [b""]], dtype=object)},
        COL,
        {"outputs": [[b64(b"ab")], [b64(b"")]]},
    ),
    (
        "_bytes output in row format with others",
        {"image_bytes": strings(b"\x00"), "score": np.array([0.5], np.float32)},
        ROW,
        {"predictions": [{"image_bytes": b64(b"\x00"), "score": 0.5}]},
    ),
    (
        "numpy bytes dtype",
        {"s": np.array([b"a", b"bc"])},
        ROW,
        {"predictions": ["a", "bc"]},
    ),
    (
        "scalar string output in columnar",
        {"s": np.array(b"x", dtype=object)},
        COL,
        {"outputs": "x"},
    ),
]


@pytest.mark.parametrize(
    ("outputs", "fmt", "expected"),
    [case[1:] for case in ENCODE_OK],
    ids=[case[0] for case in ENCODE_OK],
)
def test_encode_ok(outputs: dict[str, np.ndarray], fmt: RequestFormat, expected: Any) -> None:
    body = encode_predict_response(outputs, fmt)
    assert isinstance(body, bytes)
    assert orjson.loads(body) == expected


ENCODE_ERRORS: list[tuple[str, dict[str, np.ndarray], RequestFormat, type[Exception], str]] = [
    (
        "row outputs with different dim 0",
        {"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)},
        ROW,
        InvalidInput,
        "different batch sizes",
    ),
    (
        "row scalar output",
        {"n": np.array(1.0, np.float32)},
        ROW,
        InvalidInput,
        "output 'n' is a scalar",
    ),
    (
        "row scalar among several",
        {"v": np.zeros(1, np.float32), "n": np.array(1, np.int64)},
        ROW,
        InvalidInput,
        "output 'n' is a scalar",
    ),
    ("no outputs", {}, COL, SharedServeError, "no outputs"),
    ("complex dtype", {"c": np.zeros(2, np.complex64)}, COL, SharedServeError, "JSON cannot"),
]


@pytest.mark.parametrize(
    ("outputs", "fmt", "error", "message"),
    [case[1:] for case in ENCODE_ERRORS],
    ids=[case[0] for case in ENCODE_ERRORS],
)
def test_encode_errors(
    outputs: dict[str, np.ndarray], fmt: RequestFormat, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        encode_predict_response(outputs, fmt)


def test_round_trip_of_b64_strings() -> None:
    raw = bytes(range(256))
    request = decode_predict_request({"instances": [b64(raw)]}, S)
    body = encode_predict_response({"echo_bytes": request.inputs["s"]}, request.format)
    assert orjson.loads(body) == {"predictions": [b64(raw)]}

"""JSON arrays decoded straight into numpy (``json_arrays``) against the general path (orjson, then
numpy): for every body, the same arrays to the bit, or the same error, and the fast path taken
exactly when the array is plainly numeric and rectangular."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharedserve.errors import InvalidInput
from sharedserve.server.version.signature import Signature, TensorSpec
from sharedserve.server.wire.json_arrays import MIN_BYTES, JsonArray
from sharedserve.server.wire.oip import tensors
from sharedserve.server.wire.tfserving import codec

#: Whitespace inside an array, so that even a small one is long enough to be cut.
PAD = " " * MIN_BYTES
DTYPES = ["DT_FLOAT", "DT_DOUBLE", "DT_HALF", "DT_INT8", "DT_INT32", "DT_INT64", "DT_UINT8"]
DTYPES += ["DT_UINT64", "DT_BOOL", "DT_STRING"]


def signature(dtype: str) -> Signature:
    inputs = {"x": TensorSpec("x", dtype, None)}
    return Signature("serving_default", inputs, {"y": TensorSpec("y", "DT_FLOAT", (-1,))})


def seen(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Arrays as comparable values: dtype, shape and every bit (or the objects of strings)."""
    return {
        name: (a.dtype.str, a.shape, a.tolist() if a.dtype == object else a.tobytes())
        for name, a in arrays.items()
    }


def tf_outcome(body: bytes, dtype: str, fast: bool) -> Any:
    try:
        payload = codec.parse_predict_body(body) if fast else codec.parse_json_body(body)
        return seen(codec.decode_predict_request(payload, signature(dtype)).inputs)
    except InvalidInput as e:
        return f"InvalidInput: {e}"


def oip_outcome(body: bytes, fast: bool) -> Any:
    try:
        header = tensors.parse_json(body) if fast else orjson.loads(body)
        entry = header["inputs"][0]
        shape = tuple(entry["shape"])
        return seen({"x": tensors.from_json("x", entry["datatype"], shape, entry["data"])})
    except InvalidInput as e:
        return f"InvalidInput: {e}"


def render(values: list[str], shape: list[int], sep: str, pad: str = PAD) -> str:
    """``values`` (JSON number texts) nested in ``shape``, ``sep`` between elements."""
    if len(shape) == 1:
        return "[" + pad + sep.join(values) + "]"
    step = len(values) // shape[0]
    parts = [render(values[i * step : (i + 1) * step], shape[1:], sep, "") for i in range(shape[0])]
    return "[" + pad + sep.join(parts) + "]"


FLOAT_TEXTS = [repr, lambda x: f"{x:.17e}", lambda x: f"{x:.20E}", lambda x: f"{x:.6f}"]
floats = st.floats(allow_nan=False, allow_infinity=False) | st.floats(
    width=32, allow_nan=False, allow_infinity=False
)
ints = st.integers(-(2**63), 2**63 - 1) | st.integers(-300, 300)


@st.composite
def arrays(draw: st.DrawFn) -> tuple[str, list[int], str]:
    """(an array's text, its shape, the same numbers flat)"""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    size = int(np.prod(shape))
    kind = draw(st.sampled_from(["floats", "ints", "mixed"]))
    texts = []
    for _ in range(size):
        if kind == "ints" or (kind == "mixed" and draw(st.booleans())):
            texts.append(str(draw(ints)))
        else:
            texts.append(draw(st.sampled_from(FLOAT_TEXTS))(draw(floats)))
    sep = draw(st.sampled_from([",", ", ", " ,\n\t", "\r\n,"]))
    return render(texts, shape, sep), shape, render(texts, [size], sep)


@settings(max_examples=300, deadline=None)
@given(array=arrays(), dtype=st.sampled_from(DTYPES), key=st.sampled_from(["instances", "inputs"]))
def test_tf_serving_bodies_decode_as_the_general_path_does(
    array: tuple[str, list[int], str], dtype: str, key: str
) -> None:
    text, _, _ = array
    body = f'{{"signature_name": "serving_default", "{key}": {text}}}'.encode()
    assert isinstance(codec.parse_predict_body(body)[key], JsonArray)
    assert tf_outcome(body, dtype, fast=True) == tf_outcome(body, dtype, fast=False)


OIP_TYPES = ["FP32", "FP64", "FP16", "INT8", "INT32", "INT64", "UINT8", "UINT64", "BOOL", "BYTES"]


@settings(max_examples=150, deadline=None)
@given(array=arrays(), datatype=st.sampled_from(OIP_TYPES), flat=st.booleans())
def test_oip_bodies_decode_as_the_general_path_does(
    array: tuple[str, list[int], str], datatype: str, flat: bool
) -> None:
    nested, shape, flat_text = array
    text = flat_text if flat else nested  # the OIP takes data flat as well as nested
    entry = f'{{"name": "x", "datatype": "{datatype}", "shape": {shape}, "data": {text}}}'
    body = f'{{"id": "1", "inputs": [{entry}], "parameters": {{}}}}'.encode()
    assert isinstance(tensors.parse_json(body)["inputs"][0]["data"], JsonArray)
    assert oip_outcome(body, fast=True) == oip_outcome(body, fast=False)


def test_a_large_image_body_is_decoded_exactly() -> None:
    image = np.random.default_rng(0).random((2, 64, 64, 3), dtype=np.float32)
    body = json.dumps({"instances": image.tolist()}).encode()
    payload = codec.parse_predict_body(body)
    assert isinstance(payload["instances"], JsonArray)
    got = codec.decode_predict_request(payload, signature("DT_FLOAT")).inputs["x"]
    assert got.dtype == np.float32 and np.array_equal(got, image)


def test_int_edges_and_a_float_among_many_ints() -> None:
    many = ",".join(["9223372036854775807", "-9223372036854775808"] * 200)
    for text, dtype in [(f"[{many}]", "DT_INT64"), (f"[{many}, 0.5]", "DT_DOUBLE")]:
        body = f'{{"instances": {text}}}'.encode()
        assert isinstance(codec.parse_predict_body(body)["instances"], JsonArray)
        assert tf_outcome(body, dtype, fast=True) == tf_outcome(body, dtype, fast=False)


#: Arrays that are not plainly numeric and rectangular (or not JSON): the general path takes them.
FALLBACK = [
    "[[1, 2], [3]]",
    "[[1, 2], 3]",
    "[1, [2, 3]]",
    '[["a", "b"]]',
    '[{"b64": "AAAA"}]',
    '[{"x": [1, 2]}]',
    "[true, false]",
    "[1, true]",
    "[1, null]",
    "[18446744073709551616, 1]",
    "[-9223372036854775809, 1]",
    "[9223372036854775808, 1]",
    "[NaN, 1]",
    "[Infinity]",
    "[1e400, 1]",
    "[[], []]",
    "[[[]]]",
    "[1,, 2]",
    "[1 2]",
    "[01, 2]",
    "[1., 2]",
    "[.5, 2]",
    "[-, 2]",
    "[+1, 2]",
    "[1, 2,]",
    "[1,\x0b2]",
    "[[1, 2] [3, 4]]",
    "[[1, 2]3]",
    "[1, 2]]",
]


@pytest.mark.parametrize("text", FALLBACK)
@pytest.mark.parametrize("dtype", ["DT_FLOAT", "DT_INT64", "DT_UINT64", "DT_STRING"])
def test_anything_else_takes_the_general_path(text: str, dtype: str) -> None:
    body = f'{{"instances": [{PAD}{text[1:]}}}'.encode()
    try:
        fast = codec.parse_predict_body(body)
    except InvalidInput:
        pass
    else:
        assert not isinstance(fast.get("instances"), JsonArray)
    assert tf_outcome(body, dtype, fast=True) == tf_outcome(body, dtype, fast=False)


NUMBERS = "[" + PAD + "1.5, 2.5]"


@pytest.mark.parametrize(
    "body",
    [
        f'{{"instances": {NUMBERS}, "instances": "x"}}',  # the last one counts, as in orjson
        f'{{"instances": {NUMBERS}, "inputs": [1]}}',  # both: refused, with the same words
        f'{{"instances": [{{"inputs": {NUMBERS}}}]}}',  # not where the only input stands
        f'{{"inputs": {{"x": {NUMBERS}}}}}',
        f'{{"instances": {NUMBERS}, "signature_name": 3}}',
        f'{{"instances": {NUMBERS}, "bad": tru}}',  # invalid JSON outside the array
        f'[{{"instances": {NUMBERS}}}]',
    ],
)
def test_bodies_around_an_array_answer_as_before(body: str) -> None:
    for dtype in ("DT_FLOAT", "DT_STRING"):
        assert tf_outcome(body.encode(), dtype, True) == tf_outcome(body.encode(), dtype, False)


def test_oip_errors_and_other_inputs_are_the_general_paths() -> None:
    bad = f'{{"inputs": [{{"name": "x", "data": {NUMBERS}}}], oops}}'.encode()
    with pytest.raises(InvalidInput, match="the request's JSON is not valid"):
        tensors.parse_json(bad)
    two = (
        f'{{"inputs": [{{"name": "a", "data": {NUMBERS}}}, {{"name": "b", "data": [1, 2]}},'
        f' {{"name": "c", "data": {NUMBERS.replace("1.5", "7")}}}]}}'
    ).encode()
    header = tensors.parse_json(two)
    assert [type(entry["data"]) for entry in header["inputs"]] == [JsonArray, list, JsonArray]
    assert header["inputs"][2]["data"].value() == [7, 2.5]
    binary = tensors.parse_json(two + b"\xff[1, 2]", len(two))  # raw tensor bytes after it
    assert binary["inputs"][0]["data"].raw.tolist() == [1.5, 2.5]

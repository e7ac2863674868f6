"""The one validator: a request's arrays against the signature, whatever the wire format."""

from __future__ import annotations

import time

import numpy as np
import pytest

from sharedserve.errors import InvalidInput
from sharedserve.server.inference.validate import check_inputs, check_shape
from sharedserve.server.protos.tfserving import tf_serving_pb2 as pb
from sharedserve.server.version.signature import Signature, TensorSpec
from sharedserve.server.wire.tfserving.tensor_proto import from_tensor_proto


def sig(**inputs: tuple[str, tuple[int, ...] | None]) -> Signature:
    specs = {k: TensorSpec(k, dtype, shape, f"{k}:0") for k, (dtype, shape) in inputs.items()}
    out = {"y": TensorSpec("y", "DT_FLOAT", (-1,), "y:0")}
    return Signature("serving_default", specs, out)


IMAGE = sig(images=("DT_FLOAT", (-1, 4, 4, 3)))
TWO = sig(a=("DT_INT64", (-1, 2)), b=("DT_STRING", (-1,)))
ANY = sig(x=("DT_UINT8", None))


@pytest.mark.parametrize(
    ("signature", "inputs"),
    [
        (IMAGE, {"images": np.zeros((1, 4, 4, 3), np.float32)}),
        (IMAGE, {"images": np.zeros((0, 4, 4, 3), np.float32)}),
        (IMAGE, {"images": np.zeros((7, 4, 4, 3), np.dtype("<f4"))}),
        (TWO, {"a": np.zeros((2, 2), np.int64), "b": np.array([b"x", b"y"], dtype=object)}),
        (ANY, {"x": np.zeros((), np.uint8)}),
        (ANY, {"x": np.zeros((2, 3, 4), np.uint8)}),
    ],
)
def test_accepts(signature: Signature, inputs: dict[str, np.ndarray]) -> None:
    check_inputs(signature, inputs)


@pytest.mark.parametrize(
    ("signature", "inputs", "message"),
    [
        (IMAGE, {}, "missing input 'images'"),
        (
            IMAGE,
            {"images": np.zeros((1, 4, 4, 3), np.float32), "z": np.zeros(1)},
            "unknown input 'z'; the signature's inputs are images",
        ),
        (TWO, {"a": np.zeros((1, 2), np.int64)}, "missing input 'b'"),
        (IMAGE, {"images": np.zeros((1, 4, 4, 3), np.float64)}, "expected DT_FLOAT, got DT_DOUBLE"),
        (IMAGE, {"images": np.zeros((1, 4, 4, 3), np.int32)}, "expected DT_FLOAT, got DT_INT32"),
        (IMAGE, {"images": np.zeros((1, 4, 4), np.float32)}, "expected shape [-1, 4, 4, 3]"),
        (IMAGE, {"images": np.zeros((1, 4, 4, 1), np.float32)}, "got [1, 4, 4, 1]"),
        (
            TWO,
            {"a": np.zeros((1, 2), np.int64), "b": np.zeros(1, np.float32)},
            "input 'b': expected DT_STRING, got DT_FLOAT",
        ),
        (ANY, {"x": np.zeros(3, np.complex64)}, "expected DT_UINT8, got complex64"),
    ],
)
def test_refuses(signature: Signature, inputs: dict[str, np.ndarray], message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        check_inputs(signature, inputs)
    assert message in info.value.message
    assert info.value.http_status == 400 and info.value.grpc_code == "INVALID_ARGUMENT"


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([1] * 65, "has 65 dimensions, more than 64"),
        ([1, -1], "has a negative dimension [1, -1]"),
        ([2**62, 2**62], "more than any tensor can hold"),
        ([2**63 - 1, 8], "more than any tensor can hold"),
    ],
)
def test_declared_shapes_refused(shape: list[int], message: str) -> None:
    with pytest.raises(InvalidInput, match=r"^input 'x': 'shape'") as caught:
        check_shape("input 'x': 'shape'", shape)
    assert message in str(caught.value)


def test_declared_shapes_accepted() -> None:
    assert check_shape("s", [1] * 64) == (1,) * 64
    assert check_shape("s", []) == ()
    assert check_shape("s", (0, 2**40)) == (0, 2**40)


@pytest.mark.parametrize("rank", [65, 1_300_000])
def test_tensor_proto_rank_is_judged_as_the_oips_and_before_its_dims_are_read(rank: int) -> None:
    # Was INTERNAL (numpy's reshape) at 65; a million dimensions (a 5 MB message) took 0.3 s of
    # the event loop to list before the check, and is refused now before they are read.
    proto = pb.TensorProto(dtype=pb.DT_FLOAT)
    for _ in range(rank):
        proto.tensor_shape.dim.add(size=1)
    proto = pb.TensorProto.FromString(proto.SerializeToString())
    start = time.perf_counter()
    with pytest.raises(InvalidInput, match=f"tensor_shape has {rank} dimensions, more than 64"):
        from_tensor_proto(proto, "input 'x'")
    assert time.perf_counter() - start < 0.1

"""A large ModelInferRequest read in slices (``server.wire``), each input's contents apart.

An input's typed ``contents`` (an InferTensorContents: 30M empty ``bytes_contents`` fit in a
60 MB message) sit two levels down, in a repeated InferInputTensor: a repeated message cannot be
merged a slice at a time (each slice of it would add an element), and copying a parsed 30M-value
contents into its input would be one long C call again. So each input is parsed without its
contents, and its contents by themselves, in slices, the values counted as they are walked
against the input's declared datatype and shape (which every standard serializer sends first)
and the element limit. ``raw_input_contents`` is a top-level repeated field: sliced as it is,
its elements counted first against the element limit (each entry's bytes at its input's
datatype), so 60 MB of raw data is refused before it is copied into the request.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from sharedserve.errors import InvalidInput, PayloadTooLarge, quoted
from sharedserve.server.inference.validate import MAX_DIMS
from sharedserve.server.protos.oip import grpc_predict_v2_pb2 as pb
from sharedserve.server.wire import proto_slices as wire
from sharedserve.server.wire.oip import tensors

__all__ = ["Input", "Split", "split_infer"]

# An input: the InferInputTensor without its contents, and its contents (None: none sent).
Input = tuple[Any, Any | None]
# A request as read: the request without its inputs, and its inputs in order.
Split = tuple[Any, list[Input]]

_REQUEST, _INPUT = "ModelInferRequest", "ModelInferRequest.InferInputTensor"
_VALUES = wire.Values(pb.InferTensorContents)
_NUMBER = {
    name: field.number for name, field in pb.InferTensorContents.DESCRIPTOR.fields_by_name.items()
}


def split_infer(limit: int | None) -> Callable[[bytes], Split]:
    """Reads a ModelInferRequest's bytes as a Split; ``limit`` is the element limit."""

    def split(data: bytes) -> Split:
        outer = wire.Slicer(pb.ModelInferRequest(), data, _REQUEST)
        inputs: list[Input] = []
        raw = _RawCount(limit)
        for field in wire.fields(data, 0, len(data), _REQUEST):
            if field.number == 5 and field.wire == 2:
                inputs.extend(_input(data, start, end, limit) for start, end in wire.each(field))
                continue
            if field.number == _RAW and field.wire == 2:
                raw.add(field, inputs)
            outer.add(field.begin, field.end, field.repeats)
        outer.flush()
        return outer.message, inputs

    return split


_RAW = pb.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number


class _RawCount:
    """The elements of ``raw_input_contents`` counted as its entries are met, the i-th at the
    i-th input's datatype (inputs come first from every standard serializer; one not read yet
    counts at the widest numeric datatype)."""

    def __init__(self, limit: int | None) -> None:
        self._limit, self._seen, self._elements = limit, 0, 0

    def add(self, field: wire.Field, inputs: list[Input]) -> None:
        if self._limit is None:
            return
        for start, end in wire.each(field):
            tensor = inputs[self._seen][0] if self._seen < len(inputs) else None
            self._seen += 1
            self._elements += tensors.raw_elements(
                None if tensor is None else tensor.datatype, end - start
            )
            if self._elements > self._limit:
                raise PayloadTooLarge(
                    f"raw_input_contents hold more than {self._limit} elements, the most a "
                    "request may hold (--max-request-elements)"
                )


def _input(data: bytes, start: int, end: int, limit: int | None) -> Input:
    tensor = wire.Slicer(pb.ModelInferRequest.InferInputTensor(), data, _INPUT)
    parts = []
    for field in wire.fields(data, start, end, _INPUT):
        if field.number == 5 and field.wire == 2:
            parts.extend(wire.each(field))  # a singular message sent twice merges
        else:
            tensor.add(field.begin, field.end, field.repeats)
    tensor.flush()
    if not parts:
        return tensor.message, None
    contents = pb.InferTensorContents()
    count = _Count(data, tensor.message, limit)
    for value, stop in parts:
        wire.parse(pb.InferTensorContents, data, value, stop, check=count, into=contents)
    return tensor.message, contents


class _Count:
    """Counts an input's values as its contents are walked; refuses more than the element limit,
    values in another field than its datatype's, more than its shape holds."""

    def __init__(self, data: bytes, tensor: Any, limit: int | None) -> None:
        self._data, self._limit = data, limit
        self._name, self._datatype = quoted(tensor.name), tensor.datatype
        # The input's own checks (tensors.declared_input) judge a bad datatype or shape after.
        self._field = tensors.CONTENTS_FIELD.get(tensor.datatype)
        shape = tensor.shape
        fits = len(shape) <= MAX_DIMS and min(shape, default=0) >= 0
        self._shape = list(shape) if fits else None
        self._values = 0

    def __call__(self, field: wire.Field) -> None:
        count = _VALUES.count(field, self._data)
        if not count:
            return
        self._values += count
        if self._limit is not None and self._values > self._limit:
            raise PayloadTooLarge(
                f"input {self._name}: more than {self._limit} values, the most elements a "
                "request may hold (--max-request-elements)"
            )
        if self._field is None:
            return
        if field.number != _NUMBER[self._field]:
            raise InvalidInput(
                f"input {self._name}: {_VALUES.names[field.number]} given for datatype "
                f"{self._datatype}"
            )
        size = math.prod(self._shape) if self._shape is not None else None
        if size is not None and self._values > size:
            raise InvalidInput(
                f"input {self._name}: at least {self._values} values in {self._field} for shape "
                f"{self._shape} ({size} elements)"
            )

"""A protobuf message's top-level fields walked in Python, so a huge message is parsed in slices.

upb (protobuf's C parser) holds the GIL for the whole of a ``FromString``: 60 MB of empty
``string_val`` (30M two-byte fields) kept every other thread, the event loop's included, waiting
for ~1 s. Protobuf's merge rule makes a message parsed from A+B the message parsed from A and
then merged with B (repeated fields append, singular ones: last wins, submessages merge), so a
message cut at field boundaries can be parsed a slice at a time, each slice a short C call, with
the GIL free for the loop between them. The cut points need the field boundaries, which only a
walk from the start finds: this module walks them (tag and length varints decoded in Python) and
refuses malformed wire data as upb would, naming the message.

The price is a Python step per field: nothing for a message of a few large fields (a tensor's
``tensor_content``, a packed ``float_val``), seconds of CPU for tens of millions of tiny ones,
spent in a worker thread that gives the GIL up every switch interval. Callers bound the tiny
fields (by the declared shape, by the element limit) as the walk goes and stop it early. What
slicing cannot cut: upb grows a repeated field by doubling it, one copy in C, ~0.1 s at 16M
values; and grpcio hands the message over as one bytes object, copied on the event loop
(~80 ms for 60 MB).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

from sharedserve.errors import InvalidInput

__all__ = [
    "SLICE_BYTES",
    "SLICE_FIELDS",
    "Field",
    "Slicer",
    "Values",
    "each",
    "fields",
    "parse",
    "varint",
]

# A slice's parse stays a few milliseconds at worst: 256 KiB of large fields is a memcpy, and
# 64k tiny fields (the worst case per byte) parse in about 2 ms.
SLICE_BYTES = 256 * 1024
SLICE_FIELDS = 64 * 1024


class Field(NamedTuple):
    """A field as walked, or a run of ``repeats`` fields of one number and wire type that share
    a two-byte head (empty strings, say), which callers count without one step each."""

    number: int
    wire: int
    begin: int
    value: int  # where the (last) field's value starts
    end: int
    repeats: int


# A field's check: it may refuse the field (and so the message) by raising.
Check = Callable[[Field], None]


def varint(data: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; InvalidInput when it is cut short or
    longer than 10 bytes."""
    value = shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            break
    raise InvalidInput(f"the request is not a valid {what}: a varint is cut short or too long")


def fields(data: bytes, start: int, end: int, what: str) -> Iterator[Field]:
    """Each field in ``data[start:end]``, a message named ``what``, or run of fields (``Field``);
    InvalidInput on malformed wire data."""
    pos = start
    while pos < end:
        begin = pos
        tag = data[pos]
        if tag < 0x80:  # one-byte tag: fields 1-15, nearly every field sent
            pos += 1
        else:
            tag, pos = varint(data, pos, end, what)
        number, wire = tag >> 3, tag & 7
        if number == 0 or number >= 1 << 29:
            raise InvalidInput(f"the request is not a valid {what}: field number {number}")
        value, count = pos, 1
        if wire == 2:
            if pos < end and data[pos] < 0x80:
                length = data[pos]
                value = pos + 1
            else:
                length, value = varint(data, pos, end, what)
            pos = value + length
            if value - begin == 2 and pos <= end:
                pos, count = _run(data, begin, pos, end)
                value = pos - length
        elif wire == 0:
            _, pos = varint(data, pos, end, what)
        elif wire == 5:
            pos += 4
        elif wire == 1:
            pos += 8
        else:  # groups (3, 4): deprecated, in no message we serve; 6, 7: not wire types
            raise InvalidInput(
                f"the request is not a valid {what}: field {number} has wire type {wire}"
            )
        if pos > end:
            raise InvalidInput(
                f"the request is not a valid {what}: field {number} runs past the message's end"
            )
        yield Field(number, wire, begin, value, pos, count)


def _run(data: bytes, begin: int, pos: int, end: int) -> tuple[int, int]:
    """The end and the length of the run of fields from ``begin`` (whose field ends at
    ``pos``) that share its two-byte head (tag, length): a step of a Python loop each instead
    of a generator's round, and a few comparisons in C for a run of empty ones (30M empty
    strings were 40 s of walking one by one)."""
    head, step = data[begin : begin + 2], pos - begin
    if step == 2:  # empty: the run is the head repeated; find how far by halving
        most = min(SLICE_FIELDS - 1, (end - pos) // 2)
        low, high = 0, most
        while low < high:
            middle = (low + high + 1) // 2
            if data.startswith(head * middle, pos):
                low = middle
            else:
                high = middle - 1
        return pos + 2 * low, 1 + low
    count = 1
    while count < SLICE_FIELDS and pos + step <= end and data.startswith(head, pos):
        pos += step
        count += 1
    return pos, count


def each(field: Field) -> list[tuple[int, int]]:
    """Where the value of each field of a run starts and ends (a length-delimited field)."""
    step = (field.end - field.begin) // field.repeats
    heads = range(field.begin, field.end, step)
    return [(field.value - field.end + head + step, head + step) for head in heads]


class Slicer:
    """Merges runs of whole fields into ``message``, a slice of at most SLICE_BYTES or
    SLICE_FIELDS at a time; ``flush`` merges what is left."""

    def __init__(self, message: Any, data: bytes, what: str) -> None:
        self.message, self._view, self._what = message, memoryview(data), what
        self._start = self._end = self._fields = 0

    def add(self, start: int, end: int, count: int = 1) -> None:
        if start != self._end or self._fields >= SLICE_FIELDS or end - self._start > SLICE_BYTES:
            self.flush()
            self._start = start
        self._end = end
        self._fields += count

    def flush(self) -> None:
        if self._end > self._start:
            try:
                self.message.MergeFromString(self._view[self._start : self._end])
            except DecodeError as e:
                raise InvalidInput(f"the request is not a valid {self._what}: {e}") from None
        self._start = self._end
        self._fields = 0


def parse(
    message_type: Any,
    data: bytes,
    start: int = 0,
    end: int | None = None,
    *,
    check: Check | None = None,
    into: Any = None,
) -> Any:
    """``message_type`` parsed from ``data[start:end]`` in slices (merged into ``into`` if
    given); ``check`` sees each field first and may refuse it (and so the message) by raising."""
    message = into if into is not None else message_type()
    what = message_type.DESCRIPTOR.name
    slicer = Slicer(message, data, what)
    for field in fields(data, start, len(data) if end is None else end, what):
        if check is not None:
            check(field)
        slicer.add(field.begin, field.end, field.repeats)
    slicer.flush()
    return message


_FD = FieldDescriptor
# A repeated scalar field's wire type unpacked, and its packed width (0: varints).
_SCALAR = {
    **dict.fromkeys((_FD.TYPE_FLOAT, _FD.TYPE_FIXED32, _FD.TYPE_SFIXED32), (5, 4)),
    **dict.fromkeys((_FD.TYPE_DOUBLE, _FD.TYPE_FIXED64, _FD.TYPE_SFIXED64), (1, 8)),
    **dict.fromkeys(
        (
            _FD.TYPE_INT32,
            _FD.TYPE_INT64,
            _FD.TYPE_UINT32,
            _FD.TYPE_UINT64,
            _FD.TYPE_SINT32,
            _FD.TYPE_SINT64,
            _FD.TYPE_BOOL,
            _FD.TYPE_ENUM,
        ),
        (0, 0),
    ),
}
# Bytes with the high bit set: deleting them leaves one byte (the last) per varint.
_CONTINUED = bytes(range(0x80, 0x100))


class Values:
    """Counts the elements of a message type's repeated value fields as a walk meets them:
    one per unpacked field or string, a packed run by its bytes (exactly: fixed widths divide,
    and every varint ends in the one byte of it under 0x80)."""

    def __init__(self, message_type: Any) -> None:
        self.names: dict[int, str] = {}
        self._kind: dict[int, tuple[int, int]] = {}  # number -> (unpacked wire type, width)
        for field in message_type.DESCRIPTOR.fields:
            if not field.is_repeated or field.type == _FD.TYPE_MESSAGE:
                continue
            self.names[field.number] = field.name
            kind = _SCALAR.get(field.type)
            self._kind[field.number] = (2, -1) if kind is None else kind

    def count(self, field: Field, data: bytes) -> int:
        """Elements in the field or run (0 for another field, or one with the wrong wire type:
        upb keeps those as unknown fields, not values)."""
        kind = self._kind.get(field.number)
        if kind is None:
            return 0
        unpacked, width = kind
        if field.wire == unpacked or width < 0:
            return field.repeats
        if field.wire != 2:
            return 0
        if field.repeats == 1:
            first, payload = field.value, field.end - field.value
        else:  # a run's heads are two bytes each, both under 0x80
            first, payload = field.begin, field.end - field.begin - 2 * field.repeats
        if width > 0:
            return payload // width
        segment = data[first : field.end]
        return payload - (len(segment) - len(segment.translate(None, _CONTINUED)))

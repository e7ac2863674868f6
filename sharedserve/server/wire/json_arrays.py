"""A JSON body's big numeric arrays, decoded straight into numpy (pure: no framework, no HTTP).

Why: parsed by orjson, a 3 MiB body of floats becomes a Python float and a list slot per number
(~18x the body in memory) and then one more walk to make an array; most of a REST predict's time
and a body's memory went there. Here the array's bytes are cut out of the body and handed to
simdjson, which parses them in C into a flat buffer of doubles or int64s, a piece at a time (its
tape for one piece, not for the body); numpy reshapes that. The rest of the body (names,
datatypes, parameters) is small and still parsed by orjson, with a placeholder string where the
array was.

The general path (orjson, then ``np.asarray``) stays the reference: an array is taken here only
when it is plainly a rectangular array of JSON numbers, and then ``raw`` is exactly the array
``np.asarray(orjson.loads(span))`` makes (float64 when any number has a fraction or exponent,
else int64; both parsers round correctly). Anything else (ragged or empty lists, strings,
objects, booleans, null, integers beyond int64, invalid JSON, whitespace other than JSON's) makes
``parse`` answer None, and the caller parses the whole body as before, for the same answer and
the same error message.
"""

from __future__ import annotations

import dataclasses
import math
import re
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import simdjson

__all__ = ["MIN_BYTES", "JsonArray", "parse", "resource"]

#: Arrays shorter than this are left to the general path: it is as fast for them.
MIN_BYTES = 1024
#: Bytes of the body simdjson parses at once: its tape (16 bytes a number) stays this small.
PARSE_BYTES = 1 << 17
_NUMBERS = b"0123456789.eE+- \t\n\r"  # and JSON's whitespace: what the structure is without
#: Keys looked at in one body: a try costs up to a scan of the body and a piece's parse, so a body
#: of many small arrays under these keys must not buy that many times (they take the general path).
_TRIES = 16
_MAX_RANK = 32  # deeper arrays (no model's tensors) take the general path


@dataclass(frozen=True)
class JsonArray:
    """A numeric JSON array cut out of a body: ``raw`` as ``np.asarray`` of its parsed value."""

    raw: np.ndarray
    source: bytes | bytearray
    start: int
    stop: int

    def value(self) -> Any:
        """The array as orjson parses it (for the general path's errors and string inputs)."""
        return orjson.loads(memoryview(self.source)[self.start : self.stop])


def parse(
    body: bytes | bytearray,
    keys: tuple[bytes, ...],
    places: Callable[[Any], Iterable[tuple[Any, Any]]],
    end: int | None = None,
) -> Any:
    """``orjson.loads(body[:end])`` with each numeric array that is the value of one of ``keys``
    a ``JsonArray``; None (parse it whole) when there is none, or when one is not where
    ``places`` (parsed value -> (container, key) pairs) says such an array may stand."""
    found = _cut(body, keys, len(body) if end is None else end)
    if found is None:
        return None
    rest, arrays = found
    try:
        value = orjson.loads(rest)
    except orjson.JSONDecodeError:
        return None  # the general path says where
    placed = 0
    for container, key in places(value):
        found_here = _get(container, key)
        if isinstance(found_here, str) and found_here in arrays:
            container[key] = arrays[found_here]
            placed += 1
    return value if placed == len(arrays) else None


def resource(
    value: Any, places: Callable[[Any], Iterable[tuple[Any, Any]]], source: bytes | bytearray
) -> None:
    """Each ``JsonArray`` of ``parse``'s ``value`` (where ``places`` says) cut from ``source``:
    a value parsed elsewhere (``decode_pool.py``) comes back without its body."""
    for container, key in places(value):
        found = _get(container, key)
        if isinstance(found, JsonArray):
            container[key] = dataclasses.replace(found, source=source)


def _get(container: Any, key: Any) -> Any:
    try:
        return container[key]
    except (KeyError, IndexError, TypeError):
        return None


def _cut(
    body: bytes | bytearray, keys: tuple[bytes, ...], end: int
) -> tuple[bytes, dict[str, JsonArray]] | None:
    """``body[:end]`` with each numeric array cut out, a placeholder string in its place; the
    arrays by placeholder. A placeholder holds a random word: no client can send one."""
    names = b"|".join(re.escape(key) for key in keys)
    arrays: dict[str, JsonArray] = {}
    pieces: list[bytes | memoryview] = []
    view, at, word = memoryview(body), 0, secrets.token_hex(8)
    key = re.compile(rb'"(?:' + names + rb')"[ \t\n\r]*:[ \t\n\r]*\[')
    looked = 0
    for _ in range(_TRIES):
        match = key.search(body, looked, end)
        if match is None:
            break
        start = looked = match.end() - 1
        array = _numeric(body, start, end)
        if array is None:
            continue
        looked = array.stop  # not inside it: it holds no key
        placeholder = f"sharedserve-array-{word}-{len(arrays)}"
        pieces += [view[at:start], orjson.dumps(placeholder)]
        arrays[placeholder] = array
        at = array.stop
    if not arrays:
        return None
    pieces.append(view[at:end])
    return b"".join(pieces), arrays


def _numeric(body: bytes | bytearray, start: int, end: int) -> JsonArray | None:
    """The numeric rectangular array whose ``[`` is at ``body[start]``, or None.

    simdjson checks the JSON and that every value is a number; the structure (``[``, ``]``,
    ``,`` in order) says that it is rectangular, and its shape.
    """
    rank, at = 0, start
    while at < end and body[at] in b"[ \t\n\r":
        rank += body[at] == ord("[")
        at += 1
    if rank > _MAX_RANK:
        return None
    for stop in _ends(body, start, end, rank):
        if stop - start < MIN_BYTES:
            return None
        found = _parse(body, start, stop, rank)
        if found is not None:
            flat, structure = found
            shape = _shape(structure, rank)
            if shape is None or math.prod(shape) != flat.size:
                return None
            return JsonArray(flat.reshape(shape), body, start, stop)
    return None


def _ends(body: bytes | bytearray, start: int, end: int, rank: int) -> Iterator[int]:
    """Where the array at ``start`` may end, likeliest first: after the first ``rank`` brackets
    that close together (inside a rectangular array fewer do), looked for from the end first
    (the body's one array ends there) and with JSON's whitespace between them last."""
    last = body.rfind(b"]" * rank, start, end)
    if last >= 0:
        yield last + rank
        first = body.find(b"]" * rank, start, last)
        if first >= 0:
            yield first + rank
    closes = re.compile(rb"\]" + rb"[ \t\n\r]*\]" * (rank - 1)).search(body, start, end)
    if closes is not None and closes.end() != last + rank:
        yield closes.end()


def _parse(
    body: bytes | bytearray, start: int, stop: int, rank: int
) -> tuple[np.ndarray, bytes] | None:
    """The numbers of ``body[start:stop]`` (float64 when one has a fraction or exponent, else
    int64: what ``np.asarray`` makes of orjson's list) and its structure: its brackets and
    commas, in order.

    simdjson parses a piece at a time, so its tape is for a piece, not for the body: a piece
    ends at a comma, and its brackets are closed (the next one's opened) as deep as that comma
    lies, which the ``]`` before it say; brackets that do not match make simdjson refuse. The
    piece, in the cache, then gives its structure.
    """
    # Room for every number there can be (one a digit and a comma); pages never written to
    # are never resident, so the array costs what it holds.
    room = (stop - start) // 2 + 1
    flat: np.ndarray = np.empty(0, dtype=np.int64)
    parser, view, filled, structure = simdjson.Parser(), memoryview(body), 0, []
    lo, opened = start, 0
    while lo < stop:
        hi, depth = _split(body, lo + PARSE_BYTES, stop, rank)
        text = b"".join((b"[" * opened, view[lo:hi], b"]" * depth))
        floats = flat.dtype == np.float64 or any(c in text for c in (b".", b"e", b"E"))
        if not flat.size or floats != (flat.dtype == np.float64):
            wider = np.empty(room, dtype=np.float64 if floats else np.int64)
            wider[:filled] = flat[:filled]  # ints so far: as numpy reads them among floats
            flat = wider
        try:
            parsed = parser.parse(text)
            if not isinstance(parsed, simdjson.Array):
                return None
            numbers = np.frombuffer(parsed.as_buffer(of_type="d" if floats else "i"), flat.dtype)
            del parsed  # the parser is reused only once its document is gone
        except (ValueError, RuntimeError, TypeError):
            return None  # invalid JSON, an integer beyond int64, a non-number: the general path's
        flat[filled : filled + numbers.size] = numbers
        filled += numbers.size
        brackets = text.translate(None, _NUMBERS)
        structure.append(brackets[opened : len(brackets) - depth])
        lo, opened = hi + 1, depth
    return flat[:filled], b",".join(structure)


def _split(body: bytes | bytearray, at: int, stop: int, rank: int) -> tuple[int, int]:
    """(a comma at or after ``at`` where a piece may end, the lists open there), or (stop, 0)."""
    for _ in range(8):
        comma = body.find(b",", at, stop) if at < stop else -1
        if comma < 0:
            break
        closed = 0
        while body[comma - 1 - closed] == ord("]"):
            closed += 1
        if closed or body[comma - 1] in b"0123456789":  # no whitespace: the depth is known
            return comma, rank - closed
        at = comma + 1
    return stop, 0


def _shape(text: bytes, rank: int) -> tuple[int, ...] | None:
    """The shape of a rectangular array whose structure is ``text`` (``[[,],[,]]``: the array
    without its numbers and whitespace), or None when it is ragged. (An empty list looks like
    one of one number: the count of numbers tells them apart.)

    Read from its first element at each depth, then checked by writing the structure that
    shape has and comparing: one pass in C, where a walk in Python would cost a step a list.
    """
    if not text.startswith(b"[" * rank):
        return None
    sizes = [text.index(b"]") - rank + 1]  # the innermost list: its commas, and one
    inner = b"[" + b"," * (sizes[0] - 1) + b"]"
    codes = np.frombuffer(text, np.uint8)
    for depth in range(rank - 1, 0, -1):
        # A list at this depth: its elements are ``inner``s, each followed by "," or its "]".
        first = depth  # where its first element starts
        after = codes[first + len(inner) :: len(inner) + 1]
        closes = np.flatnonzero(after == ord("]"))
        if not closes.size:
            return None
        sizes.insert(0, int(closes[0]) + 1)
        inner = b"[" + b",".join([inner] * sizes[0]) + b"]"
    return tuple(sizes) if inner == text else None

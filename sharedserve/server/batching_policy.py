"""Dynamic batching policy: settings, TF Serving's parameters file, and merging requests.

Why it is apart from the batcher: what may merge with what, how rows are packed and handed back,
and what a ``batching_parameters.txt`` means are decisions with no I/O in them, so they live here
and are tested table-driven; ``batching.py`` only adds the asyncio queue and the thread pool.

The parameters file is TF Serving's (``--batching_parameters_file``, protobuf text format of
``BatchingParameters``), so a file that works there works here. Fields that would change what a
batch is (padding, allowed sizes, splitting large requests) are refused rather than ignored.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, fields

import numpy as np

from sharedserve.config import BatchingSettings
from sharedserve.errors import ConfigError, InvalidInput, SharedServeError

__all__ = [
    "BatchKey",
    "BatchingSettings",
    "batch_key",
    "merge",
    "parse_batching_parameters",
    "request_rows",
    "split",
    "take_batch",
]

_INT64_MAX = 2**63 - 1


# --- TF Serving's batching_parameters.txt (protobuf text format) -------------------------------

_INT64_FIELDS = tuple(f.name for f in fields(BatchingSettings))  # all Int64Value wrappers
_IGNORED = {"thread_pool_name"}  # names TF Serving's shared pool; each batcher has its own
_UNSUPPORTED = {
    "allowed_batch_sizes": "padding batches to allowed sizes is not implemented",
    "pad_variable_length_inputs": "padding variable-length inputs is not implemented",
    "enable_large_batch_splitting": "requests over max_batch_size are refused, not split",
    "max_execution_batch_size": "requests over max_batch_size are refused, not split",
}
# Unsupported fields set to their off value change nothing, so files written for TF Serving load.
_OFF = {"false", "False", "f", "0"}

_TOKEN = re.compile(
    r"""(?P<space>[ \t\r\f\v]+|\#[^\n]*)|(?P<newline>\n)
    |(?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
    |(?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)[fF]?)
    |(?P<ident>[A-Za-z_]\w*)|(?P<punct>[{}<>:\[\],;])""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str  # "" for the end of the file
    text: str
    line: int

    def __str__(self) -> str:
        return repr(self.text) if self.kind else "the end of the file"


@dataclass(frozen=True)
class _Field:
    name: str
    line: int
    value: _Token | list[_Field] | tuple[_Token, ...]  # scalar, message, or [list] of scalars


def _error(line: int, message: str) -> ConfigError:
    return ConfigError(f"batching parameters line {line}: {message}")


def _tokenize(text: str) -> list[_Token]:
    tokens, line, pos = [], 1, 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise _error(line, f"unexpected {text[pos]!r}")
        if match.lastgroup == "newline":
            line += 1
        elif match.lastgroup != "space":
            tokens.append(_Token(match.lastgroup or "", match.group(), line))
        pos = match.end()
    return tokens


class _Parser:
    """Recursive descent over the tokens; every error names the line it is on."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.pos = 0

    def peek(self, after: _Token) -> _Token:
        """The next token; at the end, an empty one on ``after``'s line (for the message)."""
        return self.tokens[self.pos] if self.pos < len(self.tokens) else _Token("", "", after.line)

    def take(self, punct: str) -> bool:
        if self.pos < len(self.tokens) and self.tokens[self.pos].text == punct:
            self.pos += 1
            return True
        return False

    def message(self, close: str | None, opened: _Token) -> list[_Field]:
        parsed: list[_Field] = []
        while not (close and self.take(close)):
            token = self.peek(opened)
            if not token.kind and close is None:
                return parsed
            if not token.kind:
                raise _error(opened.line, f"{opened.text!r} is never closed (no {close!r})")
            if token.kind != "ident":
                raise _error(token.line, f"expected a field name, found {token}")
            self.pos += 1
            parsed.append(self.field(token))
            if not self.take(","):
                self.take(";")
        return parsed

    def field(self, name: _Token) -> _Field:
        colon = self.take(":")
        if self.take("{") or self.take("<"):
            closing = "}" if self.tokens[self.pos - 1].text == "{" else ">"
            return _Field(name.text, name.line, self.message(closing, name))
        if not colon:
            found = self.peek(name)
            raise _error(found.line, f"expected ':' or '{{' after {name.text!r}, found {found}")
        if not self.take("["):
            return _Field(name.text, name.line, self.scalar(name))
        items: list[_Token] = []
        while not self.take("]"):
            if items and not self.take(","):
                raise _error(self.peek(name).line, "expected ',' or ']' in a list")
            items.append(self.scalar(name))
        return _Field(name.text, name.line, tuple(items))

    def scalar(self, name: _Token) -> _Token:
        token = self.peek(name)
        if token.kind not in ("number", "string", "ident"):
            raise _error(token.line, f"expected a value for {name.text!r}, found {token}")
        self.pos += 1
        return token


def _wrapped(field: _Field, kind: str) -> _Token | None:
    """The ``value`` inside a ``google.protobuf.*Value`` wrapper (None when left at default)."""
    if not isinstance(field.value, list):
        raise _error(
            field.line,
            f"{field.name} is a google.protobuf.{kind} wrapper; write it as "
            f"'{field.name} {{ value: ... }}'",
        )
    if len(field.value) > 1 or any(inner.name != "value" for inner in field.value):
        raise _error(field.line, f"{field.name} takes exactly one 'value: ...' and nothing else")
    value = field.value[0].value if field.value else None
    if value is not None and not isinstance(value, _Token):
        raise _error(field.line, f"{field.name}'s value must be a plain value")
    return value


def _int64(field: _Field) -> int:
    token = _wrapped(field, "Int64Value")
    if token is None:
        return 0  # proto3: an empty wrapper holds the type's default
    hexadecimal = re.fullmatch(r"[-+]?0[xX][0-9a-fA-F]+", token.text)
    try:
        number: int | None = int(token.text, 16 if hexadecimal else 10)
    except ValueError:
        number = None
    if token.kind != "number" or number is None or abs(number) > _INT64_MAX:
        raise _error(token.line, f"{field.name} must be a 64-bit integer, got {token.text}")
    return number


def _is_off(field: _Field) -> bool:
    if isinstance(field.value, tuple):  # a [list]: always means something
        return False
    token = field.value if isinstance(field.value, _Token) else _wrapped(field, "BoolValue")
    return token is None or token.text in _OFF


def parse_batching_parameters(text: str) -> BatchingSettings:
    """Parse a TF Serving ``batching_parameters.txt``; ConfigError (with the line) if unusable.

    Fields left out keep ``BatchingSettings``' defaults (TF Serving's).
    """
    values: dict[str, int] = {}
    seen: dict[str, int] = {}
    unknown: list[str] = []
    for field in _Parser(text).message(None, _Token("", "", 1)):
        if field.name in seen:
            first = seen[field.name]
            raise _error(field.line, f"{field.name} is set twice (first on line {first})")
        seen[field.name] = field.line
        if field.name in _INT64_FIELDS:
            values[field.name] = _int64(field)
        elif field.name in _IGNORED:
            _wrapped(field, "StringValue")
        elif field.name in _UNSUPPORTED and not _is_off(field):
            reason = _UNSUPPORTED[field.name]
            raise _error(field.line, f"{field.name} is not supported ({reason})")
        elif field.name not in _UNSUPPORTED:
            unknown.append(f"{field.name} (line {field.line})")
    if unknown:
        raise ConfigError(
            f"batching parameters: unknown field(s) {', '.join(unknown)}; "
            f"known: {', '.join(_INT64_FIELDS)}"
        )
    settings = BatchingSettings(**values)
    settings.validate()
    return settings


# --- merging requests ---------------------------------------------------------------------------

BatchKey = tuple[str, tuple[tuple[str, str, tuple[int, ...]], ...]]
"""Signature name, then (input name, dtype, shape past dim 0) per input, sorted by name."""


def _dtype_key(dtype: np.dtype[np.generic]) -> str:
    # Fixed-width strings of different widths concatenate losslessly (numpy widens), so the width
    # must not keep two requests apart; every other dtype must match exactly.
    return dtype.kind if dtype.kind in "US" else dtype.str


def batch_key(signature_name: str, inputs: dict[str, np.ndarray]) -> BatchKey:
    """Requests merge only when signature, and every input's dtype and non-batch dims, agree."""
    return signature_name, tuple(
        sorted((name, _dtype_key(array.dtype), array.shape[1:]) for name, array in inputs.items())
    )


def request_rows(inputs: dict[str, np.ndarray]) -> int:
    """The request's batch size: dim 0, which every input must share (InvalidInput otherwise)."""
    if not inputs:
        raise InvalidInput("a batched request needs at least one input")
    for name, array in sorted(inputs.items()):
        if array.ndim == 0:
            raise InvalidInput(f"batching needs dim 0 on every input; {name!r} is a scalar")
    rows = {name: array.shape[0] for name, array in inputs.items()}
    if len(set(rows.values())) > 1:
        shown = ", ".join(f"{name!r}: {size}" for name, size in sorted(rows.items()))
        raise InvalidInput(f"inputs disagree on the batch size (dim 0): {shown}")
    return int(next(iter(rows.values())))


def merge(requests: list[dict[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], list[int]]:
    """Concatenate the requests along dim 0, input by input; also returns each one's rows."""
    if not requests:
        raise SharedServeError("merge needs at least one request")
    sizes = [request_rows(inputs) for inputs in requests]
    key = batch_key("", requests[0])
    if any(batch_key("", inputs) != key for inputs in requests[1:]):
        raise InvalidInput("requests with different inputs, dtypes or shapes cannot be batched")
    if len(requests) == 1:
        return dict(requests[0]), sizes  # nothing to merge: no copy
    merged = {name: np.concatenate([r[name] for r in requests]) for name in requests[0]}
    return merged, sizes


def split(outputs: dict[str, np.ndarray], sizes: list[int]) -> list[dict[str, np.ndarray]]:
    """Cut a merged batch's outputs back into one dict per request (views, not copies)."""
    total = sum(sizes)
    for name, array in outputs.items():
        if not isinstance(array, np.ndarray) or array.ndim == 0 or array.shape[0] != total:
            shape = getattr(array, "shape", type(array).__name__)  # a framework may break types
            raise SharedServeError(
                f"output {name!r} has shape {shape}, but the batch had {total} rows; a model "
                f"served with batching must return the batch as dim 0 of every output"
            )
    bounds = itertools.pairwise(itertools.accumulate(sizes, initial=0))
    return [{name: array[start:end] for name, array in outputs.items()} for start, end in bounds]


def take_batch(queue_sizes: list[int], max_batch_size: int) -> int:
    """How many requests from the head of the queue (their row counts, FIFO) one batch takes.

    At least one when the queue is not empty, even one over ``max_batch_size`` (the batcher
    refuses those before they queue); it stops at the first request that does not fit, because
    skipping ahead would let small requests starve a large one.
    """
    taken = rows = 0
    for size in queue_sizes:
        if taken and rows + size > max_batch_size:
            break
        taken += 1
        rows += size
    return taken

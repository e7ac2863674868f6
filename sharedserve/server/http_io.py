"""What every HTTP wire format shares: reading a body within its limits, JSON answers, error
bodies, version numbers in paths, and the counting of predict calls.

TF Serving's REST API (``tfserving/rest.py``) and the Open Inference Protocol's
(``oip/rest.py``) are routes on one app (``http.py``), so a body is read, refused and counted
the same way whichever API it was sent to.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import orjson
from fastapi import Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from sharedserve.errors import (
    InvalidInput,
    PayloadTooLarge,
    RequestTimeout,
    SharedServeError,
    quoted,
)
from sharedserve.server.metrics import Metrics

__all__ = ["JSON", "counted", "error", "json_response", "parse_version", "read_body"]

JSON = "application/json"
_CLIENT_CLOSED = 499
_VERSION = re.compile(r"0*(?P<digits>[0-9]{1,19})")  # ASCII digits, no more than int64 has
_INT64_MAX = 2**63 - 1


def json_response(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=JSON)


def error(status: int, message: str) -> Response:
    return json_response({"error": message}, status)


def parse_version(text: str) -> int:
    """A version from a path; InvalidInput unless it is an int64 in ASCII digits."""
    # Not int() alone: it takes any Unicode digit, and raises ValueError (a 500) from 4,301
    # digits on. TF Serving's versions are int64s; past that it answers 400 too.
    number = _VERSION.fullmatch(text)
    if number is None or int(number["digits"]) > _INT64_MAX:
        raise InvalidInput(f"Malformed request: version {quoted(text)} is not an integer (int64)")
    return int(number["digits"])


async def counted(
    metrics: Metrics, protocol: str, answer: Callable[[], Awaitable[Response]]
) -> Response:
    """``answer()``, with its status and latency recorded under ``protocol``."""
    started, code = time.perf_counter(), 200
    try:
        response = await answer()
        code = response.status_code
        return response
    except SharedServeError as e:
        code = e.http_status
        raise
    except ClientDisconnect:
        # The client went away mid-upload: its doing, not a server error. Counted as nginx
        # does ("499 client closed request"), not logged, and nothing is sent back.
        code = _CLIENT_CLOSED
        return Response(status_code=_CLIENT_CLOSED)
    except Exception:
        code = 500
        raise
    finally:
        metrics.observe_request(protocol, code, time.perf_counter() - started)


async def read_body(request: Request, limit: int, pause_s: float) -> bytes | bytearray:
    """The whole body, within ``limit`` bytes and with no pause over ``pause_s``. A declared
    length is read into one buffer of that size: large bodies wait their turn to be decoded
    (``budget``) holding one copy of their bytes, not a list of chunks and their join."""
    declared = request.headers.get("content-length")
    size = int(declared) if declared is not None and declared.isdigit() else None
    if size is not None and size > limit:
        raise PayloadTooLarge(f"request body of {size} bytes exceeds the limit of {limit}")
    body, chunks, received = bytearray(size or 0), list[bytes](), 0
    stream = request.stream()
    while True:
        try:
            with anyio.fail_after(pause_s):
                chunk = await anext(stream)
        except StopAsyncIteration:
            return body if size is not None else b"".join(chunks)
        except TimeoutError:
            raise RequestTimeout(
                f"no part of the request body arrived for {pause_s:g} s (--body-timeout)"
            ) from None
        if received + len(chunk) > (limit if size is None else size):
            # Chunked uploads declare no length: counted as they arrive. (The HTTP parser never
            # gives more than a declared length; the check costs nothing and keeps it so.)
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        if size is None:
            chunks.append(chunk)
        else:
            body[received : received + len(chunk)] = chunk
        received += len(chunk)

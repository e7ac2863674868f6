"""What every HTTP wire format shares: reading a body within its limits, JSON answers, error
bodies, version numbers in paths, and the counting of predict calls.

A body is read into memory as its bytes arrive, within the process-wide bound on bytes still
arriving (``body_bytes.ArrivingBytes``, 503 past it), then held under the decoding limit
(``body_bytes.DecodingBytes``) while it is decoded and answered: at no point does a declared length
alone make the server allocate.

TF Serving's REST API (``tfserving/rest.py``) and the Open Inference Protocol's
(``oip/rest.py``) are routes on one app (``http.py``), so a body is read, refused and counted
the same way whichever API it was sent to.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import orjson
from fastapi import Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from sharedserve.errors import (
    PayloadTooLarge,
    RequestTimeout,
    SharedServeError,
)
from sharedserve.server.metrics.prometheus import RequestCounter
from sharedserve.server.wire.body_bytes import ArrivingBytes, ArrivingShare, DecodingBytes

__all__ = ["JSON", "counted", "error", "json_response", "read_body"]

JSON = "application/json"
_CLIENT_CLOSED = 499


def json_response(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=JSON)


def error(status: int, message: str) -> Response:
    return json_response({"error": message}, status)


async def counted(
    metrics: RequestCounter, protocol: str, answer: Callable[[], Awaitable[Response]]
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


@asynccontextmanager
async def read_body(
    request: Request, limit: int, pause_s: float, arriving: ArrivingBytes, decoding: DecodingBytes
) -> AsyncIterator[bytearray]:
    """The whole body, within ``limit`` bytes and with no pause over ``pause_s``, held under the
    decoding limit for the block.

    The body grows with what arrived, never to a declared length before its bytes came (a
    77-byte request declaring 64 MiB held 64 MiB), and each chunk is taken from ``arriving``
    until ``decoding`` takes the whole body over, so the bytes waiting in memory are bounded
    too; one buffer, not a list of chunks and their join, so a body is one copy of its bytes.
    """
    declared = request.headers.get("content-length")
    size = int(declared) if declared is not None and declared.isdigit() else None
    if size is not None and size > limit:
        raise PayloadTooLarge(f"request body of {size} bytes exceeds the limit of {limit}")
    share = arriving.share()
    try:
        body = await _arrive(request, limit if size is None else size, pause_s, share)
        async with decoding.hold(len(body)):
            share.release()  # decoding counts it now
            yield body
    finally:
        share.release()  # refused, timed out or disconnected mid-body


async def _arrive(request: Request, bound: int, pause_s: float, share: ArrivingShare) -> bytearray:
    body, stream = bytearray(), request.stream()
    while True:
        try:
            with anyio.fail_after(pause_s):
                chunk = await anext(stream)
        except StopAsyncIteration:
            return body
        except TimeoutError:
            raise RequestTimeout(
                f"no part of the request body arrived for {pause_s:g} s (--body-timeout)"
            ) from None
        if len(body) + len(chunk) > bound:
            # Chunked uploads declare no length: counted as they arrive. (The HTTP parser never
            # gives more than a declared length; the check costs nothing and keeps it so.)
            raise PayloadTooLarge(f"request body exceeds the limit of {bound} bytes")
        share.take(len(chunk))
        body += chunk

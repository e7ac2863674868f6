"""Connection limits on the REST listener, where uvicorn sets none.

uvicorn closes a keep-alive connection left idle between two requests, but sets no deadline on a
connection that has not finished its first request's headers, and accepts connections without
bound: 200 silent, 200 trickled-header and 200 half-sent-body connections all stayed open
indefinitely (slowloris). This protocol, uvicorn's httptools protocol plus four rules, adds:

* a header deadline: the request line and headers must be complete within ``header_timeout_s``
  of the connection opening (or, between requests, of the next request's first byte); a partial
  request then gets 408, a silent connection is closed (nginx's ``client_header_timeout``);
* a header size bound: past ``max_header_bytes`` of a request's line and headers, 431 and the
  connection is closed. Neither httptools (llhttp) nor uvicorn's protocol bounds them (a 100 MiB
  header is accepted, and httptools holds a partial header in memory until it ends), so the
  bytes are counted as they are received, before the parser sees them: while a request's
  headers are incomplete, every byte received since the previous request ended is theirs
  (nginx's ``large_client_header_buffers``);
* a connection cap: past ``max_connections`` open connections, a new one's request gets 503 and
  the connection is closed (nginx's ``limit_conn``, answered once the request is read, so the
  client sees the answer instead of a reset);
* a response sent before its request's body was fully read closes the connection, so a body
  nobody reads cannot be trickled forever to keep it open; its head says ``connection: close``,
  so a pooled client does not send its next request on it (and get reset), and what the client
  still sends is drained for a few seconds first, so the close is not a reset that loses the
  answer (nginx's lingering close).

A body the app does read is timed and bounded by the app (``http_io.read_body``), which answers
408 or 503 itself and counts it. Closed and refused connections are counted by the
``on_refused`` callback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from sharedserve.server.settings import ConnectionSettings

if TYPE_CHECKING:
    from uvicorn._types import (
        ASGI3Application,
        ASGIReceiveCallable,
        ASGISendCallable,
        ASGISendEvent,
        Scope,
    )
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

__all__ = ["HEADER_TIMEOUT", "HEADER_TOO_LARGE", "OVER_CAPACITY", "protocol_class"]

HEADER_TIMEOUT = "header_timeout"
HEADER_TOO_LARGE = "header_too_large"
OVER_CAPACITY = "over_capacity"

# How long an answered request's unread body is drained before the connection is closed anyway
# (nginx's lingering_timeout; never longer than the header timeout): long enough for a client to
# finish writing a body of megabytes, short enough that trickling one holds nothing.
_LINGER_S = 5.0


def _answer(status: int, reason: str, message: str) -> bytes:
    body = orjson.dumps({"error": message})
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def protocol_class(
    limits: ConnectionSettings, on_refused: Callable[[str], None]
) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with ``limits``'s header deadline and size bound and its
    connection cap."""
    timeout_answer = _answer(
        408,
        "Request Timeout",
        f"request headers not received within {limits.header_timeout_s:g} s",
    )
    too_large_answer = _answer(
        431,
        "Request Header Fields Too Large",
        f"request line and headers exceed {limits.max_header_bytes} bytes (--max-header-bytes)",
    )
    # What the HTTP parser refuses (a negative or doubled Content-Length, a bad chunk size)
    # uvicorn answers itself, in text/plain; ours is the documented {"error": ...} body.
    malformed_answer = _answer(
        400, "Bad Request", "malformed HTTP/1.1 request: the HTTP parser refused it"
    )
    busy_answer = _answer(
        503,
        "Service Unavailable",
        f"too many connections (at most {limits.max_connections}); retry later",
    )

    linger_s = min(_LINGER_S, limits.header_timeout_s)

    class LimitedProtocol(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None
        _request_started = False
        _refused = False
        _draining = False  # answered with its body unread: what comes is dropped, then closed
        _linger: asyncio.TimerHandle | None = None
        _in_headers = True  # no request's headers in progress are complete: bytes are theirs
        _header_bytes = 0
        handshaking: Collection[object] = ()
        """Connections accepted and still in their TLS handshake (``tls.py``): they count
        against the cap too."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            opened = len(self.connections) + len(self.handshaking)
            self._refused = opened > limits.max_connections
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._linger is not None:
                self._linger.cancel()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._request_started = True
            if self._deadline is None:
                self._arm()

        def on_headers_complete(self) -> None:
            self._in_headers, self._header_bytes = False, 0
            self._disarm()
            self._request_started = False
            if self._refused:
                on_refused(OVER_CAPACITY)
                self._close_with(busy_answer)
                return
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            # What follows is the next request's line and headers. (Bytes of it that came in
            # the same read as this request's end go uncounted: at most one read, 256 KiB.)
            self._in_headers = True
            if not self._refused:
                super().on_message_complete()

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
            async def closing_when_unread(
                scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
            ) -> None:
                async def send_saying_close(message: ASGISendEvent) -> None:
                    # Answered before its body was read (a 404, a 413): close rather than read
                    # on, and say so in the answer's head, or a pooled client sends its next
                    # request on a connection being closed and is reset.
                    if cycle.response_started or not cycle.more_body:
                        await send(message)
                        return
                    cycle.keep_alive = False  # uvicorn writes "connection: close"...
                    await send(message)
                    # ...and would close once the answer is sent; on_response_complete does,
                    # after draining what the client is still sending.
                    cycle.keep_alive, self._draining = True, True

                await app(scope, receive, send_saying_close)

            super()._start_asgi_task(cycle, closing_when_unread)

        def data_received(self, data: bytes) -> None:
            if self._draining:
                return  # the rest of an answered request: dropped
            if self._in_headers:
                self._header_bytes += len(data)
            super().data_received(data)
            # Checked after parsing: headers completed in this read reset the count, so a body
            # sent in the same read as its headers is never mistaken for them.
            if self._in_headers and self._header_bytes > limits.max_header_bytes:
                self._headers_too_large()

        def on_response_complete(self) -> None:
            if not self._draining:
                super().on_response_complete()
                return
            # Closed with bytes unread, a socket sends a reset, and a client still writing its
            # body (as most do before reading) loses the answer to it. So, as nginx's lingering
            # close: end our side, read and drop what still comes, close when the client does
            # or after linger_s.
            self.server_state.total_requests += 1
            self._linger_close()

        def _linger_close(self) -> None:
            if not self.transport.is_closing():
                if self.transport.can_write_eof():  # TLS cannot half-close: read on alone
                    self.transport.write_eof()
                self.flow.resume_reading()
                self._linger = self.loop.call_later(linger_s, self.transport.close)

        def _headers_too_large(self) -> None:
            on_refused(HEADER_TOO_LARGE)
            self._disarm()
            if self.cycle is not None and not self.cycle.response_complete:
                self._close_with(too_large_answer)  # a pipelined answer is still being written
                return
            # A client sending headers this large is still sending them: closed at once, the
            # socket would reset and lose the answer, so the close lingers as for unread bodies.
            self._draining = True
            if not self.transport.is_closing():
                self.transport.write(too_large_answer)
            self._linger_close()

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(limits.header_timeout_s, self._headers_late)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _headers_late(self) -> None:
            self._deadline = None
            on_refused(HEADER_TIMEOUT)
            if self._request_started:
                self._close_with(timeout_answer)
            else:
                self.transport.close()

        def send_400_response(self, msg: str) -> None:
            self._close_with(malformed_answer)

        def _close_with(self, answer: bytes) -> None:
            if not self.transport.is_closing():
                self.transport.write(answer)
                self.transport.close()

    return LimitedProtocol

"""What every gRPC wire format shares: one status rule, one counting rule, the handler builders.

TF Serving's services (``tfserving/grpc_api.py``) and the Open Inference Protocol's
(``oip/grpc_api.py``) answer our errors with the status ``errors.py`` gives them (``grpc_code``)
and anything else with INTERNAL; their predict calls are counted in the metrics under the
protocol's label. Requests are parsed by ``rpc`` so bytes that do not parse are the client's
INVALID_ARGUMENT, not a logged traceback; large ones are parsed in a worker thread, and predict
calls hold their message's bytes from the decoding limit REST bodies take theirs from.

A failed call must let go of its request when it is answered. Two reference cycles kept each
refused request (its message, the arrays decoded from it) alive until a full garbage collection,
gigabytes after a few large ones: ``context.abort`` raises an exception that grpc keeps on the
call's state, whose traceback holds our frames, which hold the context, which holds the state;
and an error raised in a worker thread is kept by anyio's future, which its waiting frame holds,
which the error's traceback holds. So calls are answered with ``set_code``, never abort, and the
frames a caught error's traceback holds are cleared once it is answered.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from sharedserve import rpc
from sharedserve.errors import NotResident, PayloadTooLarge, SharedServeError, Unimplemented
from sharedserve.server.metrics.prometheus import RequestCounter
from sharedserve.server.wire.body_bytes import DecodingBytes

__all__ = ["OFF_LOOP_BYTES", "ElementCount", "guard", "predict", "unary", "unimplemented"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# Messages over this are parsed and decoded in a worker thread. A thread hop costs tens of
# microseconds, about what parsing and decoding 64 KiB of protobuf take, so below it the hop
# would cost a small call more than it saves the loop; above it the loop's share grows with the
# message (80 ms for 8 MiB of empty strings).
OFF_LOOP_BYTES = 64 * 1024


def _answer(context: grpc.aio.ServicerContext, code: str, message: str) -> None:
    # Not context.abort: see the module's docstring. grpc sends no response with a status set.
    context.set_code(grpc.StatusCode[code])
    context.set_details(message)


async def guard(
    context: grpc.aio.ServicerContext,
    method: str,
    call: Callable[[], Awaitable[_T]],
    counted: tuple[RequestCounter, str] | None = None,
) -> _T | None:
    """Run ``call``: our errors become their gRPC status, anything else INTERNAL (and None).

    ``counted`` (metrics, protocol label) records the call's status and latency: predict calls.
    """
    started, code = time.perf_counter(), "OK"
    try:
        return await call()
    except SharedServeError as e:
        code = e.grpc_code
        _answer(context, code, e.message)
        if isinstance(e, NotResident):
            # gRPC's own retry hint (the retry design's pushback), as REST's Retry-After.
            pushback = str(int(e.retry_after_s * 1000))
            context.set_trailing_metadata((("grpc-retry-pushback-ms", pushback),))
        _forget(e)
    except Exception as e:
        code = "INTERNAL"
        log.exception("unexpected error in gRPC %s", method)
        _answer(context, code, f"internal error: {type(e).__name__}: {e}")
        _forget(e)
    finally:
        if counted is not None:
            metrics, protocol = counted
            metrics.observe_request(protocol, code, time.perf_counter() - started)
    return None


def _forget(error: BaseException | None) -> None:
    """Clear the locals of the finished frames ``error``'s tracebacks hold (the request, the
    arrays made from it), in case a cycle keeps the error alive after it is answered."""
    while error is not None:
        traceback.clear_frames(error.__traceback__)
        error = error.__context__


def _refuse(counted: tuple[RequestCounter, str] | None) -> rpc.Refuse:
    """Answers a request refused before its method ran (it does not parse; no room in the
    limit), counted like any other call of the method."""

    async def refuse(context: grpc.aio.ServicerContext, error: SharedServeError) -> None:
        _answer(context, error.grpc_code, error.message)
        # Answered: its traceback would only hold the frame still handling the request bytes.
        error.__traceback__ = None
        if counted is not None:
            metrics, protocol = counted
            metrics.observe_request(protocol, error.grpc_code, 0.0)

    return refuse


def unary(
    method: str,
    behaviour: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
    request: Any,
    response: Any,
) -> grpc.RpcMethodHandler:
    """A unary handler that parses its own request (a large one in a worker thread)."""

    async def sized(message: Any, _size: int, context: grpc.aio.ServicerContext) -> Any:
        return await behaviour(message, context)

    return rpc.sized_unary(
        method, request, response, sized, _refuse(None), off_loop_bytes=OFF_LOOP_BYTES
    )


def predict(
    method: str,
    behaviour: Callable[[Any, int, grpc.aio.ServicerContext], Awaitable[Any]],
    request: Any,
    response: Any,
    *,
    counted: tuple[RequestCounter, str],
    decoding: DecodingBytes,
    parse_large: Callable[[bytes], Any] | None = None,
) -> grpc.RpcMethodHandler:
    """A predict method's handler: ``unary``'s, and the call, from before its request is parsed
    until it is answered, holds the message's size from ``decoding`` (RESOURCE_EXHAUSTED when
    no room comes, as REST's 503). ``behaviour`` gets the size too, to decode off the loop, and
    a message over OFF_LOOP_BYTES as ``parse_large`` makes it, if given (``rpc.sized_unary``)."""
    return rpc.sized_unary(
        method,
        request,
        response,
        behaviour,
        _refuse(counted),
        off_loop_bytes=OFF_LOOP_BYTES,
        hold=decoding.hold,
        parse_large=parse_large,
    )


class ElementCount:
    """A request's declared elements, counted tensor by tensor as a decoder meets them.

    ``validate.check_inputs`` judges the same total after decoding; gRPC decoders count first,
    before typed values (one Python object per string) are made from a message.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit, self.total = limit, 0

    def add(self, elements: int) -> None:
        """Count a tensor's elements; PayloadTooLarge once the request holds more than the limit."""
        self.total += elements
        if self.limit is not None and self.total > self.limit:
            raise PayloadTooLarge(
                f"the request's tensors hold at least {self.total} elements, over the limit of "
                f"{self.limit} (--max-request-elements)"
            )


def unimplemented(method: str, advice: str) -> grpc.RpcMethodHandler:
    """UNIMPLEMENTED for a method we do not offer; the request bytes are never looked at."""

    async def behaviour(_request: bytes, context: grpc.aio.ServicerContext) -> Any:
        async def call() -> Any:
            raise Unimplemented(f"{method} is not supported by sharedserve; {advice}")

        return await guard(context, method, call)

    # No (de)serializers: the raw request bytes are never parsed, and no answer is sent.
    return grpc.unary_unary_rpc_method_handler(behaviour)

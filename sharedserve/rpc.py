"""gRPC method handlers that parse their own requests, for every gRPC service we serve.

grpc's generated deserializers turn a request that does not parse into a logged traceback and
UNKNOWN. A message that does not parse is the client's error: the handlers built here take the
raw bytes, parse them, and refuse what does not parse with INVALID_ARGUMENT and one warning line.
The model server and the allocator both register their services through here; the model
server's handlers (``sized_unary``) also hold each request's bytes from a memory budget and
parse large ones in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError

from sharedserve.errors import InvalidInput, SharedServeError

__all__ = ["Hold", "Refuse", "abort", "sized_unary", "unary_stream", "unary_unary"]

log = logging.getLogger(__name__)

# Answers a refused call: aborts it with the error's status (and counts it, where that matters).
Refuse = Callable[[grpc.aio.ServicerContext, SharedServeError], Awaitable[Any]]
# Held from before a request of this many bytes is parsed until it is answered (a memory budget);
# raises a SharedServeError to refuse it.
Hold = Callable[[int], AbstractAsyncContextManager[object]]


async def abort(context: grpc.aio.ServicerContext, error: SharedServeError) -> NoReturn:
    """End the call with the error's gRPC status and message."""
    await context.abort(grpc.StatusCode[error.grpc_code], error.message)
    raise AssertionError("context.abort returned")  # it always raises


def _parse(
    method: str, request_type: Any, data: bytes, parse: Callable[[bytes], Any] | None = None
) -> Any:
    """The parsed request (by ``parse`` if given), or a SharedServeError saying why not."""
    try:
        return request_type.FromString(data) if parse is None else parse(data)
    except DecodeError as e:
        log.warning("gRPC %s: the request does not parse: %s", method, e)
        return InvalidInput(f"the request is not a valid {request_type.DESCRIPTOR.name}: {e}")
    except SharedServeError as e:
        log.warning("gRPC %s: the request is refused as it is read: %s", method, e.message)
        e.__traceback__ = None  # returned, not raised: it must not hold this frame
        return e


def unary_unary(
    method: str,
    request_type: Any,
    response_type: Any,
    behaviour: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
    refuse: Refuse,
) -> grpc.RpcMethodHandler:
    async def parse_then(data: bytes, context: grpc.aio.ServicerContext) -> Any:
        message = _parse(method, request_type, data)
        if isinstance(message, InvalidInput):
            return await refuse(context, message)
        return await behaviour(message, context)

    return grpc.unary_unary_rpc_method_handler(
        parse_then, response_serializer=response_type.SerializeToString
    )


def sized_unary(
    method: str,
    request_type: Any,
    response_type: Any,
    behaviour: Callable[[Any, int, grpc.aio.ServicerContext], Awaitable[Any]],
    refuse: Refuse,
    *,
    off_loop_bytes: int,
    hold: Hold | None = None,
    parse_large: Callable[[bytes], Any] | None = None,
) -> grpc.RpcMethodHandler:
    """``unary_unary`` for a server that bounds what requests hold: the behaviour also gets the
    message's size in bytes; one over ``off_loop_bytes`` is parsed in a worker thread, by
    ``parse_large`` if given (upb holds the GIL for a whole ``FromString``: a parse that must
    not stall the loop is cut into slices, see ``server.wire``; its SharedServeError refuses the
    call); the whole call holds ``hold(size)``, whose refusal answers the call."""

    async def parse_then(data: bytes, context: grpc.aio.ServicerContext) -> Any:
        size = len(data)
        async with AsyncExitStack() as held:
            if hold is not None:
                try:
                    await held.enter_async_context(hold(size))
                except SharedServeError as e:
                    return await refuse(context, e)
            if size > off_loop_bytes:
                message = await asyncio.to_thread(_parse, method, request_type, data, parse_large)
            else:
                message = _parse(method, request_type, data)
            if isinstance(message, SharedServeError):
                return await refuse(context, message)
            return await behaviour(message, size, context)

    return grpc.unary_unary_rpc_method_handler(
        parse_then, response_serializer=response_type.SerializeToString
    )


def unary_stream(
    method: str,
    request_type: Any,
    response_type: Any,
    behaviour: Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]],
    refuse: Refuse,
) -> grpc.RpcMethodHandler:
    async def parse_then(data: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        message = _parse(method, request_type, data)
        if isinstance(message, InvalidInput):
            await refuse(context, message)
            return
        async for response in behaviour(message, context):
            yield response

    return grpc.unary_stream_rpc_method_handler(
        parse_then, response_serializer=response_type.SerializeToString
    )

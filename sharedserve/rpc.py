"""gRPC method handlers that parse their own requests, for every gRPC service we serve.

grpc's generated deserializers turn a request that does not parse into a logged traceback and
UNKNOWN. A message that does not parse is the client's error: the handlers built here take the
raw bytes, parse them, and refuse what does not parse with INVALID_ARGUMENT and one warning line.
The model server and the allocator both register their services through here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError

from sharedserve.errors import InvalidInput, SharedServeError

__all__ = ["Refuse", "abort", "unary_stream", "unary_unary"]

log = logging.getLogger(__name__)

# Answers a refused call: aborts it with the error's status (and counts it, where that matters).
Refuse = Callable[[grpc.aio.ServicerContext, InvalidInput], Awaitable[Any]]


async def abort(context: grpc.aio.ServicerContext, error: SharedServeError) -> NoReturn:
    """End the call with the error's gRPC status and message."""
    await context.abort(grpc.StatusCode[error.grpc_code], error.message)
    raise AssertionError("context.abort returned")  # it always raises


def _parse(method: str, request_type: Any, data: bytes) -> Any:
    """The parsed request, or an InvalidInput saying why it is not one."""
    try:
        return request_type.FromString(data)
    except DecodeError as e:
        log.warning("gRPC %s: the request does not parse: %s", method, e)
        return InvalidInput(f"the request is not a valid {request_type.DESCRIPTOR.name}: {e}")


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

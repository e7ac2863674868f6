"""What every gRPC wire format shares: one status rule, one counting rule, one handler builder.

TF Serving's services (``tfserving/grpc_api.py``) and the Open Inference Protocol's
(``oip/grpc_api.py``) answer our errors with the status ``errors.py`` gives them (``grpc_code``)
and anything else with INTERNAL; their predict calls are counted in the metrics under the
protocol's label. Requests are parsed by ``rpc`` so bytes that do not parse are the client's
INVALID_ARGUMENT, not a logged traceback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from sharedserve import rpc
from sharedserve.errors import InvalidInput, SharedServeError, Unimplemented
from sharedserve.server.metrics import Metrics

__all__ = ["guard", "unary", "unimplemented"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


async def guard(
    context: grpc.aio.ServicerContext,
    method: str,
    call: Callable[[], Awaitable[_T]],
    counted: tuple[Metrics, str] | None = None,
) -> _T:
    """Run ``call``: our errors become their gRPC status, anything else INTERNAL.

    ``counted`` (metrics, protocol label) records the call's status and latency: predict calls.
    """
    started, code = time.perf_counter(), "OK"
    try:
        return await call()
    except SharedServeError as e:
        code = e.grpc_code
        await context.abort(grpc.StatusCode[e.grpc_code], e.message)
    except Exception as e:
        code = "INTERNAL"
        log.exception("unexpected error in gRPC %s", method)
        await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")
    finally:
        if counted is not None:
            metrics, protocol = counted
            metrics.observe_request(protocol, code, time.perf_counter() - started)
    raise AssertionError("unreachable: context.abort raises")


def unary(
    method: str,
    behaviour: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
    request: Any,
    response: Any,
    counted: tuple[Metrics, str] | None = None,
) -> grpc.RpcMethodHandler:
    """A unary handler that parses its own request; one that does not parse is refused (and
    counted like any other call of the method)."""

    async def refuse(context: grpc.aio.ServicerContext, error: InvalidInput) -> Any:
        async def raise_it() -> Any:
            raise error

        return await guard(context, method, raise_it, counted)

    return rpc.unary_unary(method, request, response, behaviour, refuse)


def unimplemented(method: str, advice: str) -> grpc.RpcMethodHandler:
    """UNIMPLEMENTED for a method we do not offer; the request bytes are never looked at."""

    async def behaviour(_request: bytes, context: grpc.aio.ServicerContext) -> Any:
        async def call() -> Any:
            raise Unimplemented(f"{method} is not supported by sharedserve; {advice}")

        return await guard(context, method, call)

    # No (de)serializers: the raw request bytes are never parsed, and no answer is sent.
    return grpc.unary_unary_rpc_method_handler(behaviour)

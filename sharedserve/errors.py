"""sharedserve's own error hierarchy.

Why a hierarchy of our own: TensorFlow, PyTorch, NVML and the OS each raise their own exception
types, and the transports (REST, gRPC) must answer every failure with a status a client can act
on. Library errors are wrapped at the boundary where they happen (``raise ResourceExhausted(...)
from e``), so the transports only ever see these classes, and this module is the one table that
says which HTTP status and which gRPC code each of them becomes.

The gRPC code is kept as the name of a ``grpc.StatusCode`` member so this module stays free of
the grpc import (pure modules may import it).
"""

from __future__ import annotations

__all__ = [
    "ArrivingBytesExhausted",
    "ConfigError",
    "GpuError",
    "InsufficientMemory",
    "InvalidInput",
    "LoadFailed",
    "ModelLoadError",
    "NotFound",
    "NotReady",
    "NotResident",
    "NvmlUnavailable",
    "PayloadTooLarge",
    "PermissionDenied",
    "RequestTimeout",
    "ResourceExhausted",
    "SharedServeError",
    "Unauthenticated",
    "Unimplemented",
    "quoted",
]


_QUOTED_CHARACTERS = 80


def quoted(text: object) -> str:
    """A client's text as an error message shows it: ``repr`` of it, cut to a few dozen
    characters with its length said. An echo of 50,000 characters would grow a gRPC status past
    the metadata limit (RESOURCE_EXHAUSTED instead of the real answer) and flood the logs."""
    shown = repr(text)
    if len(shown) <= _QUOTED_CHARACTERS:
        return shown
    length = len(text) if isinstance(text, (str, bytes, list, tuple)) else len(shown)
    return f"{shown[:_QUOTED_CHARACTERS]}... ({length} long)"


class SharedServeError(Exception):
    """Base of every error sharedserve raises on purpose.

    ``http_status`` and ``grpc_code`` are what a transport answers with; subclasses override them.
    """

    http_status: int = 500
    grpc_code: str = "INTERNAL"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(SharedServeError):
    """Settings or environment that cannot work (bad flag value, missing model directory)."""


class InvalidInput(SharedServeError):
    """A request that can never succeed as sent: malformed JSON, wrong shape or dtype."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class NotFound(SharedServeError):
    """Unknown model name, version or signature."""

    http_status = 404
    grpc_code = "NOT_FOUND"


class Unauthenticated(SharedServeError):
    """A management call without the server's management key (``--admin-key-file``)."""

    http_status = 401
    grpc_code = "UNAUTHENTICATED"


class PermissionDenied(SharedServeError):
    """A load that would read a model from outside the directories the operator allows (the
    model repository, ``--allowed-model-roots``): refused whoever asks, nothing changed."""

    http_status = 403
    grpc_code = "PERMISSION_DENIED"


class PayloadTooLarge(SharedServeError):
    """Request body over the configured limit (``--max-body-bytes``)."""

    http_status = 413
    grpc_code = "RESOURCE_EXHAUSTED"


class RequestTimeout(SharedServeError):
    """The client stopped sending its request's body (``--body-timeout``)."""

    http_status = 408
    grpc_code = "DEADLINE_EXCEEDED"


class NotReady(SharedServeError):
    """The model is loading, warming up, unloading or failed to load."""

    http_status = 503
    grpc_code = "UNAVAILABLE"


class ResourceExhausted(SharedServeError):
    """The framework ran out of memory under the cap, or a queue is full. Retry later."""

    http_status = 503
    grpc_code = "RESOURCE_EXHAUSTED"


class InsufficientMemory(ResourceExhausted):
    """A model version does not fit the process's memory (its cap minus what the others hold,
    or its own budget): a load refused, with the figures. HTTP 507 (Insufficient Storage, RFC
    4918: the server cannot store what the request needs), which a client can tell apart from
    a busy server's 503; gRPC RESOURCE_EXHAUSTED."""

    http_status = 507


class NotResident(NotReady):
    """A request's model was not paged in within ``--page-in-timeout``: every other model in
    memory was busy or pinned. Retry after ``retry_after_s`` (HTTP ``Retry-After``)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ArrivingBytesExhausted(ResourceExhausted):
    """Bodies still arriving hold ``--max-arriving-bytes``: refused mid-body, so the rest of the
    body is unread and the connection must close."""


class Unimplemented(SharedServeError):
    """An API the server knows of but does not offer (e.g. ``:classify``)."""

    http_status = 501
    grpc_code = "UNIMPLEMENTED"


class ModelLoadError(SharedServeError):
    """The model directory exists but the framework could not load or warm it up."""


class LoadFailed(SharedServeError):
    """A load asked for while serving (the model repository API, a model config reload) could
    not load the model: its files, not the server, are at fault (Triton answers 400 too)."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class GpuError(SharedServeError):
    """A GPU query failed."""


class NvmlUnavailable(GpuError):
    """NVML (the NVIDIA driver's management library) is missing or failed to initialise."""

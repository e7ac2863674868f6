"""The settings of one model server process (``sharedserve serve``): its listeners, connection
limits, stop on SIGTERM, and the models it serves. Frozen dataclasses, each field documented with
its unit; ``validate`` names the flag of the first setting that cannot work. The settings other
commands share (batching, GPU caps, bench, pack) are ``sharedserve/config.py``'s."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sharedserve.config import (
    DEFAULT_MAX_BODY_BYTES,
    BatchingSettings,
    GpuSettings,
)
from sharedserve.enums import Paging
from sharedserve.errors import ConfigError

__all__ = [
    "ADMIN_HEADER",
    "ADMIN_KEY_VARIABLE",
    "ARRIVING_BODIES_PER_LIMIT",
    "DEFAULT_GRPC_MESSAGE_BYTES",
    "MIN_ADMIN_KEY_CHARS",
    "AdminSettings",
    "ConnectionSettings",
    "GrpcSettings",
    "RestSettings",
    "ServerSettings",
    "ShutdownSettings",
    "TlsSettings",
]

#: Largest gRPC message by default. grpcio copies a message whole on the server's event loop
#: before any handler sees it, and REST requests, health probes included, wait meanwhile; at
#: this size the longest wait was 76-82 ms in two runs on 2 cores
#: (benchmarks/results/abuse_after.md, row j).
DEFAULT_GRPC_MESSAGE_BYTES = 32 * 1024 * 1024
#: Largest bodies that may be arriving at once by default (``RestSettings.arriving_limit``).
ARRIVING_BODIES_PER_LIMIT = 4


@dataclass(frozen=True)
class RestSettings:
    host: str = "0.0.0.0"
    """Address to bind; 0.0.0.0 as TF Serving does, so a container's port is reachable."""
    port: int = 8501
    """TCP port for the REST API (TF Serving's default 8501); 0 picks a free one."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest request body accepted, in bytes; larger ones get 413."""
    max_decoding_bytes: int | None = None
    """Request-body bytes decoded from JSON at once, at most (decoding costs ~18x a body's size
    in memory); a body waits briefly for room, then gets 503. None: ``max_body_bytes``, one
    largest body at a time."""
    max_arriving_bytes: int | None = None
    """Bytes held at once by request bodies still arriving, over all connections, at most; a
    body's memory grows with what arrived, and one that would take the total past this gets 503
    at once (slow clients declaring large bodies cannot fill memory). None:
    ``ARRIVING_BODIES_PER_LIMIT`` x ``max_body_bytes``."""

    @property
    def decoding_limit(self) -> int:
        return self.max_body_bytes if self.max_decoding_bytes is None else self.max_decoding_bytes

    @property
    def arriving_limit(self) -> int:
        if self.max_arriving_bytes is not None:
            return self.max_arriving_bytes
        return ARRIVING_BODIES_PER_LIMIT * self.max_body_bytes

    def validate(self) -> None:
        """Raise ConfigError naming the first setting that cannot work."""
        _check_port("--rest-port", self.port)
        _check_positive("--max-body-bytes", self.max_body_bytes)
        _check_positive("--max-decoding-bytes", self.max_decoding_bytes)
        _check_positive("--max-arriving-bytes", self.max_arriving_bytes)


@dataclass(frozen=True)
class GrpcSettings:
    port: int = 8500
    """TCP port for the gRPC API (TF Serving's default 8500); 0 picks a free one."""
    max_message_bytes: int = DEFAULT_GRPC_MESSAGE_BYTES
    """Largest gRPC message accepted or sent, in bytes; larger gets RESOURCE_EXHAUSTED. Apart
    from REST's ``max_body_bytes``: a REST body arrives a chunk at a time, a gRPC message is
    copied whole on the event loop (``DEFAULT_GRPC_MESSAGE_BYTES``)."""

    def validate(self) -> None:
        """Raise ConfigError naming the first setting that cannot work."""
        _check_port("--grpc-port", self.port)
        _check_positive("--grpc-max-message-bytes", self.max_message_bytes)
        if self.max_message_bytes > _GRPC_CEILING:
            raise ConfigError(
                f"--grpc-max-message-bytes must be at most {_GRPC_CEILING} (gRPC's own limit), "
                f"got {self.max_message_bytes}"
            )


# gRPC's message lengths are 32-bit signed integers.
_GRPC_CEILING = (1 << 31) - 1


def _check_port(flag: str, port: int) -> None:
    if not 0 <= port <= 65535:
        raise ConfigError(f"{flag} must be in 0..65535, got {port}")


def _check_positive(flag: str, limit: int | None) -> None:
    if limit is not None and limit <= 0:
        raise ConfigError(f"{flag} must be positive, got {limit}")


@dataclass(frozen=True)
class ConnectionSettings:
    """Deadlines and a cap for client connections, on both listeners: without them a client can
    hold connections open for ever by sending nothing, or a byte at a time (slowloris)."""

    keep_alive_timeout_s: float = 75.0
    """How long a connection may sit idle between two requests. nginx's default: longer than
    the 60 s idle timeout of the proxies usually in front (ingress-nginx, cloud load balancers),
    so it is the proxy that closes an idle connection, never racing a request into one the
    server has just closed."""
    header_timeout_s: float = 10.0
    """How long a request's line and headers may take to arrive (from the connection opening,
    or from the request's first byte); then 408, or a silent close if nothing came."""
    body_timeout_s: float = 30.0
    """Longest pause between two reads of a request body (nginx's client_body_timeout); then
    408. A slow client is fine as long as it keeps sending."""
    max_connections: int = 1024
    """Open connections per listener (REST and gRPC each) at most; past it a REST request gets
    503 and its connection closes, a gRPC connection is closed at once."""
    max_header_bytes: int = 64 * 1024
    """Bytes of a REST request's line and headers, at most; past it 431 and the connection
    closes (a deadline alone lets a fast client send gigabytes of headers in time)."""

    def validate(self) -> None:
        """Raise ConfigError naming the first setting that cannot work."""
        for flag, value in (
            ("--keep-alive-timeout", self.keep_alive_timeout_s),
            ("--header-timeout", self.header_timeout_s),
            ("--body-timeout", self.body_timeout_s),
            ("--max-connections", self.max_connections),
            ("--max-header-bytes", self.max_header_bytes),
        ):
            if not value > 0:
                raise ConfigError(f"{flag} must be positive, got {value:g}")


#: The header (REST) and metadata key (gRPC) that carries the management key by default.
ADMIN_HEADER = "sharedserve-admin-key"
#: The environment variable that may hold the management key instead of ``--admin-key-file``.
ADMIN_KEY_VARIABLE = "SHAREDSERVE_ADMIN_KEY"
#: Shortest management key accepted: 128 bits as hex.
MIN_ADMIN_KEY_CHARS = 32
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")


@dataclass(frozen=True)
class AdminSettings:
    """Who may change what the server serves. With a ``key``, the management APIs (the model
    repository API, TF Serving's ``HandleReloadConfigRequest``, changes under
    ``/sharedserve/v1/``) answer only requests that carry it in ``header``; inference,
    health, status, metadata and metrics stay open. Without one, they are open to every
    client of the ports, as in TF Serving and Triton."""

    key: str | None = field(default=None, repr=False)
    """The management key, read from ``--admin-key-file`` or the environment, never from the
    command line (where ``ps`` shows it); None: management open."""
    header: str = ADMIN_HEADER
    """The REST header and gRPC metadata key that carries it (lower case: gRPC's rule)."""

    def validate(self) -> None:
        """Raise ConfigError naming the first setting that cannot work."""
        if not self.header or not set(self.header) <= _TOKEN_CHARS:
            raise ConfigError(
                f"--admin-header must be lower-case letters, digits, '-', '_' or '.' (a gRPC "
                f"metadata key), got {self.header!r}"
            )
        if self.header.endswith("-bin") or self.header.startswith("grpc-"):
            raise ConfigError(
                f"--admin-header {self.header!r}: gRPC reserves 'grpc-' keys and treats '-bin' "
                "keys as binary"
            )
        if self.key is None:
            return
        if len(self.key) < MIN_ADMIN_KEY_CHARS or not self.key.isascii():
            raise ConfigError(
                f"the management key must be at least {MIN_ADMIN_KEY_CHARS} ASCII characters "
                f"(got {len(self.key)}); make one with `openssl rand -hex 32`"
            )
        if not self.key.isprintable() or any(c.isspace() for c in self.key):
            raise ConfigError(
                "the management key must be printable, without spaces (a header value); "
                "make one with `openssl rand -hex 32`"
            )


@dataclass(frozen=True)
class ShutdownSettings:
    """How a server stops on SIGTERM so that a rolling update loses no request: readiness
    turns not-ready at once, requests are still served for ``drain_delay_s`` (while the
    endpoints are removed), then both listeners stop accepting, in-flight requests finish, and
    whatever is left at ``grace_s`` is cut."""

    drain_delay_s: float = 0.0
    """Seconds between SIGTERM and closing the listeners, serving as usual but answering
    not-ready. 0 where the pod's ``preStop`` hook already waits (the Deployments here do)."""
    grace_s: float = 20.0
    """Seconds from SIGTERM to exit, at most (drain delay included); what is still running
    then is cut. Below Kubernetes' default terminationGracePeriodSeconds of 30."""

    def validate(self) -> None:
        """Raise ConfigError naming the first setting that cannot work."""
        if not self.drain_delay_s >= 0:
            raise ConfigError(f"--drain-delay must be >= 0, got {self.drain_delay_s:g}")
        if not self.grace_s > self.drain_delay_s:
            raise ConfigError(
                f"--shutdown-grace ({self.grace_s:g} s) must be longer than --drain-delay "
                f"({self.drain_delay_s:g} s)"
            )


@dataclass(frozen=True)
class TlsSettings:
    """TLS on both listeners, with one certificate (TF Serving's ``--ssl_config_file``, Triton's
    ``--grpc-use-ssl``): REST becomes https, gRPC a secure port; TLS 1.2 at least. The files are
    read, and the key checked against the certificate, when the server starts (``process/tls.py``),
    so a bad one stops it with the flag's name before anything listens for long."""

    cert_file: Path | None = None
    """The server's certificate chain, PEM: its certificate first, then any intermediates. None:
    no TLS, both listeners in plain text."""
    key_file: Path | None = None
    """The private key of ``cert_file``'s certificate, PEM, unencrypted."""
    ca_file: Path | None = None
    """CA certificates, PEM, that turn on mutual TLS: a client must present a certificate signed
    by one of them, or its connection is refused (REST and gRPC alike). None: any client."""

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None

    def validate(self) -> None:
        """Raise ConfigError naming the first flag that cannot work (the files themselves are
        read at start)."""
        if (self.cert_file is None) != (self.key_file is None):
            given, missing = (
                ("--tls-cert-file", "--tls-key-file")
                if self.key_file is None
                else ("--tls-key-file", "--tls-cert-file")
            )
            raise ConfigError(
                f"{given} needs {missing}: TLS takes the certificate and its private key together"
            )
        if self.ca_file is not None and self.cert_file is None:
            raise ConfigError(
                "--tls-ca-file (mutual TLS: clients' certificates are checked against it) needs "
                "the server's own --tls-cert-file and --tls-key-file"
            )


@dataclass(frozen=True)
class ServerSettings:
    model_dir: Path | None = None
    """A model base path (``DIR/NAME`` with version subdirectories) or a bare SavedModel dir;
    or, instead, ``model_config_file`` or ``model_repository`` for many models."""
    model_name: str | None = None
    """Name in URLs; defaults to the base path's directory name (``model_dir`` only)."""
    model_config_file: Path | None = None
    """TF Serving's model config file (``ModelServerConfig`` text format): many models."""
    model_repository: Path | None = None
    """A directory of models, one per subdirectory, each named after it: many models."""
    model_config_poll_s: float = 0
    """Seconds between re-reads of ``model_config_file`` (TF Serving's
    ``--model_config_file_poll_wait_seconds``); 0: read once, at start."""
    allowed_model_roots: tuple[Path, ...] = ()
    """Directories models may be loaded from besides ``model_repository``; with
    ``model_config_file``, instead of each base path the file names at start
    (``repository/roots.py``). Loads and reloads leading elsewhere are refused."""
    exit_on_error: bool = False
    """Many models: one named at start that cannot be read or loaded stops the server (exit 2
    before anything starts, or 1 once the loads settle), as Triton's ``--exit-on-error``; off,
    it is reported and the others serve. ``--model``'s one model always stops it."""
    strict_readiness: bool = False
    """Many models: the server is ready only while every model it routes serves (one that failed
    to load, or is loading, makes it not ready), as Triton's ``--strict-readiness``; off, it is
    ready once the loads at start settle, whatever failed (``registry.py``)."""
    admin: AdminSettings = field(default_factory=AdminSettings)
    rest: RestSettings = field(default_factory=RestSettings)
    grpc: GrpcSettings = field(default_factory=GrpcSettings)
    connections: ConnectionSettings = field(default_factory=ConnectionSettings)
    shutdown: ShutdownSettings = field(default_factory=ShutdownSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)
    """TLS on both listeners; off by default."""
    batching: BatchingSettings | None = None
    """None: batching off (TF Serving's default); each request is one model call."""
    gpu: GpuSettings = field(default_factory=GpuSettings)
    cpu_limit_cores: float | None = None
    """CPU limit in cores (0.5 = half a core); None reads it from the process's cgroup."""
    max_request_elements: int | None = None
    """Most elements a request's tensors may hold together, counted from their declared shapes
    before anything is allocated (one value may fill any shape over gRPC, so a tiny message can
    declare a huge tensor); more gets 413 / RESOURCE_EXHAUSTED. None: ``request_element_limit``."""
    max_inflight_per_model: int = 1024
    """Requests of one model queued or running at most, where its model file sets no
    ``max_inflight``; more get 503 / RESOURCE_EXHAUSTED at once. Generous on purpose: it bounds
    a model's backlog (memory, and latency no client waits for), it does not shape traffic."""
    paging: Paging = Paging.OFF
    """Whether idle models move out of memory to make room for a model's request
    (``paging.py``); LRU needs a memory cap (``gpu``'s)."""
    page_in_timeout_s: float = 30.0
    """Longest a request waits for its paged-out model to be paged in; then 503 with
    Retry-After."""

    @property
    def request_element_limit(self) -> int:
        """The limit in force; by default what a full honest body can carry: JSON spends at least
        two bytes an element ("1,"), so ``--max-body-bytes`` / 2."""
        if self.max_request_elements is not None:
            return self.max_request_elements
        return max(1, self.rest.max_body_bytes // 2)

    def validate(self) -> None:
        """Raise ConfigError naming the first setting that cannot work (the CPU limit and the
        GPU cap are checked where they are resolved against the host)."""
        given = [
            flag
            for flag, value in (
                ("--model", self.model_dir),
                ("--model-config-file", self.model_config_file),
                ("--model-repository", self.model_repository),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise ConfigError(
                "give one of --model (one model), --model-config-file (TF Serving's model "
                "config) or --model-repository (a directory of models)"
                + (f"; got {' and '.join(given)}" if given else "")
            )
        if self.model_name is not None and self.model_dir is None:
            raise ConfigError(
                "--name names --model's model; a model config or repository names its own"
            )
        if not self.model_config_poll_s >= 0:
            raise ConfigError(
                "--model-config-file-poll-wait-seconds must be 0 (off) or more, "
                f"got {self.model_config_poll_s}"
            )
        if self.model_config_poll_s and self.model_config_file is None:
            raise ConfigError("--model-config-file-poll-wait-seconds needs --model-config-file")
        if self.allowed_model_roots and self.model_dir is not None:
            raise ConfigError(
                "--allowed-model-roots bounds what --model-config-file or --model-repository "
                "may load; --model serves one model and loads nothing else"
            )
        self.admin.validate()
        self.rest.validate()
        self.grpc.validate()
        if self.batching is not None:
            self.batching.validate()
        _check_positive("--max-request-elements", self.max_request_elements)
        _check_positive("--max-inflight-per-model", self.max_inflight_per_model)
        if not self.page_in_timeout_s > 0:
            raise ConfigError(f"--page-in-timeout must be positive, got {self.page_in_timeout_s}")
        if self.paging is Paging.LRU and self.model_dir is not None:
            raise ConfigError(
                "--paging lru moves models of a multi-model server: give --model-config-file "
                "or --model-repository (--model serves one model, which stays in memory)"
            )
        self.connections.validate()
        self.shutdown.validate()
        self.tls.validate()

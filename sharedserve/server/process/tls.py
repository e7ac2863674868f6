"""TLS on both listeners from one certificate (``--tls-cert-file``, ``--tls-key-file``, and
``--tls-ca-file`` for mutual TLS): the REST listener's ``ssl.SSLContext`` and the gRPC server's
credentials, built once at start so that a file that cannot be read, or a key that is not the
certificate's, stops the server with the flag's name rather than a traceback at the first client.

REST: asyncio's own TLS layer (what ``create_server(ssl=...)`` puts in front of a protocol),
made by the protocol factory so that two things it leaves open are bounded. Its handshake
deadline defaults to 60 s, and uvicorn's protocol only sees a connection once the handshake is
done, so the header deadline and the connection cap (``connections.py``) did not cover it: a
client that connects and sends nothing, or half a ClientHello, held a connection for a minute,
uncounted. Here the handshake (and the closing one) must finish within ``--header-timeout``,
and a connection counts against ``--max-connections`` from its accept. gRPC core's handshake
deadline (``grpc.server_handshake_timeout_ms``, set from ``--header-timeout``) covers its TLS
handshake already.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
from asyncio import sslproto
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import grpc
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from sharedserve.errors import ConfigError
from sharedserve.server.settings import TlsSettings

__all__ = ["TLS_HANDSHAKE", "ServerTls", "server_tls", "tls_protocol", "tls_words"]

TLS_HANDSHAKE = "tls_handshake"
"""The reason a connection whose TLS handshake failed or timed out is counted under."""

_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
_PRIVATE_KEY = b"PRIVATE KEY-----"  # PKCS#8's, and the RSA and EC keys' older headers


@dataclass(frozen=True)
class ServerTls:
    """What both listeners serve TLS with."""

    context: ssl.SSLContext
    """REST's: TLS 1.2 at least; with a CA, client certificates required."""
    grpc_credentials: grpc.ServerCredentials
    """gRPC's: the same certificate, key and CA (gRPC core negotiates TLS 1.2 at least)."""
    mutual: bool
    """Clients must present a certificate signed by ``--tls-ca-file``."""


def server_tls(settings: TlsSettings) -> ServerTls | None:
    """The files read and checked, once; None when TLS is off. ConfigError names the flag."""
    if settings.cert_file is None or settings.key_file is None:
        return None
    cert = _read("--tls-cert-file", settings.cert_file, _CERTIFICATE, "PEM certificate")
    key = _read("--tls-key-file", settings.key_file, _PRIVATE_KEY, "PEM private key")
    ca = None
    if settings.ca_file is not None:
        ca = _read("--tls-ca-file", settings.ca_file, _CERTIFICATE, "PEM CA certificate")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])  # what the REST listener speaks

    def encrypted() -> NoReturn:  # else OpenSSL would prompt for a passphrase on the terminal
        raise ConfigError(
            f"--tls-key-file {settings.key_file} is encrypted: give the key unencrypted "
            "(e.g. openssl pkey -in KEY -out PLAIN), readable by the server alone"
        )

    try:
        context.load_cert_chain(settings.cert_file, settings.key_file, password=encrypted)
    except ssl.SSLError as e:
        if e.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(
                f"--tls-key-file {settings.key_file} is not the private key of "
                f"--tls-cert-file {settings.cert_file}'s certificate"
            ) from e
        raise ConfigError(
            f"--tls-cert-file {settings.cert_file} or --tls-key-file {settings.key_file} "
            f"cannot be used: {e.reason or e}"
        ) from e
    if settings.ca_file is not None:
        try:
            context.load_verify_locations(cafile=settings.ca_file)
        except ssl.SSLError as e:
            raise ConfigError(f"--tls-ca-file {settings.ca_file}: {e.reason or e}") from e
        context.verify_mode = ssl.CERT_REQUIRED
    credentials = grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )
    return ServerTls(context, credentials, mutual=ca is not None)


def tls_words(tls: ServerTls | None) -> str:
    """What the start-up line says after the gRPC address."""
    if tls is None:
        return ""
    if tls.mutual:
        return " with TLS; both require client certificates signed by --tls-ca-file (mutual TLS)"
    return " with TLS"


def _read(flag: str, path: Path, marker: bytes, holds: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read {flag} {path}: {e.strerror}") from e
    if marker not in data:
        raise ConfigError(f"{flag} {path} holds no {holds}")
    return data


class _Handshake(sslproto.SSLProtocol):
    """asyncio's TLS layer as ``create_server(ssl=...)`` makes it, listed in ``handshaking``
    from the connection's accept until its app protocol takes over or it is lost; lost first,
    its handshake failed (timed out, plain text, a certificate refused) and it is counted."""

    def __init__(
        self,
        app: HttpToolsProtocol,
        context: ssl.SSLContext,
        timeout_s: float,
        handshaking: set[_Handshake],
        on_failed: Callable[[], None],
    ) -> None:
        deadlines: dict[str, Any] = {"ssl_handshake_timeout": timeout_s}
        if sys.version_info >= (3, 11):  # a peer that never answers our close_notify
            deadlines["ssl_shutdown_timeout"] = timeout_s
        # No waiter: asyncio's own server awaits one only to log the handshake's failure, which
        # is the client's (a bad certificate, plain http, a timeout), not the server's.
        waiter: Any = None
        super().__init__(app.loop, app, context, waiter, server_side=True, **deadlines)
        self._handshaking, self._on_failed = handshaking, on_failed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._handshaking.add(self)
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self in self._handshaking:
            self._handshaking.discard(self)
            self._on_failed()
        super().connection_lost(exc)


def tls_protocol(
    protocol: type[HttpToolsProtocol],
    context: ssl.SSLContext,
    timeout_s: float,
    on_refused: Callable[[str], None],
) -> Callable[..., asyncio.BaseProtocol]:
    """uvicorn's ``http`` protocol for a TLS listener: ``protocol`` (``connections.py``'s) behind
    asyncio's TLS layer, the handshake bounded by ``timeout_s`` and counted in ``protocol``'s
    connection cap while it runs; a failed one is counted by ``on_refused(TLS_HANDSHAKE)``."""
    handshaking: set[_Handshake] = set()

    def failed() -> None:
        on_refused(TLS_HANDSHAKE)

    class OverTls(protocol):  # type: ignore[valid-type, misc]
        layer: _Handshake

        def connection_made(self, transport: asyncio.Transport) -> None:
            handshaking.discard(self.layer)  # counted among the connections from here on
            super().connection_made(transport)

    OverTls.handshaking = handshaking

    def create(**kwargs: Any) -> _Handshake:
        app = OverTls(**kwargs)
        app.layer = _Handshake(app, context, timeout_s, handshaking, failed)
        return app.layer

    return create

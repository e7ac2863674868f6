"""``serve``'s TLS flags, kept beside its module: one certificate for both listeners."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["TlsCaFile", "TlsCertFile", "TlsKeyFile"]

TlsCertFile = Annotated[
    Path | None,
    typer.Option(
        help="Serve TLS with this certificate (PEM; intermediates after it), on both listeners: "
        "REST becomes https and gRPC a secure port, TLS 1.2 at least (as TF Serving's "
        "--ssl_config_file, Triton's --grpc-use-ssl, but one certificate for both). Needs "
        "--tls-key-file.",
        show_default="none: plain text",
    ),
]
TlsKeyFile = Annotated[
    Path | None,
    typer.Option(
        help="The private key of --tls-cert-file's certificate (PEM, unencrypted).",
        show_default="none",
    ),
]
TlsCaFile = Annotated[
    Path | None,
    typer.Option(
        help="Mutual TLS: CA certificates (PEM) that clients' certificates must be signed by; "
        "a client without one is refused, on REST and gRPC alike. Needs --tls-cert-file.",
        show_default="none: any client",
    ),
]

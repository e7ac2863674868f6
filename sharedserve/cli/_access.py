"""``serve``'s flags on who may reach it and change what it serves, kept beside its module:
TLS (one certificate for both listeners), the management key, the model roots."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from sharedserve.errors import ConfigError
from sharedserve.server import ADMIN_KEY_VARIABLE

__all__ = [
    "PANEL_ACCESS",
    "PANEL_LISTENERS",
    "AdminHeader",
    "AdminKeyFile",
    "AllowedModelRoots",
    "TlsCaFile",
    "TlsCertFile",
    "TlsKeyFile",
    "admin_key",
]

# serve --help's panels for these (cli/_help.py).
PANEL_LISTENERS = "Listeners and TLS"
PANEL_ACCESS = "Management access"

TlsCertFile = Annotated[
    Path | None,
    typer.Option(
        help="Serve TLS with this certificate (PEM; intermediates after it), on both listeners: "
        "REST becomes https and gRPC a secure port, TLS 1.2 at least (as TF Serving's "
        "--ssl_config_file, Triton's --grpc-use-ssl, but one certificate for both). Needs "
        "--tls-key-file.",
        show_default="none: plain text",
        rich_help_panel=PANEL_LISTENERS,
    ),
]
TlsKeyFile = Annotated[
    Path | None,
    typer.Option(
        help="The private key of --tls-cert-file's certificate (PEM, unencrypted).",
        show_default="none",
        rich_help_panel=PANEL_LISTENERS,
    ),
]
TlsCaFile = Annotated[
    Path | None,
    typer.Option(
        help="Mutual TLS: CA certificates (PEM) that clients' certificates must be signed by; "
        "a client without one is refused, on REST and gRPC alike. Needs --tls-cert-file.",
        show_default="none: any client",
        rich_help_panel=PANEL_LISTENERS,
    ),
]

AllowedModelRoots = Annotated[
    list[Path] | None,
    typer.Option(
        help="A directory models may be loaded from (repeat for several): besides "
        "--model-repository's; with --model-config-file, instead of the directories of the "
        "models the file names at start. Loads and HandleReloadConfigRequest base paths that "
        "lead elsewhere, symlinks included, are refused (403 / PERMISSION_DENIED).",
        show_default="the repository; the model config file's base paths",
        rich_help_panel=PANEL_ACCESS,
    ),
]
AdminKeyFile = Annotated[
    Path | None,
    typer.Option(
        help="A file holding the management key: the model repository API (/v2/repository/...), "
        "TF Serving's HandleReloadConfigRequest and changes under /sharedserve/v1/ then need it "
        "in the --admin-header header (REST) or metadata (gRPC), else 401 / UNAUTHENTICATED; "
        f"inference, health, status, metadata and metrics stay open. Or set {ADMIN_KEY_VARIABLE}. "
        "Make one with `openssl rand -hex 32`.",
        show_default="management open to every client, as in TF Serving and Triton",
        rich_help_panel=PANEL_ACCESS,
    ),
]
AdminHeader = Annotated[
    str,
    typer.Option(
        help="The REST header and gRPC metadata key carrying the management key.",
        rich_help_panel=PANEL_ACCESS,
    ),
]


def admin_key(path: Path | None) -> str | None:
    """The management key: ``--admin-key-file``'s (its surrounding whitespace dropped: files
    end in a newline), else the environment's, never both."""
    from_env = os.environ.get(ADMIN_KEY_VARIABLE)
    if path is None:
        return from_env or None
    if from_env is not None:
        raise ConfigError(f"give --admin-key-file or {ADMIN_KEY_VARIABLE}, not both")
    try:
        key = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"--admin-key-file: cannot read {path}: {getattr(e, 'strerror', None) or e}"
        ) from e
    if not key:
        raise ConfigError(f"--admin-key-file: {path} is empty")
    return key

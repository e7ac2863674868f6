"""Small network helpers: finding ports and asking a server for its model's state."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

__all__ = ["client_tls", "free_port", "get_json", "model_state", "model_status", "port_is_free"]


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel considers free on ``host`` right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    """True when a listener could bind ``host:port`` now (SO_REUSEADDR, as uvicorn and gRPC do)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def client_tls(
    ca_file: str | None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
    """A client's TLS context: the server verified by ``ca_file`` (None: the system's trust
    store), and the client certificate presented when one is given (mutual TLS). In a process
    gevent has patched, the context is gevent's."""
    context = ssl.create_default_context(cafile=ca_file)
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    return context


def get_json(
    rest_url: str, path: str, timeout: float = 1.0, tls: ssl.SSLContext | None = None
) -> Any:
    """The JSON body of a 200 answer to ``GET path``; None when the server does not answer
    (not listening yet, or gone), answers another status, or not in JSON. ``tls``: how an
    https server is verified (None: the system's trust store)."""
    url = urlsplit(rest_url)
    host = url.hostname or "127.0.0.1"
    connection: http.client.HTTPConnection
    if url.scheme == "https":
        connection = http.client.HTTPSConnection(host, url.port, timeout=timeout, context=tls)
    else:
        connection = http.client.HTTPConnection(host, url.port, timeout=timeout)
    try:
        connection.request("GET", url.path.rstrip("/") + path)
        response = connection.getresponse()
        body = response.read()
        return json.loads(body) if response.status == 200 else None
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        connection.close()


def model_state(rest_url: str, model: str, timeout: float = 1.0) -> str | None:
    """The TF Serving state (``AVAILABLE``, ``LOADING``...) the server reports for ``model``;
    None when it does not answer, or answers something that is not a model status."""
    return model_status(rest_url, model, timeout)[0]


def model_status(rest_url: str, model: str, timeout: float = 1.0) -> tuple[str | None, str]:
    """``model``'s TF Serving state as ``model_state`` reads it, and the error its status
    carries ('' without one: a version that failed to load is ``END`` with its error)."""
    body = get_json(rest_url, f"/v1/models/{model}", timeout)
    try:
        version = body["model_version_status"][0]
        state = version["state"]
    except (KeyError, IndexError, TypeError):
        return None, ""
    error = version.get("status", {}).get("error_message", "") if isinstance(version, dict) else ""
    return (state if isinstance(state, str) else None), (error if isinstance(error, str) else "")

"""Scenario h of ``run.py``: TLS handshakes that stall. A ``sharedserve serve`` of ``tiny``
with TLS (a self-signed certificate for 127.0.0.1, made with ``openssl``) and a 5 s
``--header-timeout``; connections to both listeners that send nothing, or half a ClientHello,
and then wait; beside them, an https client predicting in a loop. How long the server lets a
stalled connection live, and whether the honest client was served meanwhile."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from management import rest_call  # beside this script

from sharedserve.pack.probe import free_port

HEADER_TIMEOUT_S = 5.0
ROW = b'{"instances": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]}'
# A TLS record header announcing a 512-byte handshake message, and its first bytes only.
HALF_HELLO = bytes.fromhex("1603010200") + bytes.fromhex("010001fc0303") + bytes(32)

Row = tuple[str, str, str, bool | None, str]


def certificate(work: Path) -> tuple[Path, Path]:
    cert, key = work / "cert.pem", work / "key.pem"
    command = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt"]
    command += ["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    command += ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)]
    subprocess.run(command, check=True, capture_output=True)
    return cert, key


def predict(port: int, context: ssl.SSLContext) -> str:
    return rest_call(port, "POST", "/v1/models/tiny:predict", None, ROW, tls=context)


@contextlib.contextmanager
def tls_server(model: Path, work: Path) -> Iterator[tuple[int, int, ssl.SSLContext]]:
    cert, key = certificate(work)
    context = ssl.create_default_context(cafile=str(cert))
    rest, grpc_port = free_port(), free_port()
    command = [sys.executable, "-m", "sharedserve", "serve", "--model", str(model)]
    command += ["--host", "127.0.0.1", "--rest-port", str(rest), "--grpc-port", str(grpc_port)]
    command += ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
    command += ["--header-timeout", str(HEADER_TIMEOUT_S)]
    quiet = subprocess.DEVNULL
    process = subprocess.Popen(command, stdout=quiet, stderr=quiet, cwd=work, env=os.environ)
    try:
        deadline = time.monotonic() + 120
        while predict(rest, context) != "200":
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the TLS server did not serve")
            time.sleep(0.3)
        yield rest, grpc_port, context
    finally:
        process.kill()
        process.wait(30)


def stall(port: int, first: bytes, lived: list[float], limit_s: float) -> None:
    """Connect, send ``first`` (maybe nothing), then wait: how long until the server closes."""
    sock = socket.create_connection(("127.0.0.1", port))
    started = time.monotonic()
    sock.settimeout(limit_s)
    try:
        if first:
            sock.sendall(first)
        while sock.recv(4096):
            pass
        lived.append(time.monotonic() - started)
    except TimeoutError:
        lived.append(float("inf"))  # still open at the limit
    except OSError:
        lived.append(time.monotonic() - started)  # a reset is a close too
    finally:
        sock.close()


def stalled_handshakes(model: Path, work: Path, per_kind: int = 50) -> Row:
    (work / "h").mkdir(parents=True, exist_ok=True)
    limit_s = 4 * HEADER_TIMEOUT_S
    honest: Counter[str] = Counter()
    lived: list[float] = []
    with tls_server(model, work / "h") as (rest, grpc_port, context):
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                honest[predict(rest, context)] += 1

        client = threading.Thread(target=loop)
        client.start()
        stallers = [
            threading.Thread(target=stall, args=(port, first, lived, limit_s))
            for port in (rest, grpc_port)
            for first in (b"", HALF_HELLO)
            for _ in range(per_kind)
        ]
        for staller in stallers:
            staller.start()
        for staller in stallers:
            staller.join()
        stop.set()
        client.join()
    longest = max(lived)
    failed = sum(honest.values()) - honest["200"]
    closed_in_time = longest <= HEADER_TIMEOUT_S + 1
    shown = "still open" if longest == float("inf") else f"{longest:.1f} s"
    return (
        f"h. {len(lived)} TLS connections that stall ({per_kind} each of: silent and half a "
        f"ClientHello, on REST and on gRPC), --header-timeout {HEADER_TIMEOUT_S:g}, beside an "
        "https predict loop",
        f"longest a stalled connection lived: **{shown}**; honest client "
        f"{sum(honest.values())} requests, **{failed} failed**",
        "every stalled connection closed within the header timeout (+1 s), 0 failed",
        closed_in_time and failed == 0,
        f"honest: {', '.join(f'{k} x{n}' for k, n in sorted(honest.items()))}; "
        f"stalled closed after (s): {json.dumps(sorted({round(t, 1) for t in lived}))}",
    )

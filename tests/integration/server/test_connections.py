"""Connection deadlines and the connection cap, on a real server with one-second limits.

Before them, 200 silent, 200 trickled-header and 200 half-sent-body connections were all still
open after 30 s. Each case holds raw sockets as those clients did and checks
what the server answers, that it closes the connection, and that it counted it.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import Server, serving

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

LIMITS = ["--header-timeout", "1", "--body-timeout", "1", "--keep-alive-timeout", "1"]
CAP = 8
PREDICT = b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def server(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("connections") / "serve.log"
    yield from serving(models_dir / "tiny", log, [*LIMITS, "--max-connections", str(CAP)])


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def read_until_closed(sock: socket.socket, within: float = 6) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    started, data = time.monotonic(), b""
    sock.settimeout(within)
    while chunk := sock.recv(65536):
        data += chunk
    return data, time.monotonic() - started


def status_and_error(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]


def counted(server: Server, line: str) -> float:
    for sample in server.client.get("/metrics").text.splitlines():
        if sample.startswith(line):
            return float(sample.rsplit(" ", 1)[1])
    return 0.0


def test_silent_connections_are_closed_after_the_header_timeout(server: Server) -> None:
    socks = [connect(server.port) for _ in range(CAP - 2)]
    for sock in socks:
        data, waited = read_until_closed(sock)
        assert data == b"" and waited < 4  # nothing came, so nothing is answered
        sock.close()
    line = 'sharedserve_connections_refused_total{model="tiny",reason="header_timeout"}'
    assert counted(server, line) >= CAP - 2


def test_trickled_headers_get_408(server: Server) -> None:
    with connect(server.port) as sock:
        started = time.monotonic()
        # A byte every 0.2 s keeps the connection busy and never finishes the headers; the
        # deadline counts from the connection opening, so this cannot extend it.
        for byte in PREDICT:
            if select.select([sock], [], [], 0.2)[0]:
                break  # the server has answered: sending on would be reset
            sock.sendall(bytes([byte]))
        answer, _ = read_until_closed(sock)
    status, error = status_and_error(answer)
    assert status == 408 and "headers" in error
    assert time.monotonic() - started < 5


def test_a_stalled_body_gets_408_and_is_counted(server: Server) -> None:
    with connect(server.port) as sock:
        sock.sendall(PREDICT + b"Content-Length: 1000\r\n\r\n" + b'{"instances": [[0.1,')
        answer, waited = read_until_closed(sock)
    status, error = status_and_error(answer)
    assert status == 408 and "--body-timeout" in error and waited < 4
    assert b"connection: close" in answer.lower()
    assert counted(server, 'sharedserve_requests_total{code="408"') == 1


def test_a_body_nobody_reads_cannot_hold_the_connection(server: Server) -> None:
    # A 404 is answered before the body is read; trickling the rest must not keep it open.
    with connect(server.port) as sock:
        sock.sendall(
            b"POST /v1/models/nope:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{"
        )
        answer, waited = read_until_closed(sock)
    assert status_and_error(answer)[0] == 404 and waited < 4


def test_idle_keep_alive_connections_are_closed(server: Server) -> None:
    with connect(server.port) as sock:
        sock.sendall(b"GET /v1/models/tiny HTTP/1.1\r\nHost: x\r\n\r\n")
        answer, waited = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200") and 0.5 < waited < 4


def test_connections_past_the_cap_get_503(server: Server) -> None:
    held = [connect(server.port) for _ in range(CAP)]
    try:
        with connect(server.port) as sock:
            sock.sendall(b"GET /v1/models/tiny HTTP/1.1\r\nHost: x\r\n\r\n")
            answer, _ = read_until_closed(sock)
        status, error = status_and_error(answer)
        assert status == 503 and "too many connections" in error
    finally:
        for sock in held:
            sock.close()
    line = 'sharedserve_connections_refused_total{model="tiny",reason="over_capacity"}'
    assert counted(server, line) >= 1
    deadline = time.monotonic() + 5  # the held ones are gone: it serves again
    while server.client.get("/v1/models/tiny").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_grpc_connections_that_never_speak_are_closed(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.grpc_port), timeout=10) as sock:
        data, waited = read_until_closed(sock)
    # Closed with a GOAWAY (no preface in time, or idle with no call open), never left open.
    assert data and waited < 4


def test_grpc_connections_past_the_cap_are_closed(server: Server) -> None:
    held = [socket.create_connection(("127.0.0.1", server.grpc_port)) for _ in range(CAP)]
    try:
        with socket.create_connection(("127.0.0.1", server.grpc_port), timeout=10) as sock:
            data, waited = read_until_closed(sock)
        # Closed on accept, with nothing sent: a connection the handshake timeout closes gets a
        # GOAWAY first (the test above), so what was sent tells the two apart, not a clock.
        assert data == b"" and waited < 4
    finally:
        for sock in held:
            sock.close()

"""Memory for bytes that have arrived only, on a real server with small byte bounds.

Before the bounds, one 77-byte request declaring 64 MiB made the server allocate 64 MiB (45 of
them got it OOM-killed), and 100 MiB of headers per connection were accepted. Each case holds
raw sockets as those clients did and reads what the server holds from its own gauge.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.servers import Server, serving

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

MIB = 1024 * 1024
ARRIVING = 200_000
HEADERS = 8192
PREDICT = b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
ROW = [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]
GAUGE = 'sharedserve_request_body_arriving_bytes{model="tiny"}'


@pytest.fixture(scope="module")
def server(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("arrival") / "serve.log"
    args = ["--max-body-bytes", str(64 * MIB), "--max-arriving-bytes", str(ARRIVING)]
    yield from serving(models_dir / "tiny", log, [*args, "--max-header-bytes", str(HEADERS)])


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=20)


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def answer_of(data: bytes) -> tuple[int, str, str]:
    """(status, head lower-cased, the body's error)."""
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), head.decode().lower(), json.loads(body)["error"]


def sample(server: Server, line: str) -> float | None:
    for text in server.client.get("/metrics").text.splitlines():
        if text.startswith(line + " "):
            return float(text.rsplit(" ", 1)[1])
    return None


def wait_for(value: Callable[[], object], expected: object) -> None:
    deadline = time.monotonic() + 30
    while (got := value()) != expected:
        assert time.monotonic() < deadline, f"{got!r}, never {expected!r}"
        time.sleep(0.05)


def rss_bytes(server: Server) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(kib) * 1024


def test_slow_bodies_declaring_64_mib_hold_what_arrived(server: Server) -> None:
    before = rss_bytes(server)
    start = b'{"instances"'
    socks = [connect(server.port) for _ in range(4)]
    try:
        for sock in socks:
            sock.sendall(PREDICT + f"Content-Length: {64 * MIB}\r\n\r\n".encode() + start)
        wait_for(lambda: sample(server, GAUGE), 4.0 * len(start))
        # Allocated on declaration, the four would hold 256 MiB; loose, as RSS is.
        assert rss_bytes(server) - before < 100 * MIB
    finally:
        for sock in socks:
            sock.close()
    wait_for(lambda: sample(server, GAUGE), 0.0)


def test_bodies_past_max_arriving_bytes_get_503_at_once(server: Server) -> None:
    held = 150_000
    with connect(server.port) as holder:
        holder.sendall(PREDICT + b"Content-Length: 1000000\r\n\r\n" + b" " * held)
        wait_for(lambda: sample(server, GAUGE), float(held))
        with connect(server.port) as late:
            late.sendall(PREDICT + b"Content-Length: 1000000\r\n\r\n" + b" " * 100_000)
            status, head, error = answer_of(read_until_closed(late))
        assert status == 503 and "--max-arriving-bytes" in error
        assert "connection: close" in head  # the rest of its body was never read
        wait_for(lambda: sample(server, GAUGE), float(held))  # the refused one's given back
        # A small body on another connection fits beside the held one.
        response = server.client.post("/v1/models/tiny:predict", json={"instances": ROW})
        assert response.status_code == 200
    wait_for(lambda: sample(server, GAUGE), 0.0)  # the holder went away: given back


def test_headers_past_max_header_bytes_get_431_and_a_close(server: Server) -> None:
    line = 'sharedserve_connections_refused_total{model="tiny",reason="header_too_large"}'
    with connect(server.port) as sock:
        sock.sendall(b"GET /v1/models/tiny HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4 * HEADERS)
        status, head, error = answer_of(read_until_closed(sock))
    assert status == 431 and "--max-header-bytes" in error and "connection: close" in head
    assert sample(server, line) == 1.0
    # Headers within the bound, sent in one write with a body larger than the bound: the body
    # is not counted as headers.
    body = json.dumps({"instances": ROW}).encode() + b" " * 4 * HEADERS
    pad = "a" * (HEADERS // 2)
    head = f"Content-Length: {len(body)}\r\nX-Pad: {pad}\r\nConnection: close\r\n\r\n"
    with connect(server.port) as sock:
        sock.sendall(PREDICT + head.encode() + body)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]

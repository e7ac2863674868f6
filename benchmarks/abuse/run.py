"""Does a model server survive abuse from its clients? Slow bodies, header floods, a huge typed
gRPC field and SIGTERM under load (d: clients that leave as a Service's proxies do; e: clients
that ignore readiness); the management surfaces (f, g, i, j: ``management.py``) and
stalled TLS handshakes (h: ``tls.py``), each against a fresh ``sharedserve serve``.

Loopback only, each scenario bounded in time (about ten minutes in all). Memory is the server
process's own, from ``/proc/PID/status``: ``VmRSS`` once the model is loaded and warm (idle),
``VmHWM`` (its peak) after the attack. The server runs as ``python -m sharedserve``, so
``PYTHONPATH`` picks the code under test (the "before" run points it at an older checkout).
Prints a Markdown report with one row per scenario; ``--out`` also writes it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import http.client
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

# benchmarks/, for machine.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import heading, publish
from management import churn, grpc_gap, management_access, outside_roots  # beside this script
from shutdown import LOST, sigterm_under_load
from tls import stalled_handshakes

from sharedserve.pack.probe import free_port, model_state
from sharedserve.server.protos.tfserving import PREDICT_METHOD

MIB = 1024 * 1024
PACKAGES = ("sharedserve", "uvicorn", "httptools", "grpcio", "protobuf")
PREDICT = "/v1/models/tiny:predict"
# The servers run from a directory with no sharedserve/ in it: ``python -m`` puts its working
# directory first on sys.path, ahead of the PYTHONPATH that chose the code under test.
NEUTRAL = tempfile.gettempdir()
NEW_FLAGS = ("--max-header-bytes", "--drain-delay", "--shutdown-grace")
ROW = b'{"instances": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]}'


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    rest: int
    grpc: int

    def kib(self, field: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise RuntimeError(f"no {field} for the server")

    def mib(self, field: str) -> float:
        return self.kib(field) / 1024


def server_help() -> str:
    command = [sys.executable, "-m", "sharedserve", "serve", "--help"]
    env = os.environ | {"COLUMNS": "250", "TERM": "dumb", "NO_COLOR": "1"}
    run = subprocess.run(command, capture_output=True, text=True, env=env, check=True, cwd=NEUTRAL)
    return run.stdout


@contextlib.contextmanager
def serving(model: Path, *flags: str) -> Iterator[Served]:
    rest, grpc_port = free_port(), free_port()
    command = [sys.executable, "-m", "sharedserve", "serve", "--model", str(model)]
    command += ["--host", "127.0.0.1", "--rest-port", str(rest), "--grpc-port", str(grpc_port)]
    quiet = subprocess.DEVNULL
    process = subprocess.Popen([*command, *flags], stdout=quiet, stderr=quiet, cwd=NEUTRAL)
    served = Served(process, rest, grpc_port)
    try:
        deadline = time.monotonic() + 120
        while model_state(f"http://127.0.0.1:{rest}", "tiny") != "AVAILABLE":
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the server did not become available")
            time.sleep(0.2)
        for _ in range(3):  # the first predicts' one-off allocations are not the attack's
            post(rest, ROW)
        yield served
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(30)


def post(port: int, body: bytes, timeout: float = 30) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", PREDICT, body, {"Content-Type": "application/json"})
    status = conn.getresponse().status
    conn.close()
    return status


def tally(outcomes: Iterable[str]) -> str:
    return ", ".join(f"{k} x{n}" for k, n in sorted(Counter(outcomes).items()))


def answer_of(data: bytes, fallback: str) -> str:
    """The status code of a raw HTTP answer, else ``fallback``."""
    match = re.match(rb"HTTP/1\.[01] (\d{3})", data)
    return match.group(1).decode() if match else fallback


@dataclass
class Row:
    scenario: str
    measured: str
    target: str
    met: bool | None  # None: recorded, not judged
    clients_got: str

    def line(self) -> str:
        met = "n/a" if self.met is None else "yes" if self.met else "**no**"
        cells = [self.scenario, self.measured, self.target, met]
        return "| " + " | ".join([*cells, self.clients_got]) + " |"


def slow_bodies(model: Path, clients: int = 50, seconds: float = 20) -> Row:
    """``clients`` connections declare a 64 MiB body each, then send a byte every 2 s."""
    with serving(model) as server:
        idle = server.mib("VmRSS")
        head = (
            f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {64 * MIB}\r\n\r\n"
        ).encode()
        socks = [socket.create_connection(("127.0.0.1", server.rest)) for _ in range(clients)]
        got = {s: b"" for s in socks}
        ended: dict[socket.socket, str] = {}
        for s in socks:
            s.sendall(head)
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            for s in socks:
                if s not in ended:
                    try:
                        s.send(b" ")
                    except OSError:
                        ended[s] = "reset"
            readable, _, _ = select.select([s for s in socks if s not in ended], [], [], 2.0)
            for s in readable:
                try:
                    chunk = s.recv(65536)
                except OSError:
                    chunk = b""
                got[s] += chunk
                if not chunk:
                    ended[s] = "closed"
        peak = server.mib("VmHWM")
        outcomes = [answer_of(got[s], ended.get(s, "still reading")) for s in socks]
        for s in socks:
            s.close()
    return Row(
        f"a. {clients} slow bodies declaring 64 MiB, a byte each every 2 s for {seconds:g} s",
        f"idle RSS {idle:.0f} MiB, peak {peak:.0f} MiB (**{peak / idle:.1f}x** idle)",
        "peak within 2x idle",
        peak <= 2 * idle,
        tally(outcomes),
    )


def flood_one(port: int, total: int, seconds: float) -> str:
    """Headers of ``total`` bytes (or until the server answers or closes); what came back."""
    line = b"X-Pad: " + b"a" * 8185 + b"\r\n"  # 8 KiB a header line
    chunk = line * 128  # 1 MiB
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        sent, deadline = 0, time.monotonic() + seconds
        try:
            while sent < total and time.monotonic() < deadline:
                if select.select([sock], [], [], 0)[0]:
                    break  # an answer, or a close
                sock.sendall(chunk)
                sent += len(chunk)
            answer = sock.recv(65536)
        except OSError as e:
            with contextlib.suppress(OSError):  # an answer sent before the reset still counts
                answer = sock.recv(65536)
                if answer.startswith(b"HTTP/"):
                    return f"{answer_of(answer, 'other')} after {sent // MIB} MiB"
            return f"{type(e).__name__} after {sent // MIB} MiB"
    return f"{answer_of(answer, 'closed' if not answer else 'other')} after {sent // MIB} MiB"


def header_flood(model: Path, clients: int = 4, mib: int = 100, seconds: float = 30) -> Row:
    with serving(model) as server:
        idle = server.mib("VmRSS")
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            outcomes = list(
                pool.map(lambda _: flood_one(server.rest, mib * MIB, seconds), range(clients))
            )
        peak = server.mib("VmHWM")
    return Row(
        f"b. header flood: {clients} connections sending up to {mib} MiB of headers each",
        f"idle RSS {idle:.0f} MiB, peak {peak:.0f} MiB (rise **{peak - idle:.0f} MiB**)",
        "431 before the bytes pile up",
        all(o.startswith("431") for o in outcomes),
        tally(o.split(" after ")[0] for o in outcomes)
        + f"; sent before it: {', '.join(o.split(' after ')[1] for o in outcomes)}",
    )


def empty_strings_request(count: int) -> bytes:
    """A TF Serving PredictRequest for ``tiny`` whose input is ``count`` empty ``string_val``s,
    written straight in protobuf's wire format (building 30M fields in Python takes minutes)."""

    def field(number: int, payload: bytes) -> bytes:  # a length-delimited field
        return _varint(number << 3 | 2) + _varint(len(payload)) + payload

    tensor = b"\x08\x07" + b"\x42\x00" * count  # dtype DT_STRING, then string_val (8) = b""
    entry = field(1, b"x") + field(2, tensor)  # inputs: map<string, TensorProto>
    return field(1, field(1, b"tiny")) + field(2, entry)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def probe_gaps(port: int, stop: threading.Event, gaps: list[float]) -> None:
    """GET /v2/health/live every ~5 ms; the longest time between two answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    last = time.perf_counter()
    while not stop.is_set():
        conn.request("GET", "/v2/health/live")
        conn.getresponse().read()
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
        time.sleep(0.005)
    conn.close()


def huge_grpc_field(model: Path, count: int = 30_000_000, calls: int = 4) -> Row:
    message = empty_strings_request(count)
    options = [("grpc.max_send_message_length", 256 * MIB)]
    with serving(model) as server, grpc.insecure_channel(f"127.0.0.1:{server.grpc}", options) as ch:
        predict = ch.unary_unary(PREDICT_METHOD)  # raw bytes in and out

        def send(_: int) -> str:
            try:
                predict(message, timeout=120)
                return "OK"
            except grpc.RpcError as e:
                return str(e.code().name)

        before = server.mib("VmRSS")
        stop, gaps = threading.Event(), list[float]()
        prober = threading.Thread(target=probe_gaps, args=(server.rest, stop, gaps))
        prober.start()
        time.sleep(0.5)
        alone = send(0)
        with concurrent.futures.ThreadPoolExecutor(calls) as pool:
            statuses = [alone, *pool.map(send, range(calls))]
        peak = server.mib("VmHWM")
        time.sleep(5)
        stop.set()
        prober.join()
        after = server.mib("VmRSS")
    stall = max(gaps) * 1000
    return Row(
        f"c. TF Serving Predict of {count / 1e6:g}M empty string_val ({len(message) / MIB:.0f} "
        f"MiB), once alone then {calls} at once, REST health probed every 5 ms",
        f"longest health-check gap **{stall:.0f} ms**; RSS {before:.0f} MiB before, peak "
        f"{peak:.0f}, {after:.0f} 5 s after the calls ended",
        "no gap over 50 ms",
        stall <= 50,
        tally(statuses),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--scenarios", default="a,b,c,d,e,f,g,h,i,j", help="comma-separated, from a to j"
    )
    parser.add_argument("--label", default="", help="what was measured, e.g. before or after")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    chosen = args.scenarios.split(",")
    flags = server_help()
    with tempfile.TemporaryDirectory() as tmp:
        build = [sys.executable, "-m", "sharedserve", "models", "build", "tiny", "--out", tmp]
        subprocess.run(build, check=True, capture_output=True, cwd=NEUTRAL)
        model, work = Path(tmp) / "tiny", Path(tmp)
        default_grpc = 32 * MIB
        runs = {
            "a": lambda: slow_bodies(model),
            "b": lambda: header_flood(model),
            "c": lambda: huge_grpc_field(model),
            "d": lambda: Row(*sigterm_under_load(lambda *f: serving(model, *f), flags)),
            "e": lambda: Row(
                *sigterm_under_load(lambda *f: serving(model, *f), flags, ignore_readiness=True)
            ),
            "f": lambda: Row(*management_access(model, work)),
            "g": lambda: Row(*outside_roots(model, work)),
            "h": lambda: Row(*stalled_handshakes(model, work)),
            "i": lambda: Row(*churn(model, work)),
            "j": lambda: Row(*grpc_gap(lambda *f: serving(model, *f), probe_gaps, default_grpc)),
        }
        rows = [runs[name]() for name in chosen]
    title = "Abuse of a model server" + (f": {args.label}" if args.label else "")
    lines = heading(title, PACKAGES)
    has = ", ".join(f"`{f}`: {'yes' if f in flags else 'no'}" for f in NEW_FLAGS)
    lines += [
        "",
        "A fresh `sharedserve serve` of `tiny` per scenario, on loopback, default flags unless "
        "the row says otherwise (64 MiB --max-body-bytes, 32 MiB --grpc-max-message-bytes). "
        "RSS is the server's resident set: "
        "idle = VmRSS when loaded and warm, peak = VmHWM after the attack. The server's "
        f"`serve --help` lists {has}.",
        "",
        "| scenario | measured | target | met | clients got |",
        "|---|---|---|---|---|",
        *(row.line() for row in rows),
    ]
    lines += ["", LOST] if {"d", "e"} & set(chosen) else []
    if os.environ.get("PYTHONPATH"):
        lines += ["", "Run with PYTHONPATH naming another checkout: the servers ran its code."]
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()

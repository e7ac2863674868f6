"""How much memory do large JSON bodies cost a model server, and does the decoding budget bound it?

Starts a real ``sharedserve serve`` for the ``tiny`` model (built into a temp dir) per scenario,
so each peak is the process's own: ``VmHWM`` (peak resident set) from ``/proc/PID/status``
after the requests, minus ``VmRSS`` once the model is loaded and warm. Scenarios: one, then four
concurrent valid 60 MiB row-format bodies, each with the decoding budget as shipped (the default,
``--max-decoding-bytes`` = ``--max-body-bytes``, 64 MiB: one largest body decoded at a time) and
with it out of the way (``--max-decoding-bytes`` 1 TiB, how the server behaved before it had
one). Per request it records the status and the client-side latency. Prints a Markdown report;
``--out`` also writes it. No GPU involved: this is host memory.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from machine import heading, publish  # benchmarks/machine.py, beside this script

from sharedserve.pack.probe import free_port, model_state

MIB = 1024 * 1024
PACKAGES = ("sharedserve", "tensorflow", "orjson", "numpy", "uvicorn")
UNBOUNDED = str(1 << 40)


def body(mib: int, seed: int = 0) -> bytes:
    """A row-format predict body for ``tiny`` (8 floats a row) of about ``mib`` MiB."""
    rng = random.Random(seed)
    row = "[" + ",".join(f"{rng.random():.6f}" for _ in range(8)) + "]"
    rows = (mib * MIB - 20) // (len(row) + 1)
    return ('{"instances": [' + ",".join([row] * rows) + "]}").encode()


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def post(port: int, payload: bytes) -> tuple[int, float]:
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/v1/models/tiny:predict", payload, {"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.status, time.perf_counter() - started


@dataclass
class Result:
    clients: int
    budget: str
    rss_mib: float
    peak_rise_mib: float
    statuses: list[int]
    slowest_s: float


def scenario(model: Path, payload: bytes, clients: int, budget: str | None) -> Result:
    port = free_port()
    command = [sys.executable, "-m", "sharedserve", "serve", "--model", str(model)]
    command += ["--host", "127.0.0.1", "--rest-port", str(port), "--grpc-port", "0"]
    command += [] if budget is None else ["--max-decoding-bytes", budget]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while model_state(f"http://127.0.0.1:{port}", "tiny") != "AVAILABLE":
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("the server did not become available")
            time.sleep(0.2)
        post(port, body(1))  # the first predict's one-off allocations are not the bodies' cost
        before = status_kib(server.pid, "VmRSS")
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            answers = list(pool.map(lambda _: post(port, payload), range(clients)))
        peak = status_kib(server.pid, "VmHWM")
    finally:
        server.terminate()
        server.wait(30)
    return Result(
        clients,
        "off (1 TiB)" if budget else "default (64 MiB)",
        before / 1024,
        (peak - before) / 1024,
        sorted(status for status, _ in answers),
        max(seconds for _, seconds in answers),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--body-mib", type=int, default=60)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    payload = body(args.body_mib)
    with tempfile.TemporaryDirectory() as tmp:
        build = [sys.executable, "-m", "sharedserve", "models", "build", "tiny", "--out", tmp]
        subprocess.run(build, check=True, capture_output=True)
        rows = [
            scenario(Path(tmp) / "tiny", payload, clients, budget)
            for clients in (1, 4)
            for budget in (UNBOUNDED, None)
        ]
    lines = heading("Peak memory of large JSON bodies (REST)", PACKAGES)
    lines += [
        "",
        f"Body: {len(payload) / MIB:.1f} MiB of row-format JSON for `tiny` "
        f"({payload.count(b'[') - 1} rows of 8 floats). Peak rise = VmHWM after the requests "
        "minus VmRSS before them, of a fresh server process per row.",
        "",
        "| concurrent bodies | decoding budget | RSS before (MiB) | peak rise (MiB) "
        "| rise ÷ body size | statuses | slowest (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per_body = r.peak_rise_mib / (len(payload) / MIB)
        lines.append(
            f"| {r.clients} | {r.budget} | {r.rss_mib:.0f} | {r.peak_rise_mib:.0f} "
            f"| {per_body:.1f}x | {' '.join(map(str, r.statuses))} | {r.slowest_s:.1f} |"
        )
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()

"""How much memory do large JSON bodies cost a model server, and does the decoding budget bound it?

Starts a real ``sharedserve serve`` for the ``tiny`` model (built into a temp dir) per scenario,
so each peak is the process's own: ``VmHWM`` (peak resident set) from ``/proc/PID/status``
after the requests, minus ``VmRSS`` once the model is loaded and warm. Scenarios: one, then four
concurrent valid 60 MiB row-format bodies, each with the decoding budget as shipped (the default,
``--max-decoding-bytes`` = ``--max-body-bytes``, 64 MiB: one largest body decoded at a time) and
with it out of the way (``--max-decoding-bytes`` 1 TiB, how the server behaved before it had
one). Per request it records the status and the client-side latency. The servers decode with
the direct decoder (``server/json_arrays.py``); beside them, the decode alone of the same body by
both paths, each in a fresh process (``--decode-worker``): the general path (orjson, then numpy,
what the server ran before) and the direct one. Prints a Markdown report; ``--out`` also writes
it. No GPU involved: this is host memory.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import http.client
import json
import os
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
PACKAGES = ("sharedserve", "tensorflow", "orjson", "pysimdjson", "numpy", "uvicorn")
PATHS = {"general": "orjson, then numpy (before)", "direct": "simdjson into numpy (now)"}
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


def decode_worker(path: str, mib: int) -> None:
    """Decode the body by one path in this fresh process; print its peak rise and time."""
    import numpy as np

    from sharedserve.server.version.signature import Signature, TensorSpec
    from sharedserve.server.wire.tfserving import codec

    spec = TensorSpec("x", "DT_FLOAT", (-1, 8))
    signature = Signature("serving_default", {"x": spec}, {"y": spec})
    payload = body(mib)
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from here
    before = status_kib(os.getpid(), "VmRSS")
    started = time.perf_counter()
    parse = codec.parse_json_body if path == "general" else codec.parse_predict_body
    inputs = codec.decode_predict_request(parse(payload), signature).inputs
    seconds = time.perf_counter() - started
    peak = status_kib(os.getpid(), "VmHWM")
    assert inputs["x"].dtype == np.float32
    print(json.dumps([len(payload), (peak - before) / 1024, seconds]))


def decode_alone(path: str, mib: int) -> tuple[int, float, float]:
    """(body bytes, peak rise MiB, seconds) of one path's decode, in a fresh process."""
    command = [sys.executable, __file__, "--decode-worker", path, "--body-mib", str(mib)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    size, rise, seconds = json.loads(out.splitlines()[-1])
    return size, rise, seconds


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
    parser.add_argument("--decode-worker", choices=PATHS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.decode_worker:
        decode_worker(args.decode_worker, args.body_mib)
        return
    decodes = {path: decode_alone(path, args.body_mib) for path in PATHS}
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
    lines += [
        "",
        "The decode alone (`codec`: parse, then arrays of the signature's dtype), each path in a "
        "fresh process on the same body; peak rise = VmHWM after the decode minus VmRSS before "
        "it (the peak reset just before, the body already in memory):",
        "",
        "| decoder | peak rise (MiB) | rise ÷ body size | seconds |",
        "|---|---|---|---|",
    ]
    for path, (size, rise, seconds) in decodes.items():
        lines.append(f"| {PATHS[path]} | {rise:.0f} | {rise / (size / MIB):.1f}x | {seconds:.2f} |")
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()

"""What a request costs beyond its call after an idle gap: one `serve` of tiny, a plain blocking
HTTP client (no Locust, no gevent), requests sent with exponential gaps of a given mean.

Why: `profile`'s open-loop row and `size --verify` measure a small model at 2-3 ms where its
closed-loop (sequential) row measures 1 ms. This separates the load generator from the host:
the client here has no scheduler of its own, so what grows with the gap is the host's and the
server's waking, not Locust's. Each gap is measured in `--repeats` runs a minute apart in all
(a fresh server each), since the figure drifts from run to run.

    .venv/bin/python benchmarks/idle_gap_cpu.py --out benchmarks/results/idle_gap_cpu.md
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import heading, publish  # benchmarks/machine.py, beside this script

from sharedserve.bench.payload import random_inputs, rest_body, signature_inputs
from sharedserve.demo import wait_available
from sharedserve.pack.probe import free_port

GAPS_MS = (0.0, 2.0, 10.0, 27.0)
PACKAGES = ("sharedserve", "tensorflow")


def _run_once(model: Path, requests: int) -> dict[float, tuple[float, float]]:
    """One fresh server: p50 and p99 ms at each mean gap."""
    port = free_port()
    command = [sys.executable, "-m", "sharedserve", "--log-level", "warning", "serve",
               "--model", str(model), "--host", "127.0.0.1", "--rest-port", str(port),
               "--grpc-port", str(free_port()), "--cpu-limit", "1"]  # fmt: skip
    server = subprocess.Popen(command)
    try:
        wait_available(f"http://127.0.0.1:{port}", "tiny", server, 120)
        connection = http.client.HTTPConnection("127.0.0.1", port)
        connection.request("GET", "/v1/models/tiny/metadata")
        metadata = json.loads(connection.getresponse().read())
        body = rest_body(random_inputs(signature_inputs(metadata), 0))
        headers = {"Content-Type": "application/json"}

        def one() -> float:
            started = time.perf_counter()
            connection.request("POST", "/v1/models/tiny:predict", body, headers)
            connection.getresponse().read()
            return (time.perf_counter() - started) * 1000

        for _ in range(200):  # warm: the first calls build the graph
            one()
        rng, out = random.Random(0), {}
        for gap in GAPS_MS:
            latencies = []
            for _ in range(requests):
                if gap:
                    time.sleep(rng.expovariate(1000 / gap))
                latencies.append(one())
            latencies.sort()
            out[gap] = (latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)])
        return out
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=600, help="requests a gap and run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "sharedserve", "models", "build", "tiny",
                        "--out", tmp], check=True, capture_output=True)  # fmt: skip
        runs = [_run_once(Path(tmp) / "tiny", args.requests) for _ in range(args.repeats)]
    lines = [
        *heading("What an idle gap costs a request: tiny, one serve, a plain client", PACKAGES),
        "",
        f"One `sharedserve serve --model tiny --cpu-limit 1` a run ({args.repeats} runs), a "
        "blocking `http.client` connection kept open, 200 warm-up requests, then "
        f"{args.requests} requests at each mean gap (exponential gaps; 0: back to back). "
        "Latency is from send to the last byte of the reply, in ms.",
        "",
        "| mean gap ms | " + " | ".join(f"run {i + 1} p50 / p99" for i in range(len(runs))) + " |",
        "|---|" + "---|" * len(runs),
    ]
    for gap in GAPS_MS:
        cells = [f"{run[gap][0]:.2f} / {run[gap][1]:.2f}" for run in runs]
        lines.append(f"| {gap:g} | " + " | ".join(cells) + " |")
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()

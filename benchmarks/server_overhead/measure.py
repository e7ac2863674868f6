"""What does serving cost on top of the model call? REST (TF Serving JSON and OIP binary) and gRPC
against the bare backend.

Builds example models (``--models``, default ``tiny`` and ``mobilenet_v2``; ``--framework tf`` or
``torch``) into a temp dir and measures them at batch 1 on whatever device the framework picks
(the CPU here; the GPU in the GPU proof kit), closed loop with 1 and 8 client threads, batching
off then on:

* ``in-process``: the backend's ``predict`` in a worker subprocess set up as the server sets
  itself up (same thread pools, ``gc.freeze()`` after loading). A subprocess, so that neither
  the client threads nor this process's own framework import share its GIL and heap;
* ``REST``: a real ``sharedserve serve`` process; row-format JSON body encoded once; one
  keep-alive ``http.client`` connection per client thread;
* ``OIP REST binary``: the same server's Open Inference Protocol infer with the binary tensor
  extension both ways (raw float32 bytes after a small JSON header, as Triton's client sends);
* ``gRPC``: the same server; ``PredictionServiceStub.Predict`` with a pre-built request holding
  binary ``tensor_content``; one channel (connection) per client thread;
* ``bare gRPC``: the same client against the least a Python gRPC server can do: grpcio's
  synchronous server inside the in-process worker, calling the same backend. Its overhead is the
  floor of gRPC on this machine; the real server's excess over it is sharedserve's own.

Each row is measured in ``--rounds`` slices alternating with the other paths, so that drift in a
shared machine's speed lands on every path alike. p50/p99 are numpy's exact percentiles of every
request's latency. Prints a Markdown report; ``--out`` also writes it to a file, ``--json`` the
figures. The gRPC clients and the bare server use sharedserve's own copy of TF Serving's messages,
so the script runs where TensorFlow is not installed (``--framework torch``).

Its parts, beside it: ``closed_loop.py`` (the models and the loop every path is driven by),
``in_process.py`` (the worker and the bare gRPC server), ``clients.py`` (the server and its
clients) and ``report.py`` (the report, the ``--json`` figures and the targets).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

# benchmarks/, for machine.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clients import grpc_client, oip_rest_client, over_server, rest_client, serving, without_batches
from closed_loop import (
    CEILING_ROWS,
    CONCURRENCY,
    MODELS,
    Cell,
    Measure,
    example_input,
    rest_body,
)
from in_process import InProcess, in_process_worker
from machine import publish
from report import decode_report, figures, report, row_line


def interleaved(paths: dict[str, Measure], args: argparse.Namespace) -> dict[str, Any]:
    """Each path in ``args.rounds`` alternating slices -> (latencies, QPS, rows/call) per path."""
    got: dict[str, list[Any]] = {path: [] for path in paths}
    for i in range(args.rounds):
        for path, measure in paths.items():
            warmup = args.warmup if i == 0 else args.rewarm
            got[path].append(measure(warmup, args.duration / args.rounds))
    out = {}
    for path, slices in got.items():
        latencies = np.concatenate([np.asarray(lat) for lat, _, _ in slices])
        rows, calls = np.sum([batches for _, _, batches in slices], axis=0)
        qps = sum(done for _, done, _ in slices) / args.duration
        out[path] = (latencies, qps, rows / calls if calls else float("nan"))
    return out


def measure_model(name: str, model_dir: Path, args: argparse.Namespace, log: Path) -> list[Cell]:
    key, shape = MODELS[name]
    array = example_input(shape)
    worker, cells = InProcess(model_dir), []
    batching_on = ["--enable-batching", "--max-batch-size", str(CEILING_ROWS)]
    batching_on += ["--batch-timeout-micros", str(args.batch_timeout_micros)]
    try:
        for batching, extra in (("off", []), ("on", batching_on)):
            with serving(model_dir, extra, log) as (rest_port, grpc_port):
                clients = {
                    "REST": rest_client(rest_port, name, rest_body(array)),
                    "OIP REST binary": oip_rest_client(rest_port, name, key, array),
                    "gRPC": grpc_client(grpc_port, name, key, array),
                }
                for threads in CONCURRENCY:
                    paths = {p: over_server(c, threads, rest_port) for p, c in clients.items()}
                    if batching == "off":
                        bare = grpc_client(worker.bare_grpc_port, name, key, array)
                        paths = {
                            "in-process": worker.measure(threads),
                            "bare gRPC": without_batches(bare, threads),
                            **paths,
                        }
                    for path, (latencies, qps, per_call) in interleaved(paths, args).items():
                        p50, p99 = np.percentile(latencies * 1e3, [50, 99])
                        mode = "-" if path == "in-process" else batching
                        n = len(latencies)
                        cells.append(Cell(name, path, mode, threads, p50, p99, qps, n, per_call))
                        print(row_line(cells[-1], cells), flush=True)
        args.decode[name] = worker.ask(decode=True)
        order = {"threads": 1, "rows": CEILING_ROWS, "times": [args.warmup, args.duration]}
        latencies, done = worker.ask(**order)
        args.ceiling[name] = (
            float(np.median(latencies)) * 1e3,
            CEILING_ROWS * done / args.duration,
        )
    finally:
        worker.proc.kill()
        worker.proc.wait()
    return cells


def decode_only(model_dir: Path) -> Any:
    worker = InProcess(model_dir)
    try:
        return worker.ask(decode=True)
    finally:
        worker.proc.kill()
        worker.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the Markdown report here")
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")
    parser.add_argument(
        "--models", default="tiny,mobilenet_v2", help=f"comma list of {', '.join(MODELS)}"
    )
    parser.add_argument("--framework", choices=("tf", "torch"), default="tf")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds measured per row")
    parser.add_argument("--rounds", type=int, default=4, help="slices each row is measured in")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before a row")
    parser.add_argument("--rewarm", type=float, default=0.5, help="seconds before a later slice")
    parser.add_argument("--batch-timeout-micros", type=int, default=2000)
    parser.add_argument(
        "--decode-only",
        action="store_true",
        help="time only each model's REST JSON decode, by both decoders (no servers)",
    )
    parser.add_argument("--in-process-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_process_worker:
        in_process_worker(args.in_process_worker)
        return
    names = [m for m in args.models.split(",") if m]
    unknown = sorted(set(names) - set(MODELS))
    if unknown or not names:
        parser.error(f"--models: unknown {unknown}; choose from {', '.join(MODELS)}")
    args.decode, args.ceiling = {}, {}
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="sharedserve-bench-") as tmp:
        models = Path(tmp) / "models"
        build = [sys.executable, "-m", "sharedserve", "models", "build", *names]
        build += ["--framework", args.framework, "--out", str(models)]
        subprocess.run(build, check=True, capture_output=True)
        for name in names:
            if args.decode_only:
                args.decode[name] = decode_only(models / name)
                continue
            cells += measure_model(name, models / name, args, Path(tmp) / "server.log")
    if args.decode_only:
        publish(decode_report(args), args.out)
        return
    publish(report(cells, args), args.out)
    if args.json is not None:
        args.json.write_text(json.dumps(figures(cells, args), indent=1))


if __name__ == "__main__":
    main()

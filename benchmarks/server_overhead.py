"""What does serving cost on top of the model call? REST and gRPC against the bare backend.

Builds the example models ``tiny`` and ``mobilenet_v2`` into a temp dir and measures them at
batch 1 on CPU, closed loop with 1 and 8 client threads, batching off then on:

* ``in-process``: ``TensorFlowBackend.predict`` in a worker subprocess set up as the server sets
  itself up (same TF thread pools, ``gc.freeze()`` after loading). A subprocess, so that neither
  the client threads nor this process's own TensorFlow import share its GIL and heap;
* ``REST``: a real ``sharedserve serve`` process; row-format JSON body encoded once; one
  keep-alive ``http.client`` connection per client thread;
* ``gRPC``: the same server; ``PredictionServiceStub.Predict`` with a pre-built request holding
  binary ``tensor_content``; one channel (connection) per client thread;
* ``bare gRPC``: the same client against the least a Python gRPC server can do: grpcio's
  synchronous server inside the in-process worker, calling the same backend. Its overhead is the
  floor of gRPC on this machine; the real server's excess over it is sharedserve's own.

Each row is measured in ``--rounds`` slices alternating with the other paths, so that drift in a
shared machine's speed lands on every path alike. p50/p99 are numpy's exact percentiles of every
request's latency. Prints a Markdown report; ``--out`` also writes it to a file.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from machine import heading, publish  # benchmarks/machine.py, beside this script

MODELS = {"tiny": ("x", (8,)), "mobilenet_v2": ("images", (224, 224, 3))}
CONCURRENCY = (1, 8)
PACKAGES = (
    *("sharedserve", "tensorflow", "tensorflow-serving-api", "grpcio", "protobuf"),
    *("fastapi", "starlette", "uvicorn", "httptools", "uvloop", "numpy", "orjson"),
)
MakeCall = Callable[[], Callable[[], object]]  # one call per client thread (own connection)
Measure = Callable[[float, float], Any]  # (warm-up s, duration s) -> (latencies, done, batches)


@dataclass
class Cell:
    model: str
    path: str  # in-process | REST | gRPC
    batching: str  # "-" for in-process, "off" / "on"
    concurrency: int
    p50_ms: float
    p99_ms: float
    qps: float
    n: int
    rows_per_call: float  # mean rows per model call in the server; NaN where not measured


def closed_loop(make_call: MakeCall, threads: int, warmup_s: float, duration_s: float) -> Any:
    """``threads`` callers back to back -> (window's latencies in s, completions in the window)."""
    calls = [make_call() for _ in range(threads)]
    spans: list[list[tuple[float, float]]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    barrier, start = threading.Barrier(threads + 1), [0.0]

    def worker(call: Callable[[], object], out: list[tuple[float, float]]) -> None:
        barrier.wait()
        stop, clock = start[0] + warmup_s + duration_s, time.perf_counter
        try:
            while (began := clock()) < stop:
                call()
                out.append((began, clock()))
        except BaseException as e:
            errors.append(e)

    pool = [
        threading.Thread(target=worker, args=a, daemon=True) for a in zip(calls, spans, strict=True)
    ]
    for thread in pool:
        thread.start()
    gc.disable()  # a collection pausing the client would be charged to the server
    try:
        start[0] = time.perf_counter()
        barrier.wait()
        for thread in pool:
            thread.join()
    finally:
        gc.enable()
    if errors:
        raise RuntimeError(f"a request failed: {errors[0]!r}") from errors[0]
    lo, hi = start[0] + warmup_s, start[0] + warmup_s + duration_s
    began, ended = np.array([span for out in spans for span in out]).T
    done = (ended >= lo) & (ended <= hi)
    return (ended - began)[(began >= lo) & done], int(done.sum())


def example_input(shape: tuple[int, ...], rows: int = 1) -> np.ndarray:
    return np.random.default_rng(0).random((rows, *shape), dtype=np.float32)


def rest_body(array: np.ndarray) -> bytes:
    return json.dumps({"instances": array.tolist()}).encode()


# --- in-process: a worker subprocess, driven one JSON line at a time ----------------------------


def in_process_worker(model_dir: Path) -> None:
    from sharedserve.config import CapSource, GpuCapRequest
    from sharedserve.limits.cpu import resolve_cpu_limit, thread_pool_sizes
    from sharedserve.limits.gpu import resolve_cap
    from sharedserve.server import codec
    from sharedserve.server.backends.base import RuntimeConfig, warm_up
    from sharedserve.server.backends.tensorflow import TensorFlowBackend

    backend = TensorFlowBackend(max(model_dir.iterdir(), key=lambda p: int(p.name)))
    cap = resolve_cap(GpuCapRequest(None, None, CapSource.NONE), None)
    backend.configure(RuntimeConfig(cap, *thread_pool_sizes(resolve_cpu_limit(None))))
    backend.load()
    warm_up(backend)
    gc.freeze()  # as the server does once the model is loaded
    key, shape = MODELS[model_dir.name]
    _server, port = bare_grpc_server(backend)  # held: a grpc.Server stops when collected
    print(json.dumps(port), flush=True)
    for line in sys.stdin:
        order = json.loads(line)
        inputs = {key: example_input(shape, order.get("rows", 1))}
        if not order.get("decode"):
            call = _model_call(backend, inputs)
            latencies, done = closed_loop(call, order["threads"], *order["times"])
            print(json.dumps([latencies.tolist(), done]), flush=True)
            continue
        # The server's JSON decode of the REST body: parse, then to numpy; medians of 30.
        body, signature = rest_body(inputs[key]), backend.signatures()["serving_default"]
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            payload = codec.parse_json_body(body)
            t1 = time.perf_counter()
            codec.decode_predict_request(payload, signature)
            times.append((t1 - t0, time.perf_counter() - t1))
        print(json.dumps([len(body), *np.median(times, axis=0).tolist()]), flush=True)


def bare_grpc_server(backend: Any) -> tuple[Any, int]:
    """The floor: grpcio's synchronous server around the same backend call, started; its port.

    No validation, metrics, event loop, thread hand-off or batching: the handler runs the model in
    grpcio's own worker thread. What the real server costs beyond this row is sharedserve's share.
    """
    from concurrent import futures

    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from sharedserve.server.tensor_proto import from_tensor_proto, to_tensor_proto

    class Bare(prediction_service_pb2_grpc.PredictionServiceServicer):  # type: ignore[misc]
        def Predict(self, request: Any, context: Any) -> Any:  # noqa: N802
            inputs = {k: from_tensor_proto(v) for k, v in request.inputs.items()}
            response = predict_pb2.PredictResponse()
            for k, v in backend.predict("serving_default", inputs).items():
                to_tensor_proto(v, response.outputs[k])
            return response

    options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.so_reuseport", 0)]
    server = grpc.server(futures.ThreadPoolExecutor(max(CONCURRENCY)), options=options)
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Bare(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, int(port)


def _model_call(backend: Any, inputs: dict[str, np.ndarray]) -> MakeCall:
    return lambda: lambda: backend.predict("serving_default", inputs)


class InProcess:
    """The in-process worker: one JSON order per line in, one JSON answer per line out."""

    def __init__(self, model_dir: Path) -> None:
        cmd = [sys.executable, __file__, "--in-process-worker", str(model_dir)]
        pipe, text = subprocess.PIPE, True
        self.proc = subprocess.Popen(
            cmd, stdin=pipe, stdout=pipe, stderr=subprocess.DEVNULL, text=text
        )
        self.bare_grpc_port = self.ask()
        if not isinstance(self.bare_grpc_port, int):
            raise RuntimeError(f"the in-process worker for {model_dir} did not start")

    def ask(self, **order: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if order:
            self.proc.stdin.write(json.dumps(order) + "\n")
            self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def measure(self, threads: int) -> Measure:
        return lambda warmup, duration: (
            *self.ask(threads=threads, times=[warmup, duration]),
            [0, 0],
        )


# --- the server and its clients ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(model_dir: Path, extra: list[str], log: Path) -> Iterator[tuple[int, int]]:
    rest, grpc_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "sharedserve", "serve", "--model", str(model_dir)]
    cmd += ["--host", "127.0.0.1", "--rest-port", str(rest), "--grpc-port", str(grpc_port), *extra]
    with log.open("ab") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while b'"AVAILABLE"' not in _get(rest, f"/v1/models/{model_dir.name}"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not become AVAILABLE; see {log}")
            time.sleep(0.2)
        yield rest, grpc_port
    finally:
        proc.terminate()
        proc.wait(30)


def _get(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    except OSError:
        return b""
    finally:
        conn.close()


def rest_client(port: int, name: str, body: bytes) -> MakeCall:
    path, headers = f"/v1/models/{name}:predict", {"Content-Type": "application/json"}

    def make_call() -> Callable[[], object]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

        def call() -> None:
            conn.request("POST", path, body, headers)
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                raise RuntimeError(f"REST {response.status}: {data[:200]!r}")

        return call

    return make_call


def grpc_client(port: int, name: str, key: str, array: np.ndarray) -> MakeCall:
    import grpc
    from tensorflow.core.framework import types_pb2
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    content, dims = array.astype("<f4").tobytes(), [{"size": d} for d in array.shape]
    tensor = {"dtype": types_pb2.DT_FLOAT, "tensor_content": content, "tensor_shape": {"dim": dims}}
    request = predict_pb2.PredictRequest(model_spec={"name": name}, inputs={key: tensor})
    options = [("grpc.max_receive_message_length", -1), ("grpc.use_local_subchannel_pool", 1)]

    def make_call() -> Callable[[], object]:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=options)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return lambda: stub.Predict(request, timeout=60)

    return make_call


def _batches(port: int) -> np.ndarray:
    """(rows, model calls) the server has run so far, from its ``/metrics``."""
    text = _get(port, "/metrics").decode()
    found = dict(re.findall(r"^sharedserve_batch_size_(sum|count)\{.*\} (\S+)$", text, re.M))
    return np.array([float(found.get("sum", 0)), float(found.get("count", 0))])  # none yet: 0


def over_server(client: MakeCall, threads: int, rest_port: int) -> Measure:
    def measure(warmup: float, duration: float) -> Any:
        before = _batches(rest_port)
        latencies, done = closed_loop(client, threads, warmup, duration)
        return latencies, done, _batches(rest_port) - before

    return measure


def without_batches(client: MakeCall, threads: int) -> Measure:
    """A path whose server has no ``/metrics`` (rows/model call left blank)."""

    def measure(warmup: float, duration: float) -> Any:
        latencies, done = closed_loop(client, threads, warmup, duration)
        return latencies, done, np.zeros(2)

    return measure


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
    batching_on = ["--enable-batching", "--max-batch-size", "8"]
    batching_on += ["--batch-timeout-micros", str(args.batch_timeout_micros)]
    try:
        for batching, extra in (("off", []), ("on", batching_on)):
            with serving(model_dir, extra, log) as (rest_port, grpc_port):
                clients = {
                    "REST": rest_client(rest_port, name, rest_body(array)),
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
                        print(_row(cells[-1], cells), flush=True)
        if name == "mobilenet_v2":
            args.decode = worker.ask(decode=True)
            latencies, done = worker.ask(threads=1, rows=8, times=[args.warmup, args.duration])
            args.ceiling = (float(np.median(latencies)) * 1e3, 8 * done / args.duration)
    finally:
        worker.proc.kill()
        worker.proc.wait()
    return cells


# --- report ------------------------------------------------------------------------------------


def _find(cells: list[Cell], model: str, path: str, batching: str, threads: int) -> Cell:
    key = (model, path, batching, threads)
    return next(c for c in cells if (c.model, c.path, c.batching, c.concurrency) == key)


def _row(c: Cell, cells: list[Cell]) -> str:
    base = _find(cells, c.model, "in-process", "-", c.concurrency)
    overhead = "" if c is base else f"{c.p50_ms - base.p50_ms:+.2f}"
    per_call = "" if np.isnan(c.rows_per_call) else f"{c.rows_per_call:.1f}"
    return (
        f"| {c.model} | {c.path} | {c.batching} | {c.concurrency} | {c.p50_ms:.2f} | "
        f"{c.p99_ms:.2f} | {c.qps:.0f} | {c.n} | {overhead} | {per_call} |"
    )


def targets(cells: list[Cell]) -> list[str]:
    lines = []
    for model, path in (("mobilenet_v2", "gRPC"), ("tiny", "REST")):
        base = _find(cells, model, "in-process", "-", 1).p50_ms
        over = _find(cells, model, path, "off", 1).p50_ms - base
        floor = ""
        if path == "gRPC":
            bare = _find(cells, model, "bare gRPC", "off", 1).p50_ms - base
            floor = f"; bare grpcio server {bare:+.2f} ms, sharedserve's share {over - bare:+.2f}"
        lines.append(
            f"- **{'PASS' if over <= 1.0 else 'MISS'}** {path} p50 overhead, {model}, 1 client, "
            f"batching off: {over:.2f} ms (target <= 1.0 ms{floor})"
        )
    off, on = (_find(cells, "mobilenet_v2", "gRPC", b, 8) for b in ("off", "on"))
    ok = on.qps >= 1.5 * off.qps and on.p99_ms <= off.p99_ms
    lines.append(
        f"- **{'PASS' if ok else 'MISS'}** batching on vs off, gRPC, mobilenet_v2, 8 clients: "
        f"{on.qps / off.qps:.2f}x QPS ({on.qps:.0f} vs {off.qps:.0f}), p99 {on.p99_ms:.1f} vs "
        f"{off.p99_ms:.1f} ms (target >= 1.5x at no worse p99)"
    )
    return lines


def report(cells: list[Cell], args: argparse.Namespace) -> str:
    head = "| model | path | batching | clients | p50 ms | p99 ms | QPS | requests | p50 "
    head += "overhead ms | rows/model call |"
    lines = [
        *heading("Server overhead: REST and gRPC vs the in-process model call", PACKAGES),
        "",
        f"Batch 1, closed loop; each row is {args.duration:g} s of requests measured in "
        f"{args.rounds} slices alternating with the other paths ({args.warmup:g} s warm-up "
        f"first, {args.rewarm:g} s before each later slice). Batching on means `--enable-batching "
        f"--max-batch-size 8 --batch-timeout-micros {args.batch_timeout_micros}`. p50/p99 are "
        "exact (numpy percentiles of every request's latency); *p50 overhead* is the row's p50 "
        "minus the in-process p50 at the same client count; *rows/model call* is the mean batch "
        "the server ran while the row was measured (from its `/metrics`). *bare gRPC* is the "
        "floor: grpcio's synchronous server in the in-process worker, decoding `tensor_content` "
        "and calling the same backend in its own worker thread, with no validation, metrics, "
        "event loop or batching. The client threads share the machine's cores with the server.",
        "",
        head,
        "|---" * (head.count("|") - 1) + "|",
        *(_row(c, cells) for c in cells),
        "",
    ]
    if getattr(args, "decode", None):
        size, parse, to_numpy = args.decode
        rest = _find(cells, "mobilenet_v2", "REST", "off", 1).p50_ms
        total = (parse + to_numpy) * 1e3
        per_call, rows_s = args.ceiling
        batch_1 = _find(cells, "mobilenet_v2", "in-process", "-", 8).qps
        grpc_off = _find(cells, "mobilenet_v2", "gRPC", "off", 8).qps
        lines += [
            f"mobilenet_v2 REST JSON decode of the {size / 2**20:.1f} MiB body (`codec`, timed in "
            f"the in-process worker, median of 30): parse {parse * 1e3:.1f} ms + to numpy "
            f"{to_numpy * 1e3:.1f} ms = {total:.1f} ms, **{100 * total / rest:.0f}%** of the "
            f"REST p50 ({rest:.1f} ms, 1 client, batching off).",
            "",
            f"Batching ceiling: in-process, one call of 8 rows takes {per_call:.1f} ms, "
            f"{rows_s:.0f} rows/s: {rows_s / batch_1:.2f}x the in-process QPS of 8 clients at "
            f"batch 1, {rows_s / grpc_off:.2f}x the server's gRPC QPS at 8 clients with batching "
            "off. Batching cannot serve more rows than this however little it costs itself.",
            "",
        ]
    return "\n".join([*lines, "Targets:", "", *targets(cells), ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the Markdown report here")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds measured per row")
    parser.add_argument("--rounds", type=int, default=4, help="slices each row is measured in")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before a row")
    parser.add_argument("--rewarm", type=float, default=0.5, help="seconds before a later slice")
    parser.add_argument("--batch-timeout-micros", type=int, default=2000)
    parser.add_argument("--in-process-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_process_worker:
        in_process_worker(args.in_process_worker)
        return
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="sharedserve-bench-") as tmp:
        models = Path(tmp) / "models"
        build = [sys.executable, "-m", "sharedserve", "models", "build", *MODELS, "--out"]
        subprocess.run([*build, str(models)], check=True, capture_output=True)
        for name in MODELS:
            cells += measure_model(name, models / name, args, Path(tmp) / "server.log")
    publish(report(cells, args), args.out)


if __name__ == "__main__":
    main()

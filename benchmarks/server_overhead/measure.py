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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from machine import heading, publish  # benchmarks/machine.py, beside this script

# Input name and shape of a row, per example model (sharedserve.models.catalog).
MODELS = {
    "tiny": ("x", (8,)),
    "mobilenet_v2": ("images", (224, 224, 3)),
    "resnet50": ("images", (224, 224, 3)),
}
CONCURRENCY = (1, 8)
CEILING_ROWS = 8  # the batch of the batching ceiling, = --max-batch-size with batching on
PACKAGES = (
    *("sharedserve", "tensorflow", "torch", "grpcio", "protobuf"),
    *("fastapi", "starlette", "uvicorn", "httptools", "uvloop", "numpy", "orjson", "pysimdjson"),
)
DECODE_FIELDS = ("bytes", "parse_s", "to_numpy_s", "direct_parse_s", "direct_to_numpy_s")
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
    from sharedserve.config import NO_CAP
    from sharedserve.limits.cpu import resolve_cpu_limit, thread_pool_sizes
    from sharedserve.limits.gpu import resolve_cap
    from sharedserve.server.version.backends import make_backend
    from sharedserve.server.version.backends.base import RuntimeConfig, warm_up
    from sharedserve.server.version.source import find_model
    from sharedserve.server.wire.tfserving import codec

    backend = make_backend(find_model(model_dir))
    cap = resolve_cap(NO_CAP, None)
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
        # The JSON decode of the REST body: parse, then to numpy (with freeing what the parse
        # made: each path pays for its own objects, not the other's); medians of 30. By the
        # general path (orjson, then numpy: the server's before) and the direct one (the
        # server's now), interleaved so that a shared machine's drift lands on both.
        body, signature = rest_body(inputs[key]), backend.signatures()["serving_default"]
        times = []
        for _ in range(30):
            row = []
            for parse in (codec.parse_json_body, codec.parse_predict_body):
                t0 = time.perf_counter()
                payload = parse(body)
                t1 = time.perf_counter()
                request = codec.decode_predict_request(payload, signature)
                del payload
                row += [t1 - t0, time.perf_counter() - t1]
                del request
            times.append(row)
        print(json.dumps([len(body), *np.median(times, axis=0).tolist()]), flush=True)


def bare_grpc_server(backend: Any) -> tuple[Any, int]:
    """The floor: grpcio's synchronous server around the same backend call, started; its port.

    No validation, metrics, event loop, thread hand-off or batching: the handler runs the model in
    grpcio's own worker thread. What the real server costs beyond this row is sharedserve's share.
    """
    from concurrent import futures

    import grpc

    from sharedserve.server.protos.tfserving import PREDICTION_SERVICE
    from sharedserve.server.protos.tfserving import tf_serving_pb2 as pb
    from sharedserve.server.wire.tfserving.tensor_proto import from_tensor_proto, to_tensor_proto

    signature = backend.signatures()["serving_default"]

    def predict(request: Any, context: Any) -> Any:
        inputs = {k: from_tensor_proto(v) for k, v in request.inputs.items()}
        response = pb.PredictResponse()
        for k, v in backend.predict(signature, inputs).items():
            to_tensor_proto(v, response.outputs[k])
        return response

    handler = grpc.unary_unary_rpc_method_handler(
        predict,
        request_deserializer=pb.PredictRequest.FromString,
        response_serializer=pb.PredictResponse.SerializeToString,
    )
    options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.so_reuseport", 0)]
    server = grpc.server(futures.ThreadPoolExecutor(max(CONCURRENCY)), options=options)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(PREDICTION_SERVICE, {"Predict": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, int(port)


def _model_call(backend: Any, inputs: dict[str, np.ndarray]) -> MakeCall:
    signature = backend.signatures()["serving_default"]
    return lambda: lambda: backend.predict(signature, inputs)


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
    """TF Serving's REST predict with a JSON body."""
    return http_client(
        port, f"/v1/models/{name}:predict", body, {"Content-Type": "application/json"}
    )


def oip_rest_client(port: int, name: str, key: str, array: np.ndarray) -> MakeCall:
    """The Open Inference Protocol's REST infer with the binary tensor extension both ways (the
    bench's own body, which is what Triton's client sends by default)."""
    from sharedserve.bench.payload import oip_rest_request

    body, headers = oip_rest_request({key: array})
    return http_client(port, f"/v2/models/{name}/infer", body, headers)


def http_client(port: int, path: str, body: bytes, headers: dict[str, str]) -> MakeCall:

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

    from sharedserve.server.protos.tfserving import PREDICT_METHOD
    from sharedserve.server.protos.tfserving import tf_serving_pb2 as pb
    from sharedserve.server.wire.tfserving.tensor_proto import to_tensor_proto

    request = pb.PredictRequest()
    request.model_spec.name = name
    to_tensor_proto(array, request.inputs[key])  # binary tensor_content
    options = [("grpc.max_receive_message_length", -1), ("grpc.use_local_subchannel_pool", 1)]

    def make_call() -> Callable[[], object]:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=options)
        predict = channel.unary_unary(
            PREDICT_METHOD,
            request_serializer=pb.PredictRequest.SerializeToString,
            response_deserializer=pb.PredictResponse.FromString,
        )
        return lambda: predict(request, timeout=60)

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
                        print(_row(cells[-1], cells), flush=True)
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


def targets(cells: list[Cell]) -> list[dict[str, Any]]:
    """The targets that apply to the models measured: REST on ``tiny``, gRPC and batching on
    the image models. Each: what, the figure, the target, whether it was met."""
    found: list[dict[str, Any]] = []
    for model in dict.fromkeys(c.model for c in cells):
        base = _find(cells, model, "in-process", "-", 1).p50_ms
        path = "REST" if model == "tiny" else "gRPC"
        over = _find(cells, model, path, "off", 1).p50_ms - base
        note = ""
        if path == "gRPC":
            bare = _find(cells, model, "bare gRPC", "off", 1).p50_ms - base
            note = f"bare grpcio server {bare:+.2f} ms, sharedserve's share {over - bare:+.2f}"
        what = f"{path} p50 overhead, {model}, 1 client, batching off"
        found.append(
            {
                "what": what,
                "value": f"{over:.2f} ms",
                "target": "<= 1.0 ms",
                "met": bool(over <= 1.0),
            }
        )
        if note:
            found[-1]["note"] = note
        if model == "tiny":
            continue
        off, on = (_find(cells, model, "gRPC", b, max(CONCURRENCY)) for b in ("off", "on"))
        ratio = on.qps / off.qps
        found.append(
            {
                "what": f"batching on vs off, gRPC, {model}, {max(CONCURRENCY)} clients",
                "value": f"{ratio:.2f}x QPS ({on.qps:.0f} vs {off.qps:.0f}), p99 "
                f"{on.p99_ms:.1f} vs {off.p99_ms:.1f} ms",
                "target": ">= 1.5x QPS at no worse p99",
                "met": bool(ratio >= 1.5 and on.p99_ms <= off.p99_ms),
            }
        )
    return found


def _target_line(t: dict[str, Any]) -> str:
    note = f"; {t['note']}" if "note" in t else ""
    verdict = "PASS" if t["met"] else "MISS"
    return f"- **{verdict}** {t['what']}: {t['value']} (target {t['target']}{note})"


def _extras(cells: list[Cell], args: argparse.Namespace) -> list[str]:
    """Per image model: the REST decode share, and the batching ceiling beside the server."""
    lines = []
    for model, times in args.decode.items():
        if model == "tiny":
            continue
        rest = _find(cells, model, "REST", "off", 1).p50_ms
        binary = _find(cells, model, "OIP REST binary", "off", 1).p50_ms
        base = _find(cells, model, "in-process", "-", 1).p50_ms
        lines += [
            f"{model}, the Open Inference Protocol's binary tensor extension against TF "
            f"Serving's JSON body (same server, same run, 1 client, batching off): p50 "
            f"{binary:.1f} ms vs {rest:.1f} ms, overhead over the in-process call "
            f"**{binary - base:+.1f} ms vs {rest - base:+.1f} ms**.",
            "",
            f"{_decode_line(model, times)}; the direct decoder's is "
            f"**{100 * (times[3] + times[4]) * 1e3 / rest:.0f}%** of the REST p50 ({rest:.1f} ms, "
            "1 client, batching off), which it served.",
            "",
        ]
    head = "| model | in-process batch-8 call ms | ceiling rows/s | in-process 8 clients QPS "
    head += "| gRPC off QPS | gRPC on QPS | on / ceiling |"
    rows = []
    for model, (per_call, rows_s) in args.ceiling.items():
        n = max(CONCURRENCY)
        batch_1 = _find(cells, model, "in-process", "-", n).qps
        off, on = (_find(cells, model, "gRPC", b, n).qps for b in ("off", "on"))
        rows.append(
            f"| {model} | {per_call:.2f} | {rows_s:.0f} | {batch_1:.0f} | {off:.0f} | {on:.0f} | "
            f"{on / rows_s:.2f} |"
        )
    return [
        *lines,
        f"Batching ceiling: one in-process call of {CEILING_ROWS} rows, back to back; no "
        "server can serve more rows than this however little batching costs. Beside it what "
        f"the server reached over gRPC with {max(CONCURRENCY)} clients, batching off and on.",
        "",
        head,
        "|---" * (head.count("|") - 1) + "|",
        *rows,
        "",
    ]


def _decode_line(model: str, times: list[float]) -> str:
    size, parse, to_numpy, direct_parse, direct_to_numpy = times
    general, direct = (parse + to_numpy) * 1e3, (direct_parse + direct_to_numpy) * 1e3
    return (
        f"{model} REST JSON decode of the {size / 2**20:.1f} MiB body (`codec`, timed in the "
        f"in-process worker, median of 30, the two decoders interleaved): general path "
        f"(orjson, then numpy; before) parse {parse * 1e3:.1f} ms + to numpy "
        f"{to_numpy * 1e3:.1f} ms = {general:.1f} ms; direct (simdjson into numpy, "
        f"`json_arrays`; now) parse {direct_parse * 1e3:.1f} ms + to numpy "
        f"{direct_to_numpy * 1e3:.1f} ms = {direct:.1f} ms, **{general / direct:.1f}x** faster"
    )


def decode_report(args: argparse.Namespace) -> str:
    """``--decode-only``: the decode figures alone."""
    lines = [*heading("REST JSON decode: the general path and the direct decoder", PACKAGES), ""]
    for model, times in args.decode.items():
        lines += [_decode_line(model, times) + ".", ""]
    return "\n".join(lines)


def report(cells: list[Cell], args: argparse.Namespace) -> str:
    head = "| model | path | batching | clients | p50 ms | p99 ms | QPS | requests | p50 "
    head += "overhead ms | rows/model call |"
    lines = [
        *heading("Server overhead: REST and gRPC vs the in-process model call", PACKAGES),
        "",
        f"Framework `{args.framework}`. Batch 1, closed loop; each row is {args.duration:g} s of "
        f"requests measured in {args.rounds} slices alternating with the other paths "
        f"({args.warmup:g} s warm-up first, {args.rewarm:g} s before each later slice). Batching "
        f"on means `--enable-batching --max-batch-size {CEILING_ROWS} --batch-timeout-micros "
        f"{args.batch_timeout_micros}`. p50/p99 are "
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
        *_extras(cells, args),
    ]
    return "\n".join([*lines, "Targets:", "", *map(_target_line, targets(cells)), ""])


def figures(cells: list[Cell], args: argparse.Namespace) -> dict[str, Any]:
    """Everything measured, for ``--json``."""
    return {
        "framework": args.framework,
        "settings": {
            k: getattr(args, k)
            for k in ("duration", "rounds", "warmup", "rewarm", "batch_timeout_micros")
        },
        "cells": [
            {**asdict(c), "rows_per_call": None if np.isnan(c.rows_per_call) else c.rows_per_call}
            for c in cells
        ],
        "decode": {m: dict(zip(DECODE_FIELDS, v, strict=True)) for m, v in args.decode.items()},
        "ceiling": {
            m: {"rows": CEILING_ROWS, "call_ms": v[0], "rows_per_s": v[1]}
            for m, v in args.ceiling.items()
        },
        "targets": targets(cells),
    }


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

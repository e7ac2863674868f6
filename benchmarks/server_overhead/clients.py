"""The served paths of server_overhead's measure.py: a real ``sharedserve serve`` and its REST,
OIP REST binary and gRPC clients, each measured with the server's own count of rows per call."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from closed_loop import MakeCall, Measure, closed_loop

from sharedserve.pack.probe import free_port, model_state


@contextmanager
def serving(model_dir: Path, extra: list[str], log: Path) -> Iterator[tuple[int, int]]:
    rest, grpc_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "sharedserve", "serve", "--model", str(model_dir)]
    cmd += ["--host", "127.0.0.1", "--rest-port", str(rest), "--grpc-port", str(grpc_port), *extra]
    with log.open("ab") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        url = f"http://127.0.0.1:{rest}"
        while model_state(url, model_dir.name, timeout=10) != "AVAILABLE":
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

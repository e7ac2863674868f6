"""The in-process paths of server_overhead's measure.py: a worker subprocess that loads the model
as the server does and calls it (``in-process``), the least gRPC server around the same call
(``bare gRPC``), and the JSON decode timed there (``--decode-only``)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from closed_loop import (
    CONCURRENCY,
    MODELS,
    MakeCall,
    Measure,
    closed_loop,
    example_input,
    rest_body,
)

# The worker is the entry script run with its hidden flag, so the worker's command is the one
# the script has always run.
ENTRY = Path(__file__).with_name("measure.py")


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
        cmd = [sys.executable, str(ENTRY), "--in-process-worker", str(model_dir)]
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

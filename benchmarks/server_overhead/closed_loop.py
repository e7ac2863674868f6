"""The load of server_overhead's measure.py: the models, one row's figures (``Cell``), and the
closed loop every path is driven by, in the worker and against the servers alike."""

from __future__ import annotations

import gc
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# Input name and shape of a row, per example model (sharedserve.models.catalog).
MODELS = {
    "tiny": ("x", (8,)),
    "mobilenet_v2": ("images", (224, 224, 3)),
    "resnet50": ("images", (224, 224, 3)),
}
CONCURRENCY = (1, 8)
CEILING_ROWS = 8  # the batch of the batching ceiling, = --max-batch-size with batching on
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

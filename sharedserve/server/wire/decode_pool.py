"""Large JSON bodies parsed in worker processes, off this process's interpreter lock.

Why: parsing a 3 MiB JSON body of numbers takes ~8 ms of the interpreter lock even on
``json_arrays``' fast path (simdjson, a piece at a time), and every thread of a shared process
waits for that lock: beside a model sent such bodies, a light model's requests waited for it at
each hop between threads (``benchmarks/results/multimodel_cpu.md``). In a worker process the
parse holds that process's lock; this one copies the body out and the arrays back, a fraction
of a millisecond each, most of it in system calls that let go of the lock.

Only bodies of ``min_bytes`` or more go: below that the trip costs what it saves. The worker
runs ``json_arrays.parse`` alone; a body it declines (anything but plain numeric arrays) comes
back as None and is parsed whole here, so answers and error messages are the ones the process
gives without workers. Its CPU time is charged to the request's model all the same
(``metrics.spent_elsewhere``). The workers are started at the first large body (spawned, not
forked: a fork of a process running TensorFlow's threads is not safe), and a pool whose worker
died is replaced, the body parsed here meanwhile.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from sharedserve.server.metrics import spent_elsewhere
from sharedserve.server.wire import json_arrays

__all__ = ["MIN_OFFLOAD_BYTES", "DecodePool", "Parse", "decode_workers"]

log = logging.getLogger(__name__)

MIN_OFFLOAD_BYTES = 256 * 1024
"""Bodies this large or larger are parsed in a worker: ~0.6 ms of the lock here, where the
trip (two copies and a wake-up, ~0.1 ms) is small beside it."""


def decode_workers(slots: int) -> int:
    """Worker processes for ``slots`` model-call slots: one per two, at least one. Each holds
    ~55 MiB and up to ~80 once parsing (numpy, the parsers, the server package it imports), so
    not one per slot: one parses ~160 bodies of 3 MiB a second, more than two cores serve
    models sent such bodies."""
    return max(1, slots // 2)


Places = Callable[[Any], Iterable[tuple[Any, Any]]]
Parse = Callable[..., Any]
"""``json_arrays.parse``'s signature: (body, keys, places, end=None) -> value or None."""


def _parse_there(body: bytes, keys: tuple[bytes, ...], places: Places) -> tuple[Any, float]:
    """In a worker: the fast path's value with its arrays' sources dropped (the caller has the
    body; sending it back would double the trip), and the CPU seconds it took."""
    started = time.thread_time()
    value = json_arrays.parse(body, keys, places)
    if value is not None:
        json_arrays.resource(value, places, b"")
    return value, time.thread_time() - started


class DecodePool:
    """``parse`` as ``json_arrays.parse`` does, a large body's in a worker process."""

    def __init__(self, workers: int, min_bytes: int = MIN_OFFLOAD_BYTES) -> None:
        self.workers, self.min_bytes = workers, min_bytes
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False

    def parse(
        self,
        body: bytes | bytearray,
        keys: tuple[bytes, ...],
        places: Places,
        end: int | None = None,
    ) -> Any:
        size = len(body) if end is None else end
        executor = self._started() if size >= self.min_bytes else None
        if executor is None:
            return json_arrays.parse(body, keys, places, end)
        try:
            job = executor.submit(_parse_there, bytes(memoryview(body)[:size]), keys, places)
            value, seconds = job.result()
        except (BrokenProcessPool, RuntimeError):  # a worker died, or the pool is closing
            self._forget(executor)
            return json_arrays.parse(body, keys, places, end)
        spent_elsewhere(seconds)
        if value is not None:
            json_arrays.resource(value, places, body)
        return value

    def _started(self) -> ProcessPoolExecutor | None:
        with self._lock:
            if self._executor is None and not self._closed:
                self._executor = ProcessPoolExecutor(
                    self.workers, mp_context=multiprocessing.get_context("spawn")
                )
            return self._executor

    def _forget(self, executor: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is executor:
                self._executor = None
                log.warning("a JSON decoding worker stopped; starting another")
        executor.shutdown(wait=False, cancel_futures=True)

    def worker_pids(self) -> list[int]:
        """The workers' process IDs (none before the first large body)."""
        with self._lock:
            executor = self._executor
        processes = getattr(executor, "_processes", None) or {}
        return sorted(processes)

    def running_workers(self) -> int:
        return len(self.worker_pids())

    def close(self) -> None:
        """The workers stopped; a large body is parsed in this process from now on."""
        with self._lock:
            self._closed, executor, self._executor = True, self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

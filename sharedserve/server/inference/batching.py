"""Dynamic batching: merge concurrent requests into one framework call, TF Serving style.

Why: a GPU often runs a batch of 32 rows in not much more time than one, so on a shared GPU
merging requests is what buys throughput. The rules follow TF Serving's ``SharedBatchScheduler``
so that its tuning advice and parameter files carry over:

* requests that can merge (``batching_policy.batch_key``) fill one open batch; it closes when full
  (``max_batch_size`` rows) and is due once its first request has waited ``batch_timeout_micros``;
  a due batch runs as soon as one of ``num_batch_threads`` is free, and keeps filling until then;
* at most ``max_enqueued_batches`` batches wait (open ones included): a request that needs one
  more is refused at once with ResourceExhausted, so overload shows as fast 503s a client can
  retry elsewhere instead of latency that grows without bound;
* the framework call blocks, so it runs in a thread, off the event loop: the server's shared
  scheduler's (``execute``; a batch takes its model's fair turn there like any model call), else
  a pool of the batcher's own; merging and splitting run there too, since concatenating large
  inputs is not free either. ``num_batch_threads`` is then how many of the model's batches may
  be running or waiting for a thread at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from sharedserve.errors import InvalidInput, NotReady, ResourceExhausted, SharedServeError
from sharedserve.server.inference.batching_policy import (
    BatchingSettings,
    BatchKey,
    batch_key,
    merge,
    request_rows,
    split,
    take_batch,
)

__all__ = ["Batcher", "BatcherStats", "Execute", "RunBatch"]

log = logging.getLogger(__name__)

RunBatch = Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]]
"""(signature name, merged inputs) -> outputs with the same dim 0; blocking."""

Execute = Callable[..., Awaitable[list[dict[str, np.ndarray]]]]
"""(blocking function, its arguments) -> its result, run in some thread off the loop."""


@dataclass(frozen=True)
class BatcherStats:
    """Counters since start, for ``/limits``-style introspection and tests."""

    batches: int = 0
    """Batches run (sent to the framework)."""
    requests: int = 0
    """Requests that ran inside those batches."""
    rows: int = 0
    """Rows (dim 0) those batches held, summed."""


class _State(str, Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


@dataclass(eq=False)
class _Request:
    inputs: dict[str, np.ndarray]
    rows: int
    future: asyncio.Future[dict[str, np.ndarray]]


@dataclass(eq=False)
class _Batch:
    key: BatchKey
    signature_name: str
    due: float
    """Loop time from which it may run unfilled; set to the closing time when it fills up."""
    requests: list[_Request] = field(default_factory=list)
    rows: int = 0


class Batcher:
    """Queues requests, merges them into batches, runs each batch once, hands rows back."""

    def __init__(
        self,
        run_batch: RunBatch,
        settings: BatchingSettings,
        on_batch: Callable[[int], None] | None = None,
        execute: Execute | None = None,
    ) -> None:
        """``on_batch(rows)`` is called on the event loop as each batch starts (a histogram);
        ``execute`` runs each batch (None: a thread pool of ``num_batch_threads``)."""
        settings.validate()
        self._run_batch = run_batch
        self._settings = settings
        self._on_batch = on_batch
        self._execute_in = execute
        self._timeout_s = settings.batch_timeout_micros / 1_000_000
        self._open: dict[BatchKey, _Batch] = {}
        self._closed: deque[_Batch] = deque()
        self._state = _State.NEW
        self._wakeup = asyncio.Event()
        self._workers: list[asyncio.Task[None]] = []
        self._executor: ThreadPoolExecutor | None = None
        self._stats = BatcherStats()

    @property
    def queue_depth(self) -> int:
        """Requests waiting for their batch to run (not counting those running)."""
        waiting = itertools.chain(self._open.values(), self._closed)
        return sum(not r.future.done() for batch in waiting for r in batch.requests)

    @property
    def stats(self) -> BatcherStats:
        return self._stats

    async def start(self) -> None:
        """Start the batch threads; call from the event loop that will submit."""
        if self._state is _State.RUNNING:
            return
        if self._state is _State.STOPPED:
            raise NotReady("this batcher was stopped; create a new one")
        threads = self._settings.num_batch_threads
        if self._execute_in is None:
            self._executor = ThreadPoolExecutor(threads, thread_name_prefix="sharedserve-batch")
        self._workers = [
            asyncio.create_task(self._worker(), name=f"sharedserve-batch-{i}")
            for i in range(threads)
        ]
        self._state = _State.RUNNING

    async def stop(self) -> None:
        """Refuse new requests and fail every unfinished one with NotReady.

        Batches already in the framework are abandoned, not waited for: a stuck framework call
        must not hang shutdown. Their threads finish in the background and are discarded.
        """
        if self._state is not _State.RUNNING:
            self._state = _State.STOPPED
            return
        self._state = _State.STOPPED
        for worker in self._workers:
            worker.cancel()  # a worker running a batch fails its requests as it unwinds
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        stopped = NotReady("the server is stopping; the request was not run")
        for batch in [*self._open.values(), *self._closed]:
            _fail(batch.requests, stopped)
        self._open.clear()
        self._closed.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(
        self, signature_name: str, inputs: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """Run ``inputs`` inside some batch; returns this request's own rows of the outputs.

        Raises InvalidInput (no common dim 0, or more rows than ``max_batch_size``),
        ResourceExhausted (queue full, at once), NotReady (not running), or whatever the batch
        raised.
        """
        if self._state is not _State.RUNNING:
            raise NotReady("batching is not running")
        rows = request_rows(inputs)
        limit = self._settings.max_batch_size
        if rows > limit:
            raise InvalidInput(
                f"the request has {rows} rows, more than the batch limit ({limit}, "
                f"max_batch_size); send it in smaller requests"
            )
        key = batch_key(signature_name, inputs)
        loop = asyncio.get_running_loop()
        batch = self._open.get(key)
        if batch is None or take_batch([batch.rows, rows], limit) < 2:
            waiting = len(self._open) + len(self._closed)
            if waiting >= self._settings.max_enqueued_batches:
                raise ResourceExhausted(
                    f"the batching queue is full ({waiting} batches waiting, "
                    f"max_enqueued_batches); retry later"
                )
            if batch is not None:
                self._close(batch, loop.time())
            batch = _Batch(key, signature_name, due=loop.time() + self._timeout_s)
            self._open[key] = batch
        request = _Request(inputs, rows, loop.create_future())
        batch.requests.append(request)
        batch.rows += rows
        if batch.rows >= limit:
            self._close(batch, loop.time())
        self._wakeup.set()
        # A caller cancelled here cancels only its own future; its batch skips it when it runs.
        return await request.future

    def _close(self, batch: _Batch, now: float) -> None:
        del self._open[batch.key]
        batch.due = min(batch.due, now)
        self._closed.append(batch)

    def _next_due(self, now: float) -> _Batch | None:
        """The batch that has been due longest, or None; removed from the queue."""
        candidates = [batch for batch in self._open.values() if batch.due <= now]
        if self._closed:
            candidates.append(self._closed[0])
        if not candidates:
            return None
        batch = min(candidates, key=lambda b: b.due)
        if self._closed and batch is self._closed[0]:
            self._closed.popleft()
        else:
            del self._open[batch.key]
        return batch

    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = self._next_due(loop.time())
            if batch is not None:
                await self._run(batch)
                continue
            # Nothing due: sleep until a submit or the earliest open batch's deadline.
            self._wakeup.clear()
            deadline = min((b.due for b in self._open.values()), default=None)
            timeout = None if deadline is None else max(deadline - loop.time(), 0.0)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _run(self, batch: _Batch) -> None:
        live = [r for r in batch.requests if not r.future.done()]  # drop cancelled callers
        if not live:
            return
        rows = sum(r.rows for r in live)
        stats = self._stats
        self._stats = BatcherStats(stats.batches + 1, stats.requests + len(live), stats.rows + rows)
        if self._on_batch is not None:
            try:
                self._on_batch(rows)
            except Exception:
                log.exception("batching: on_batch hook failed; the batch runs regardless")
        inputs = [r.inputs for r in live]
        try:
            if self._execute_in is not None:
                outputs = await self._execute_in(self._execute, batch.signature_name, inputs)
            else:
                loop = asyncio.get_running_loop()
                outputs = await loop.run_in_executor(
                    self._executor, self._execute, batch.signature_name, inputs
                )
        except asyncio.CancelledError:
            _fail(live, NotReady("the server stopped while this request's batch was running"))
            raise
        except SharedServeError as e:
            _fail(live, e)
        except Exception as e:
            wrapped = SharedServeError(f"batched model call failed: {type(e).__name__}: {e}")
            wrapped.__cause__ = e
            _fail(live, wrapped)
        else:
            for request, result in zip(live, outputs, strict=True):
                if not request.future.done():
                    request.future.set_result(result)

    def _execute(
        self, signature_name: str, inputs: list[dict[str, np.ndarray]]
    ) -> list[dict[str, np.ndarray]]:
        """In a batch thread: merge, call the framework, cut the outputs back per request."""
        merged, sizes = merge(inputs)
        return split(self._run_batch(signature_name, merged), sizes)


def _fail(requests: list[_Request], error: BaseException) -> None:
    for request in requests:
        if not request.future.done():
            request.future.set_exception(error)

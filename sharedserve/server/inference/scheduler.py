"""The one executor of model calls in a server process, shared fairly by its models.

Why: before it, unbatched calls ran in anyio's worker threads, one FIFO queue for every model,
so a model flooded with requests queued its backlog ahead of another model's next request, and
each batched model had threads of its own that no one weighed against the rest. Now every model
call (an unbatched request, or a batch) is queued per model and taken by ``slots`` threads in
weighted-fair order (``fair_queue.py``): a model with a burst gets its weight's share of the
threads, not all of them, and an idle model's next call runs as soon as a thread is free.

``slots``, the calls that run at once in fair turns: the CPU limit's whole cores
(``limits.cpu.thread_pool_sizes``), and at least 2. As many calls as cores keep the cores busy
(each call also spreads over the framework's intra-op threads, and the GIL is released inside
the framework), while calls past that would only wait inside the OS scheduler, where fairness
cannot reach them. At least 2, so that one long call never holds every other model back.

A model with no call running never waits for another model's calls: when every slot is busy,
its next call starts at once on a spare thread (``SPARE_THREADS`` of them). Why: fair order
decides who is next, but next still waits for a slot to free, which beside a model whose calls
take tens of milliseconds is tens of milliseconds added to a light model's every request; as
many processes on the same CPUs would not add it, as the OS shares the cores between their
threads at once. A spare thread gives each model that same sharing, one call per model, while
a busy model's backlog still waits for its fair turns: it holds a spare thread only while it
had nothing running, so a burst gets one extra call at most. Not two or so spares: traffic
spread over many models (a long tail, or paging) has most of them with nothing running, and
each would take a spare that a light model then waits for (a ``tiny`` beside requests spread
over 20 ``mobilenet_v2``: p99 73 ms with 2 spares, as the same in two processes 23 ms).

Each model also has ``max_inflight`` in its ``Share`` (its requests queued or running, batcher
queue included), which the inference path holds it to (``path.py``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from sharedserve.errors import NotReady
from sharedserve.server.inference.fair_queue import FairQueue
from sharedserve.server.settings import ServerSettings

__all__ = [
    "DEFAULT_MAX_INFLIGHT",
    "DEFAULT_SHARE",
    "SPARE_THREADS",
    "ModelLane",
    "Scheduler",
    "Share",
    "model_call_slots",
    "model_call_threads",
]

R = TypeVar("R")

DEFAULT_MAX_INFLIGHT = ServerSettings.max_inflight_per_model
"""Generous: a server holds this many requests of one model only when it is far behind; the
limit exists to bound memory and to make overload a fast 503, not to shape normal traffic."""

HISTORY = 4096
"""Models of the last calls started, in order: the scheduler's own record (tests, debugging)."""


def model_call_slots(cores: int) -> int:
    """Model calls that run at once in fair turns: one per whole core of the CPU limit, at
    least 2."""
    return max(2, cores)


SPARE_THREADS = 32
"""Calls of models with nothing else running, run beside the slots: as many models' at once
(past that they wait for a fair turn); threads start only as they are needed."""


def model_call_threads(slots: int) -> int:
    """Model calls that may run at once: the slots, and the spare threads."""
    return slots + SPARE_THREADS


@dataclass(frozen=True)
class Share:
    """A model's part of the shared executor."""

    weight: float = 1.0
    """Its share of the threads against other busy models' (2 gets twice 1's calls)."""
    max_inflight: int = DEFAULT_MAX_INFLIGHT
    """Its requests queued or running at most; more are refused at once."""


DEFAULT_SHARE = Share()


@dataclass(eq=False)
class _Call:
    run: Callable[[], Any]
    future: asyncio.Future[Any]
    lane: ModelLane
    queued: float


class ModelLane:
    """One model's way into the scheduler, shared by its versions."""

    def __init__(self, scheduler: Scheduler, name: str, share: Share) -> None:
        self.scheduler, self.name, self.share = scheduler, name, share
        self._on_wait: list[Callable[[float], None]] = []

    async def call(self, run: Callable[..., R], *args: Any) -> R:
        """``run(*args)`` in one of the scheduler's threads, in the model's fair turn."""
        return await self.scheduler.run(self, partial(run, *args))

    @property
    def depth(self) -> int:
        """Model calls waiting for a thread."""
        return self.scheduler.depth(self.name)

    def on_wait(self, observe: Callable[[float], None]) -> None:
        """``observe(seconds)`` each time a call of the model leaves the queue to run."""
        self._on_wait.append(observe)

    def _waited(self, seconds: float) -> None:
        for observe in self._on_wait:
            observe(seconds)


class Scheduler:
    """Per-model queues, ``slots`` threads. Use from one event loop (the server's)."""

    def __init__(self, slots: int, spare: int = SPARE_THREADS) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots, self.spare = slots, spare
        self.started: deque[str] = deque(maxlen=HISTORY)
        """The model of each call as it started, oldest first (the last ``HISTORY``)."""
        self._queue: FairQueue[_Call] = FairQueue()
        self._lanes: dict[str, ModelLane] = {}
        self._running = 0
        self._by_model: dict[str, int] = {}  # calls running, per model with any
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    def lane(self, name: str, share: Share | None = None) -> ModelLane:
        """Model ``name``'s lane, made on first use; ``share`` replaces its share."""
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = ModelLane(self, name, share or Share())
        elif share is not None:
            lane.share = share
        self._queue.set_weight(name, lane.share.weight)
        return lane

    def shares(self) -> dict[str, Share]:
        return {name: lane.share for name, lane in self._lanes.items()}

    def depth(self, name: str) -> int:
        return self._queue.depth(name)

    @property
    def running(self) -> int:
        return self._running

    async def run(self, lane: ModelLane, run: Callable[[], R]) -> R:
        if self._closed:
            raise NotReady("the server is stopping; the request was not run")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._queue.push(lane.name, _Call(run, future, lane, loop.time()))
        self._dispatch(loop)
        # A caller cancelled while queued leaves a done future: _dispatch skips its call.
        return await future

    def running_of(self, name: str) -> int:
        """Model ``name``'s calls running now."""
        return self._by_model.get(name, 0)

    def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        while self._running < self.slots + self.spare:
            if self._running < self.slots:
                popped = self._queue.pop()
            else:  # a spare thread: only for a model with no call running
                popped = self._queue.pop(among=lambda model: model not in self._by_model)
            if popped is None:
                return
            model, call = popped
            if call.future.done():
                continue
            if self._executor is None:
                threads = self.slots + self.spare
                self._executor = ThreadPoolExecutor(threads, "sharedserve-model")
            self._running += 1
            self._by_model[model] = self._by_model.get(model, 0) + 1
            self.started.append(model)
            call.lane._waited(loop.time() - call.queued)
            job = loop.run_in_executor(self._executor, call.run)
            job.add_done_callback(partial(self._finished, loop, call))

    def _finished(
        self, loop: asyncio.AbstractEventLoop, call: _Call, job: asyncio.Future[Any]
    ) -> None:
        self._running -= 1
        model = call.lane.name
        left = self._by_model[model] - 1
        if left:
            self._by_model[model] = left
        else:
            del self._by_model[model]
        if not call.future.done():
            if job.cancelled():
                call.future.set_exception(NotReady("the server stopped before the call ran"))
            elif job.exception() is not None:
                call.future.set_exception(job.exception())  # type: ignore[arg-type]
            else:
                call.future.set_result(job.result())
        elif not job.cancelled():
            job.exception()  # retrieved: a caller gone is no "never retrieved" warning
        if not self._closed:
            self._dispatch(loop)

    def close(self) -> None:
        """Refuse new calls, fail the queued ones; running calls finish in the background."""
        self._closed = True
        stopped = NotReady("the server is stopping; the request was not run")
        for call in self._queue.drain():
            if not call.future.done():
                call.future.set_exception(stopped)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

"""The one path from a request's bytes to its answer, shared by every wire format.

A transport hands over a ``Call``: how to decode its request into a signature and arrays, and how
to encode outputs back. The predictor then decodes, checks the arrays against the signature
(``validate.check_inputs``, the only check), runs the model and encodes. The framework call never
runs on the event loop, and each hop to a thread costs tens of microseconds, most of the overhead
on a small model. So with a heavy codec (JSON: a 3 MB body takes milliseconds) decoding, the
model call and encoding share one worker-thread hop, while a light one (protobuf) decodes and
encodes on the loop around the hop. Every model call, unbatched or a batch, runs through the
process's one ``Scheduler`` (``scheduler.py``), in the model's fair turn; each request holds one
of its model's ``max_inflight`` places from the moment it is routed until it is answered, and
keeps its model resident (``paging.py``) from its admission on, paging it in first if it was out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Protocol, TypeVar

import numpy as np
from anyio import to_thread

from sharedserve.config import BatchingSettings
from sharedserve.errors import NotFound, quoted
from sharedserve.server.inference.batching import Batcher
from sharedserve.server.inference.scheduler import ModelLane, Scheduler, model_call_slots
from sharedserve.server.inference.validate import check_inputs
from sharedserve.server.memory.paging import Memory
from sharedserve.server.memory.tenant import Tenant
from sharedserve.server.metrics.prometheus import ModelSeries
from sharedserve.server.version.model import ServedModel
from sharedserve.server.version.signature import Signature

__all__ = ["Call", "Predictor"]

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
Arrays = dict[str, np.ndarray]


class Call(Protocol[R_co]):
    """One request as a transport sees it."""

    heavy: bool
    """Decoding or encoding may take milliseconds (a large JSON body): keep it off the loop."""

    def decode(self) -> tuple[Signature, Arrays]:
        """The request's signature (looked up through the model) and its inputs, unjudged."""
        ...

    def encode(self, outputs: Arrays) -> R_co:
        """The answer to send, from the model's outputs."""
        ...


class Predictor:
    def __init__(
        self,
        model: ServedModel,
        metrics: ModelSeries,
        batching: BatchingSettings | None = None,
        max_elements: int | None = None,
        *,
        lane: ModelLane | None = None,
        tenant: Tenant | None = None,
    ) -> None:
        """``lane``: the model's lane into the process's scheduler; None (a lone predictor):
        one of a scheduler of its own. ``tenant``: its place in the process's memory
        (``paging.py``); None: one of a memory of its own, without a cap."""
        self.model = model
        self.tenant = tenant or Memory().tenant(model, budget=None, pinned=False)
        self.metrics = metrics
        self.max_elements = max_elements
        self.batching = batching
        self._own_scheduler = lane is None
        if lane is None:
            lane = Scheduler(model_call_slots(1)).lane(model.name)
            metrics.track_queue_depth(lambda: lane.depth)
            lane.on_wait(metrics.observe_queue_wait)
        self.lane = lane
        self.batcher: Batcher | None = None
        self._depth: Callable[[], float] | None = None
        if batching is not None:
            self.batcher = Batcher(
                self._run_batch, batching, on_batch=metrics.observe_batch, execute=lane.call
            )
            batcher = self.batcher
            self._depth = lambda: batcher.queue_depth
            metrics.track_queue_depth(self._depth)
        # Requests in predict() now, so that an unload waits for them (registry.py retires a
        # version, then waits for idle; only then its batcher stops and its backend unloads).
        self._flight = threading.Lock()
        self._in_flight = 0
        self._retired = False
        self._idle = threading.Event()
        self._idle.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def retire(self) -> None:
        """No new request from now on (NotFound, as for a version never served); those in
        flight finish. The registry has stopped routing to it already."""
        with self._flight:
            self._retired = True
            if self._in_flight:
                self._idle.clear()

    def wait_idle(self, timeout_s: float) -> bool:
        """Blocks (a worker thread) until no request is in flight; False if ``timeout_s`` ran
        out first."""
        return self._idle.wait(timeout_s)

    def forget_metrics(self) -> None:
        """Its batcher's queue leaves the model's queue-depth series (the version is gone)."""
        if self._depth is not None:
            self.metrics.forget_queue_depth(self._depth)

    def _run_batch(self, signature_name: str, inputs: Arrays) -> Arrays:
        return self.model.predict(self.model.signature(signature_name), inputs)

    async def start(self) -> None:
        if self.batcher is not None:
            await self.batcher.start()

    async def stop(self) -> None:
        if self.batcher is not None:
            await self.batcher.stop()
        if self._own_scheduler:
            self.lane.scheduler.close()

    async def predict(self, call: Call[R]) -> R:
        """Decode, check, run and encode ``call``; our errors propagate for the transport, and
        ResourceExhausted at once while the model has ``max_inflight`` requests in flight."""
        with self._flight:
            if self._retired:
                model = self.model
                raise NotFound(
                    f"Servable not found for request: Specific({quoted(model.name)}, "
                    f"{model.version})"
                )
            self._in_flight += 1
            self._idle.clear()
        try:
            with self.lane.admit():
                async with self.tenant.use():  # paged in first, if it was out
                    return await self._predict(call)
        finally:
            with self._flight:
                self._in_flight -= 1
                if not self._in_flight:
                    self._idle.set()

    async def _predict(self, call: Call[R]) -> R:
        if call.heavy and self.batcher is None:
            # Decoding a heavy body is the model's work too: it takes its turn with the call.
            return await self.lane.call(self._whole, call)
        if call.heavy:
            signature, inputs = await to_thread.run_sync(self._decoded, call)
        else:
            signature, inputs = self._decoded(call)
        if self.batcher is None:
            outputs = await self.lane.call(self._run, signature, inputs)
        else:
            outputs = await self.batcher.submit(signature.name, inputs)
        if call.heavy:
            return await to_thread.run_sync(partial(call.encode, outputs))
        return call.encode(outputs)

    def _decoded(self, call: Call[R]) -> tuple[Signature, Arrays]:
        signature, inputs = call.decode()
        check_inputs(signature, inputs, self.max_elements)
        self.tenant.check_rows(_rows(inputs))
        return signature, inputs

    def _run(self, signature: Signature, inputs: Arrays) -> Arrays:
        """One unbatched model call, in a scheduler thread, counted as a batch of its rows."""
        outputs = self.model.predict(signature, inputs)
        self.metrics.observe_batch(_rows(inputs))
        return outputs

    def _whole(self, call: Call[R]) -> R:
        signature, inputs = self._decoded(call)
        return call.encode(self._run(signature, inputs))


def _rows(inputs: Arrays) -> int:
    # Lenient on purpose: unbatched (columnar) inputs need not share a dim 0, or have one.
    first = next(iter(inputs.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1

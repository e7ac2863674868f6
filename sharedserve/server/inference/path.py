"""The one path from a request's bytes to its answer, shared by every wire format.

A wire format looks its model version up (``repository``) and hands over a ``Call``: how to
decode its request, given the version's signatures, into a signature and arrays, and how to
encode outputs back. The path admits the request (the model's ``max_inflight``; the version's
in-flight count, which pages it in first where it was out: ``memory``), decodes, checks the
arrays against the signature (``validate.check_inputs``, the only check), runs the model and
encodes.

The framework call never runs on the event loop, and each hop to a thread costs tens of
microseconds, most of the overhead on a small model. So with a heavy codec (JSON: a 3 MB body
takes milliseconds) decoding, the model call and encoding share one worker-thread hop, while a
light one (protobuf) decodes and encodes on the loop around the hop. Every model call,
unbatched or a batch, runs through the process's one ``Scheduler`` (``scheduler.py``), in the
model's fair turn; a batching model's versions each have a ``Batcher`` whose batches are such
calls.

Each phase's CPU time is charged to the request's model on the thread that ran it (decode,
call, encode: ``metrics.CpuSeconds``); a batch is one model's, its merging and splitting part
of its call.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from time import thread_time
from typing import Any, Protocol, TypeVar

import numpy as np
from anyio import to_thread

from sharedserve.errors import ResourceExhausted
from sharedserve.server.inference.batching import Batcher
from sharedserve.server.inference.scheduler import DEFAULT_SHARE, ModelLane, Scheduler, Share
from sharedserve.server.inference.validate import check_inputs
from sharedserve.server.memory import Memory
from sharedserve.server.metrics import CpuPhase, Metrics, taken_elsewhere
from sharedserve.server.version import ModelVersion, Signature

__all__ = ["Call", "InferencePath", "SignatureOf"]

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
Arrays = dict[str, np.ndarray]
SignatureOf = Callable[[str | None], Signature]
"""A version's signature by name (None: its default); NotFound for one it does not have."""


class Call(Protocol[R_co]):
    """One request as a wire format sees it."""

    heavy: bool
    """Decoding or encoding may take milliseconds (a large JSON body): keep it off the loop."""

    def decode(self, signature_of: SignatureOf) -> tuple[Signature, Arrays]:
        """The request's signature (named in the request, or the default) and its inputs,
        unjudged."""
        ...

    def encode(self, outputs: Arrays) -> R_co:
        """The answer to send, from the model's outputs."""
        ...


class InferencePath:
    """Every request of the process, every model: admission, decoding, validation, the model
    call in the scheduler (batched where the model batches), encoding."""

    def __init__(
        self,
        metrics: Metrics,
        memory: Memory,
        slots: int,
        defaults: Share = DEFAULT_SHARE,
        max_elements: int | None = None,
    ) -> None:
        """``slots``: model calls that run at once (``scheduler.model_call_slots``);
        ``defaults``: a model's share where its settings give none; ``max_elements``: the
        most elements a request's tensors may hold together."""
        self.metrics, self.memory, self.defaults = metrics, memory, defaults
        self.cpu = metrics.cpu
        self.max_elements = max_elements
        self.scheduler = Scheduler(slots)
        self._lanes: dict[str, ModelLane] = {}  # by model: a request's is a dict lookup
        self._versions: dict[str, list[ModelVersion]] = {}
        self._batchers: dict[ModelVersion, Batcher] = {}
        self._depths: dict[ModelVersion, Callable[[], float]] = {}

    # -- versions joining and leaving -----------------------------------------------------

    def add(self, version: ModelVersion) -> None:
        """``version`` may be run from now on, in its model's lane (its share from its
        settings), with a batcher of its own where its model batches (a batch never mixes
        versions); the batcher starts with ``start``."""
        lane = self._lane(version)
        self._versions.setdefault(version.name, []).append(version)
        batching = version.settings.batching
        if batching is None:
            return
        series = self.metrics.for_model(version.name)
        batcher = Batcher(
            partial(self._run_batch, version),
            batching,
            on_batch=series.observe_batch,
            execute=partial(lane.call, self._charged, version.name),
        )
        self._batchers[version] = batcher
        self._depths[version] = depth = lambda: float(batcher.queue_depth)
        series.track_queue_depth(depth)

    async def start(self, version: ModelVersion) -> None:
        batcher = self._batchers.get(version)
        if batcher is not None:
            await batcher.start()

    async def remove(self, version: ModelVersion) -> None:
        """``version`` is no longer run: its batcher stops, its queue leaves its model's
        series."""
        versions = self._versions.get(version.name, [])
        self._versions[version.name] = [v for v in versions if v is not version]
        batcher = self._batchers.pop(version, None)
        if batcher is not None:
            await batcher.stop()
            self.metrics.for_model(version.name).forget_queue_depth(self._depths.pop(version))

    async def stop(self) -> None:
        """Every batcher stopped, the scheduler closed: calls still queued fail NotReady."""
        for batcher in list(self._batchers.values()):
            await batcher.stop()
        self.scheduler.close()

    def shares(self) -> dict[str, Share]:
        return self.scheduler.shares()

    def _lane(self, version: ModelVersion) -> ModelLane:
        """The model's lane, its share as its settings say (else as before, else the
        defaults); its series read the lane once, whatever its versions."""
        name, settings = version.name, version.settings
        known = self._lanes.get(name)
        old = self.defaults if known is None else known.share
        share = Share(
            old.weight if settings.weight is None else settings.weight,
            old.max_inflight if settings.max_inflight is None else settings.max_inflight,
        )
        lane = self._lanes[name] = self.scheduler.lane(name, share)
        if known is None:
            series = self.metrics.for_model(name)
            series.track_queue_depth(lambda: lane.depth)
            lane.on_wait(series.observe_queue_wait)
        return lane

    # -- a request ------------------------------------------------------------------------------

    async def infer(self, version: ModelVersion, call: Call[R]) -> R:
        """Decode, check, run and encode ``call`` on ``version``; our errors propagate for the
        wire format, ResourceExhausted at once while its model has ``max_inflight`` requests
        in flight."""
        self._admit(version)
        # No await between the count above and the one below: both on the loop, as one step.
        async with self.memory.use(version):
            return await self._infer(version, call)

    def _admit(self, version: ModelVersion) -> None:
        limit = self._lanes[version.name].share.max_inflight
        inflight = sum(v.inflight for v in self._versions.get(version.name, ()))
        if inflight >= limit:
            raise ResourceExhausted(
                f"model {version.name!r} has {inflight} requests in flight, its limit "
                f"(max_inflight {limit}); retry later"
            )

    async def _infer(self, version: ModelVersion, call: Call[R]) -> R:
        lane, batcher = self._lanes[version.name], self._batchers.get(version)
        if call.heavy and batcher is None:
            # Decoding a heavy body is the model's work too: it takes its turn with the call.
            return await lane.call(self._whole, version, call)
        if call.heavy:
            signature, inputs = await to_thread.run_sync(self._decoded, version, call)
        else:
            signature, inputs = self._decoded(version, call)
        if batcher is None:
            outputs = await lane.call(self._run, version, signature, inputs)
        else:
            outputs = await batcher.submit(signature.name, inputs)
        if call.heavy:
            return await to_thread.run_sync(self._encoded, version, call, outputs)
        return self._encoded(version, call, outputs)

    def _decoded(self, version: ModelVersion, call: Call[Any]) -> tuple[Signature, Arrays]:
        taken_elsewhere()  # nothing left over from work this thread timed before
        started = thread_time()
        try:  # a request refused here cost its model the CPU all the same
            signature, inputs = call.decode(version.signature)
            check_inputs(signature, inputs, self.max_elements)
            version.check_rows(_rows(inputs))
        finally:
            spent = thread_time() - started + taken_elsewhere()  # a worker process's parse
            self.cpu.charge(version.name, CpuPhase.DECODE, spent)
        return signature, inputs

    def _encoded(self, version: ModelVersion, call: Call[R], outputs: Arrays) -> R:
        started = thread_time()
        try:
            return call.encode(outputs)
        finally:
            self.cpu.charge(version.name, CpuPhase.ENCODE, thread_time() - started)

    def _run(self, version: ModelVersion, signature: Signature, inputs: Arrays) -> Arrays:
        """One unbatched model call, in a scheduler thread, counted as a batch of its rows."""
        outputs = self._charged(version.name, version.predict, signature, inputs)
        self.metrics.for_model(version.name).observe_batch(_rows(inputs))
        return outputs

    def _charged(self, model: str, run: Callable[..., R], *args: Any) -> R:
        """``run(*args)``, its thread's CPU time charged to ``model``'s calls."""
        started = thread_time()
        try:
            return run(*args)
        finally:
            self.cpu.charge(model, CpuPhase.CALL, thread_time() - started)

    def _run_batch(self, version: ModelVersion, signature_name: str, inputs: Arrays) -> Arrays:
        return version.predict(version.signature(signature_name), inputs)

    def _whole(self, version: ModelVersion, call: Call[R]) -> R:
        signature, inputs = self._decoded(version, call)
        return self._encoded(version, call, self._run(version, signature, inputs))


def _rows(inputs: Arrays) -> int:
    # Lenient on purpose: unbatched (columnar) inputs need not share a dim 0, or have one.
    first = next(iter(inputs.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1

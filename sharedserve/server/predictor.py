"""The one path from decoded inputs to outputs, shared by REST and gRPC.

With batching on, requests go through the batcher, which merges them along the batch dimension
and answers each caller with its own rows; without it each request runs in a worker thread.
Either way the framework call never runs on the event loop.
"""

from __future__ import annotations

import numpy as np
from starlette.concurrency import run_in_threadpool

from sharedserve.server.batching import Batcher
from sharedserve.server.batching_policy import BatchingSettings
from sharedserve.server.metrics import Metrics
from sharedserve.server.model import ServedModel
from sharedserve.server.signature import Signature

__all__ = ["Predictor"]


class Predictor:
    def __init__(
        self, model: ServedModel, metrics: Metrics, batching: BatchingSettings | None = None
    ) -> None:
        self.model = model
        self.metrics = metrics
        self.batching = batching
        self.batcher: Batcher | None = None
        if batching is not None:
            self.batcher = Batcher(self._run_batch, batching, on_batch=metrics.observe_batch)
            batcher = self.batcher
            metrics.track_queue_depth(lambda: batcher.queue_depth)

    def _run_batch(
        self, signature_name: str, inputs: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        return self.model.predict(self.model.signature(signature_name), inputs)

    async def start(self) -> None:
        if self.batcher is not None:
            await self.batcher.start()

    async def stop(self) -> None:
        if self.batcher is not None:
            await self.batcher.stop()

    async def predict(
        self, signature: Signature, inputs: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        if self.batcher is not None:
            self.model.signature(signature.name)  # NotReady before queueing, not after
            return await self.batcher.submit(signature.name, inputs)
        outputs = await run_in_threadpool(self.model.predict, signature, inputs)
        rows = next(iter(inputs.values())).shape[:1]
        self.metrics.observe_batch(rows[0] if rows else 1)
        return outputs

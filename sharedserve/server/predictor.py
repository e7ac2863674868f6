"""The one path from decoded inputs to outputs, shared by REST and gRPC.

With batching on, requests go through the batcher, which merges them along the batch dimension
and answers each caller with its own rows; without it each request runs in a worker thread.
Either way the framework call never runs on the event loop.
"""

from __future__ import annotations

import numpy as np
from starlette.concurrency import run_in_threadpool

from sharedserve.config import BatchingSettings
from sharedserve.server.batching import Batcher
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

    def predict_blocking(
        self, signature: Signature, inputs: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """One unbatched model call in the calling (worker) thread, counted as one batch."""
        outputs = self.model.predict(signature, inputs)
        self.metrics.observe_batch(_rows(inputs))
        return outputs

    async def predict(
        self, signature: Signature, inputs: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """Callers have looked ``signature`` up through the model, so NotReady came already."""
        if self.batcher is not None:
            return await self.batcher.submit(signature.name, inputs)
        return await run_in_threadpool(self.predict_blocking, signature, inputs)


def _rows(inputs: dict[str, np.ndarray]) -> int:
    # Lenient on purpose: unbatched (columnar) inputs need not share a dim 0, or have one.
    first = next(iter(inputs.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1

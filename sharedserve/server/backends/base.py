"""The Backend protocol: what the server needs from a framework.

One module per framework under ``server/backends/``; the server picks one from the model
directory's contents (``model_source.Framework``) and never imports a framework itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sharedserve.errors import SharedServeError
from sharedserve.limits.gpu import GpuCap
from sharedserve.server.signature import Signature

__all__ = ["AppliedRuntime", "Backend", "RuntimeConfig", "warm_up"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeConfig:
    """Process-wide framework settings; applied once, before the model loads."""

    gpu_cap: GpuCap
    intra_op_threads: int
    """Threads one op may use (TensorFlow's intra-op pool, torch.set_num_threads)."""
    inter_op_threads: int
    """Ops that may run at once (TensorFlow's inter-op pool)."""


@dataclass(frozen=True)
class AppliedRuntime:
    """What the framework reports back after configuration: the truth for ``/limits``."""

    gpu_cap: GpuCap
    intra_op_threads: int
    inter_op_threads: int


class Backend(Protocol):
    framework: str

    def configure(self, config: RuntimeConfig) -> AppliedRuntime:
        """Apply threads and the GPU cap; returns them as read back from the framework."""
        ...

    def load(self) -> None:
        """Load the model; raises ModelLoadError."""
        ...

    def unload(self) -> None:
        """Drop the model, so that the framework can free its memory (host and device) once
        nothing else holds it; predict fails from then on. Safe to call twice or unloaded."""
        ...

    def signatures(self) -> dict[str, Signature]: ...

    def predict(self, signature: Signature, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one batch of inputs already checked against ``signature`` (one of this backend's
        ``signatures()``) by ``validate.check_inputs``. Raises InvalidInput (what only the model
        can tell), ResourceExhausted or SharedServeError."""
        ...

    def allocator_reserved_bytes(self) -> int | None:
        """GPU memory the framework's allocator holds (what the cap governs); None off the GPU
        or where the framework does not say. NVML's figure for the process minus this is what
        the process holds outside the cap: CUDA context, library workspaces."""
        ...


def warm_up(backend: Backend) -> None:
    """Run every signature once on a batch of one, so the first request is not the slow one.

    A signature whose warm-up fails is logged, not fatal: the others still serve.
    """
    for signature in backend.signatures().values():
        inputs = _warmup_inputs(signature)
        if inputs is None:
            log.info("signature %r has inputs of unknown rank; not warmed up", signature.name)
            continue
        try:
            backend.predict(signature, inputs)
        except SharedServeError as e:
            log.warning("warm-up of signature %r failed: %s", signature.name, e.message)


def _warmup_inputs(signature: Signature) -> dict[str, np.ndarray] | None:
    """Zeros (or empty strings) with every unknown dimension set to 1; None for unknown rank."""
    inputs = {}
    for key, spec in signature.inputs.items():
        if spec.shape is None:
            return None
        shape = tuple(1 if d < 0 else d for d in spec.shape)
        if spec.dtype == "DT_STRING":
            inputs[key] = np.full(shape, b"", dtype=object)
        else:
            inputs[key] = np.zeros(shape, dtype=spec.numpy_dtype)
    return inputs

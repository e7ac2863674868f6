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
from sharedserve.server.version.signature import Signature

__all__ = ["AppliedRuntime", "Backend", "DeviceMemory", "NoModel", "RuntimeConfig", "warm_up"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeConfig:
    """Process-wide framework settings; applied once, before the model loads."""

    gpu_cap: GpuCap
    intra_op_threads: int
    """Threads one op may use (TensorFlow's intra-op pool, torch.set_num_threads)."""
    inter_op_threads: int
    """Ops that may run at once (TensorFlow's inter-op pool)."""
    torchscript_optimize: bool = True
    """TorchScript's graph executor profiles and specialises each model's graph: off in a
    server of many models, where each model's specialised plans cost as much host memory as
    a third of its weights (``mobilenet_v2``: 15 MiB beside 13.5 MiB of tensors,
    ``benchmarks/results/multimodel_memory_cpu.md``) and on a CPU bought no speed there."""


@dataclass(frozen=True)
class AppliedRuntime:
    """What the framework reports back after configuration: the truth for ``/limits``."""

    gpu_cap: GpuCap
    intra_op_threads: int
    inter_op_threads: int


@dataclass(frozen=True)
class DeviceMemory:
    """The framework's own GPU allocator counters, process-wide on the model's device: what a
    model holds is read as the difference across its load and warm-up (``model.py``)."""

    in_use: int
    """Bytes the allocator has handed out now (torch ``memory_allocated``, TensorFlow
    ``get_memory_info``'s ``current``)."""
    peak: int
    """The most bytes handed out at once since the last ``reset_peak``."""


class Backend(Protocol):
    framework: str
    pages_to_host: bool
    """True where ``page_out`` keeps the model in host memory and ``page_in`` is a device copy
    (torch); False where paging out unloads it and paging in reloads it (TensorFlow, ONNX)."""
    page_in_from: str
    """What a page-in starts from, for ``/limits``: ``host_memory`` (torch: the model's tensors,
    copied to the device), ``file`` (TensorFlow: reloaded from disk), ``mapped_file`` (ONNX: a
    session made again from the model file as mapped at load)."""

    @property
    def warm_up_calls(self) -> int:
        """Calls per signature a warm-up makes before the model runs at its steady speed: 1,
        or more where the runtime compiles on a later call than the first."""
        ...

    def cap_memory(self, limit: int | None) -> bool:
        """Before ``load``: have the runtime itself hold the model to ``limit`` bytes (its
        budget; None: no cap), so that a request needing more fails as ResourceExhausted for
        this model alone. -> whether the runtime enforces it."""
        ...

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

    def weight_bytes(self) -> int:
        """Bytes of the loaded model's own tensors (weights, buffers, variables), each shared
        tensor once; 0 while unloaded. The footprint on a host without a GPU, where no
        allocator counts for us."""
        ...

    def device_memory(self) -> DeviceMemory | None:
        """The allocator's counters on the device the model runs on; None off the GPU."""
        ...

    def reset_peak(self) -> None:
        """Start ``device_memory().peak`` again from what is in use now; a no-op off the GPU."""
        ...

    def page_out(self) -> None:
        """Free the model's device memory while keeping it servable after ``page_in``; predict
        raises SharedServeError meanwhile. The caller pages out only an idle model. Where it
        unloads (not ``pages_to_host``), the memory is freed at the caller's next full
        collection (a model is objects in cycles)."""
        ...

    def page_in(self) -> None:
        """Make a paged-out model servable again, answering as before; a no-op if resident."""
        ...


class NoModel:
    """The backend of a stand-in for a model none of whose versions could be made
    (``ModelVersion.stand_in``): there are no files, so nothing is loaded; it is FAILED from the
    start and never run, so every call but ``unload`` is a bug."""

    framework = "none"
    pages_to_host = False
    page_in_from = "none"
    warm_up_calls = 1

    def cap_memory(self, limit: int | None) -> bool:
        return False

    def _never(self) -> SharedServeError:
        return SharedServeError("a model that could not be read has no backend to run")

    def configure(self, config: RuntimeConfig) -> AppliedRuntime:
        raise self._never()

    def load(self) -> None:
        raise self._never()

    def unload(self) -> None:
        """Nothing was loaded."""

    def signatures(self) -> dict[str, Signature]:
        raise self._never()

    def predict(self, signature: Signature, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise self._never()

    def allocator_reserved_bytes(self) -> int | None:
        return None

    def weight_bytes(self) -> int:
        return 0

    def device_memory(self) -> DeviceMemory | None:
        return None

    def reset_peak(self) -> None:
        """Nothing to measure."""

    def page_out(self) -> None:
        raise self._never()

    def page_in(self) -> None:
        raise self._never()


def warm_up(backend: Backend, rows: int = 1) -> int:
    """Run every signature once on a batch of ``rows``, so the first request is not the slow one
    and, run at the largest batch the model serves, so that its peak memory is measured.

    Returns the most bytes one signature's inputs plus outputs took: on a host without a GPU,
    what a batch of ``rows`` adds to the weights (no allocator counts it there). A signature
    whose warm-up fails is logged, not fatal: the others still serve.
    """
    most = 0
    for signature in backend.signatures().values():
        inputs = _warmup_inputs(signature, rows)
        if inputs is None:
            log.info("signature %r has inputs of unknown rank; not warmed up", signature.name)
            continue
        try:
            for _ in range(backend.warm_up_calls):
                outputs = backend.predict(signature, inputs)
        except SharedServeError as e:
            log.warning("warm-up of signature %r failed: %s", signature.name, e.message)
            continue
        took = sum(_nbytes(a) for a in inputs.values()) + sum(_nbytes(a) for a in outputs.values())
        most = max(most, took)
    return most


def _nbytes(array: np.ndarray) -> int:
    # An object array's nbytes counts pointers; its strings are what a batch holds.
    if array.dtype == object:
        return sum(len(item) for item in array.flat if isinstance(item, (bytes, str)))
    return int(array.nbytes)


def _warmup_inputs(signature: Signature, rows: int) -> dict[str, np.ndarray] | None:
    """Zeros (or empty strings): an unknown first dimension (the batch) is ``rows``, any other
    unknown one 1; None for unknown rank."""
    inputs = {}
    for key, spec in signature.inputs.items():
        if spec.shape is None:
            return None
        shape = tuple((rows if i == 0 else 1) if d < 0 else d for i, d in enumerate(spec.shape))
        if spec.dtype == "DT_STRING":
            inputs[key] = np.full(shape, b"", dtype=object)
        else:
            inputs[key] = np.zeros(shape, dtype=spec.numpy_dtype)
    return inputs

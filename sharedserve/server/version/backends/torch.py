"""PyTorch backend: TorchScript ``model.pt`` with a ``signature.json`` sidecar.

Why TorchScript plus a sidecar: a TorchScript file carries the model's code with its weights, so
serving needs neither the model's Python source nor torchvision; but it has no named signatures,
so ``signature.json`` declares what TF Serving would show (input and output names, dtypes, ``-1``
dimensions) and clients see one API whichever framework serves (``torch_sidecar.py`` reads it).
``forward`` takes the inputs positionally in the sidecar's order.

Paging keeps the module in host memory: page-out moves its tensors to the CPU, page-in copies
them back to the device, without reading the file again.

``torch_export.py`` subclasses it for ``model.pt2`` (a ``torch.export`` program, an AOTInductor
package): the same threads, cap, errors and counters, its own ``_read`` and ``_run``.

torch's errors are wrapped here: CUDA out of memory under the cap becomes ``ResourceExhausted``
(503) and the process serves on; shape and dtype errors raised inside the model become
``InvalidInput`` (400). TorchScript wraps a model's error in a serialized traceback; clients get
its last line, the actual message.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import torch

from sharedserve.errors import (
    InvalidInput,
    ModelLoadError,
    ResourceExhausted,
    SharedServeError,
)
from sharedserve.limits.gpu import apply_torch
from sharedserve.server.version.backends.base import AppliedRuntime, DeviceMemory, RuntimeConfig
from sharedserve.server.version.backends.torch_sidecar import (
    SIGNATURE_FILE,
    check_input_order,
    read_signature_file,
)
from sharedserve.server.version.signature import Signature, TensorSpec

__all__ = ["MODEL_FILE", "SIGNATURE_FILE", "TorchBackend", "read_signature_file"]

log = logging.getLogger(__name__)

_optimize = True
"""TorchScript's graph executor optimisation (``RuntimeConfig.torchscript_optimize``): process
-wide, as the threads and the cap that ``configure`` sets, for every model of the process."""

# Written by sharedserve.models.torch_models, which this layer may not import.
MODEL_FILE = "model.pt"

_MAX_ERROR_CHARS = 400
_SCRIPT_PREFIX = "The following operation failed in the TorchScript interpreter"
_EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception): ", re.MULTILINE)
# torch reports a bad input only through the message of a RuntimeError.
_INPUT_ERROR = re.compile(r"shape|size|dimension|dims\b|dtype|scalar type|channels", re.IGNORECASE)


def _message(error: Exception) -> str:
    """The error's own message, without the serialized traceback TorchScript puts before it."""
    text = str(error).strip()
    if not text.startswith(_SCRIPT_PREFIX):
        return text
    # The traceback quotes the model's source, which may itself mention "out of memory"; the
    # real message starts at the last "SomeError: " line.
    starts = list(_EXCEPTION_LINE.finditer(text))
    return text[starts[-1].end() :].strip() if starts else text


def _short(error: Exception) -> str:
    # CUDA OOM texts run to a paragraph; a client needs the first line.
    lines = [line.strip() for line in _message(error).splitlines() if line.strip()]
    return lines[0][:_MAX_ERROR_CHARS] if lines else type(error).__name__


def _check_forward(model: torch.jit.ScriptModule, signature: Signature, path: Path) -> None:
    """Refuse a sidecar whose inputs cannot be passed to ``forward`` as declared."""
    forward = getattr(model, "forward", None)
    if not isinstance(forward, torch._C.ScriptMethod):
        raise ModelLoadError(f"{path / MODEL_FILE} has no TorchScript forward method")
    arguments = forward.schema.arguments[1:]  # [0] is self
    names = [a.name for a in arguments]
    required = sum(1 for a in arguments if not a.has_default_value())
    declared = list(signature.inputs)
    if not required <= len(declared) <= len(names):
        raise ModelLoadError(
            f"{path / MODEL_FILE}: forward takes {names} but {SIGNATURE_FILE} declares "
            f"{len(declared)} input(s) {declared}"
        )
    check_input_order(path / SIGNATURE_FILE, declared, names, "forward")


class TorchBackend:
    """Serves one TorchScript model version: ``model.pt`` and ``signature.json``."""

    framework = "torch"
    pages_to_host = True
    page_in_from = "host_memory"
    model_file = MODEL_FILE

    def __init__(self, path: Path) -> None:
        self._path = path
        self._signatures: dict[str, Signature] = {}
        self._model: torch.nn.Module | None = None
        self._device = torch.device("cpu")
        self._paged_out = False

    def configure(self, config: RuntimeConfig) -> AppliedRuntime:
        global _optimize  # noqa: PLW0603 - process-wide, as the thread pools set here
        _optimize = config.torchscript_optimize
        torch.set_num_threads(config.intra_op_threads)
        # The inter-op pool can be sized once per process, before any parallel work; a second
        # attempt raises even with the same value, so only try when it would change something.
        if torch.get_num_interop_threads() != config.inter_op_threads:
            try:
                torch.set_num_interop_threads(config.inter_op_threads)
            except RuntimeError as e:
                log.warning(
                    "PyTorch's inter-op threads stay at %d, not %d: %s",
                    torch.get_num_interop_threads(),
                    config.inter_op_threads,
                    _short(e),
                )
        cap = apply_torch(config.gpu_cap)
        return AppliedRuntime(
            gpu_cap=cap,
            intra_op_threads=torch.get_num_threads(),
            inter_op_threads=torch.get_num_interop_threads(),
        )

    @property
    def warm_up_calls(self) -> int:
        # TorchScript's profiling executor profiles the first calls and optimises on the next,
        # which on a GPU compiles fused kernels: after a warm-up of one call, a request took 7
        # to 13 s where the rest took about 10 ms (mobilenet_v2 on an H200,
        # benchmarks/results/gpu_h200_multimodel.md). The warm-up pays it, not a request.
        if not _optimize:
            return 1
        return int(torch._C._jit_get_num_profiled_runs()) + 1  # type: ignore[attr-defined]

    def cap_memory(self, limit: int | None) -> bool:
        return False  # the process's cap only: torch's allocator has no per-model one

    def load(self) -> None:
        device = _serving_device()
        model, signature = self._read(device)
        self._model = model
        self._device = self._runs_on(device)
        self._paged_out = False
        self._signatures = {signature.name: signature}
        log.info("loaded %s on %s", self._path / self.model_file, self._device)

    def _runs_on(self, device: torch.device) -> torch.device:
        """Where the loaded model runs: the device it was loaded onto, for a module."""
        return device

    def _read(self, device: torch.device) -> tuple[torch.nn.Module, Signature]:
        """The model, in inference mode on ``device``, and its signature; ModelLoadError.
        (The file formats' one difference at load: ``torch_export.py`` reads a ``.pt2``.)"""
        signature = read_signature_file(self._path / SIGNATURE_FILE)
        model_file = self._path / MODEL_FILE
        try:
            model: torch.jit.ScriptModule = torch.jit.load(  # type: ignore[no-untyped-call]
                str(model_file), map_location=device
            )
        except Exception as e:  # corrupt archive, pickled (non-TorchScript) file, OOM, ...
            raise ModelLoadError(f"PyTorch could not load {model_file}: {_short(e)}") from e
        _check_forward(model, signature, self._path)
        model.eval()
        return model, signature

    def _run(self, args: list[torch.Tensor]) -> object:
        """One call of the loaded model, under inference mode; what it returns."""
        assert self._model is not None
        # The executor's setting is per thread: each call, in whichever thread, says it.
        optimized = torch.jit.optimized_execution  # type: ignore[attr-defined]
        with torch.inference_mode(), optimized(_optimize):
            return self._model(*args)

    def unload(self) -> None:
        self._model = None
        self._paged_out = False
        # The caching allocator keeps freed blocks for reuse by this process; an unloaded
        # model's are handed back to the device, for other processes and NVML to see.
        if self._device.type == "cuda":
            torch.cuda.empty_cache()

    def signatures(self) -> dict[str, Signature]:
        return self._signatures

    def predict(self, signature: Signature, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._model is None:
            raise SharedServeError("the model is not loaded")
        if self._paged_out:
            # On a GPU its tensors are in host memory now: running it would put the inputs on
            # the device beside weights on the CPU, or, worse, quietly serve from the CPU.
            raise SharedServeError("the model is paged out")
        try:
            # Inside the try: copying the inputs to the GPU can itself run out of memory.
            args = [self._tensor(spec, inputs[spec.name]) for spec in signature.inputs.values()]
            return _outputs(signature, self._run(args))
        except torch.cuda.OutOfMemoryError as e:
            raise ResourceExhausted(f"out of memory running the model: {_short(e)}") from e
        except (RuntimeError, torch.jit.Error, AssertionError) as e:
            # Inside a scripted model a CUDA OOM arrives as a plain RuntimeError, and an error
            # the model raises itself as torch.jit.Error (an exported program's shape guard, an
            # AssertionError or RuntimeError): only the message tells them apart.
            message = _short(e)
            if "out of memory" in _message(e):
                raise ResourceExhausted(f"out of memory running the model: {message}") from e
            if _INPUT_ERROR.search(message):
                raise InvalidInput(message) from e
            raise SharedServeError(f"model execution failed: {message}") from e

    def allocator_reserved_bytes(self) -> int | None:
        # The process's pool on the device models load onto, loaded or not: /metrics reads it
        # through a backend that never loads a model (the process's first, as configured).
        device = self._device if self._model is not None else _serving_device()
        if device.type != "cuda":
            return None
        # Reserved, not allocated: the caching allocator keeps freed blocks, and the cap
        # (set_per_process_memory_fraction) bounds what it reserves.
        return int(torch.cuda.memory_reserved(device))

    def weight_bytes(self) -> int:
        if self._model is None:
            return 0
        # Parameters and buffers (batch norm's running statistics) are all a module holds
        # between calls. Tied weights appear under two names but are one tensor: count once.
        tensors = {}
        for tensor in [*self._model.parameters(), *self._model.buffers()]:
            tensors[tensor.data_ptr()] = tensor.numel() * tensor.element_size()
        return sum(tensors.values())

    def device_memory(self) -> DeviceMemory | None:
        # Before load(), the device load() will pick: the caller reads the counters before
        # loading, to tell what the load took.
        device = self._device if self._model is not None else _serving_device()
        if device.type != "cuda":
            return None
        # Allocated, not reserved: the bytes the tensors hold, not the allocator's cache.
        return DeviceMemory(
            in_use=int(torch.cuda.memory_allocated(device)),
            peak=int(torch.cuda.max_memory_allocated(device)),
        )

    def reset_peak(self) -> None:
        device = self._device if self._model is not None else _serving_device()
        # Before CUDA starts, the allocator has no device to reset (it raises "did you call
        # init?") and nothing was allocated: the peak is 0 already.
        if device.type == "cuda" and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            torch.cuda.reset_peak_memory_stats(device)

    def page_out(self) -> None:
        if self._model is None or self._paged_out:
            return
        self._paged_out = True
        if self._device.type != "cuda":
            return  # already in host memory: nothing to move, and no copy to pay for
        self._model.to("cpu")  # in place: the same module, its tensors now in host memory
        # Freed blocks stay in this process's allocator cache otherwise; the point of paging
        # out is that another model (or process) can have them.
        torch.cuda.empty_cache()

    def page_in(self) -> None:
        if self._model is None:
            raise SharedServeError("the model is not loaded: page-in needs a paged-out model")
        if not self._paged_out:
            return
        if self._device.type == "cuda":
            try:
                self._model.to(self._device)
                # Done when the copy is, so that a timed page-in is the copy's real time.
                torch.cuda.synchronize(self._device)
            except torch.cuda.OutOfMemoryError as e:
                # Half its tensors may have moved: all back to host memory, still paged out
                # and whole, so a later page-in (once there is room) can try again.
                self._model.to("cpu")
                torch.cuda.empty_cache()
                message = f"no device memory to page the model in: {_short(e)}"
                raise ResourceExhausted(message) from e
        self._paged_out = False

    def _tensor(self, spec: TensorSpec, value: np.ndarray) -> torch.Tensor:
        array = np.ascontiguousarray(value, dtype=spec.numpy_dtype)  # checked: a no-op cast
        if not array.flags.writeable:
            array = array.copy()  # torch.from_numpy warns on read-only memory
        return torch.from_numpy(array).to(self._device)


def _serving_device() -> torch.device:
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def _outputs(signature: Signature, result: object) -> dict[str, np.ndarray]:
    """Name the model's result per the sidecar: one tensor, a dict by name, a tuple by order."""
    names = list(signature.outputs)
    if isinstance(result, torch.Tensor):
        if len(names) != 1:
            raise SharedServeError(
                f"the model returned one tensor but {SIGNATURE_FILE} declares outputs {names}"
            )
        tensors: dict[str, object] = {names[0]: result}
    elif isinstance(result, dict):
        missing = [n for n in names if n not in result]
        if missing:
            raise SharedServeError(
                f"the model's output has no {missing}; it returned {sorted(map(str, result))}"
            )
        tensors = {n: result[n] for n in names}
    elif isinstance(result, (tuple, list)):
        if len(result) != len(names):
            raise SharedServeError(
                f"the model returned {len(result)} outputs but {SIGNATURE_FILE} declares {names}"
            )
        tensors = dict(zip(names, result, strict=True))
    else:
        raise SharedServeError(f"the model returned {type(result).__name__}, not tensors")
    arrays = {}
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise SharedServeError(f"output {name!r} is {type(tensor).__name__}, not a tensor")
        arrays[name] = tensor.detach().cpu().numpy()
    return arrays

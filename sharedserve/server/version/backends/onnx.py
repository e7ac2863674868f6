"""ONNX backend: ``model.onnx`` (Triton's name for it) served by onnxruntime.

An ONNX file names and types its own inputs and outputs, so the signature is read from the
session (``serving_default``; a dimension without a fixed size, named or not, is ``-1``) and
no side file is needed.

Paging: the model file stays mapped (``mmap``) from the load on. Page-out drops the session
(its weights and its arena, all ORT holds for the model); page-in makes a new one of the file
as it was loaded (``page_in_from``: ``mapped_file``), even once it is deleted or replaced by a
rename, as a new version's files are. Only the mapping is kept, not the session, because a
session's arena and optimised graph are what paging out is meant to free; and the mapping holds
no host memory of its own (``MADV_DONTNEED`` once a session is made; the kernel's page cache
keeps the pages while it can). Sessions are made from the file's path while it is the file
mapped, from the mapping's bytes only where it is not: onnxruntime takes bytes or a path, and
sessions made from bytes kept in the process cost 42.4 MiB of host memory per
``mobilenet_v2`` against 28.9 for these (benchmarks/results/multimodel_memory_onnx_export_cpu.md;
the bytes freed after a session is made, the heap they took is not given back). A
model whose weights are in external data files beside ``model.onnx`` is made from its path,
and paged in from the files (``page_in_from``: ``file``): the mapping of ``model.onnx`` alone
would not hold the weights.

Threads: every session gets the CPU limit's intra-op threads (the Python API has no pool for
the process; its sessions' pools sleep when idle, no spinning) and its inter-op threads, which
onnxruntime uses only in its parallel execution mode, not turned on here.

The runtime's own cap (``cap_memory``): a model with a budget (its model file's
``gpu_memory_mib``) gets a session whose CPU memory arena may hold that much and no more, so a
request that would need more fails inside onnxruntime, as ``ResourceExhausted`` for that model
alone. onnxruntime's CPU provider takes no per-session arena size; an arena registered with the
environment (``create_and_register_allocator``) does, and a session made with
``session.use_env_allocators`` keeps the arena registered when it was made, even after another
is registered in its place. So each capped session is made, under one lock, right after its own
arena is registered, and an unused arena is registered after it: while the environment held the
model's arena, a paged-out model's arena would stay allocated (what it grew to: 128 MiB kept
after a 4,096-row batch of ``tests/support/onnx_models.py``'s wide model, freed with the
placeholder). Uncapped sessions use their own arena, as onnxruntime's default. The arena
holds the weights too, as a GPU budget does. Without a budget the measured peak is not used as a
cap: on a host without a GPU it counts weights, inputs and outputs, not the activations between
them, and so would refuse the very batch it was measured at.

On a GPU: where onnxruntime has its CUDA provider (the ``onnxruntime-gpu`` build) and the
process runs under a GPU cap (flags or the env contract), its sessions run on the GPU instead,
each with the provider's ``gpu_mem_limit``: the model's budget where it has one, else the
process's cap (``apply_onnxruntime``). That limit caps the CUDA provider's arena per session,
as the CPU arena's is capped above, and a request past it fails the same way. Without
a cap, or without the provider, nothing changes: the CPU provider, as above. A session whose
CUDA provider does not load (its CUDA or cuDNN libraries missing) fails the model's load in one
line, rather than running on the CPU while ``/sharedserve/v1/limits`` says the cap holds.

onnxruntime's errors are wrapped here: an allocation the arena refuses becomes
``ResourceExhausted`` (503); a shape or type the model refuses, ``InvalidInput`` (400).
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from sharedserve.errors import InvalidInput, ModelLoadError, ResourceExhausted, SharedServeError
from sharedserve.limits.gpu import apply_onnxruntime
from sharedserve.server.version.backends.base import AppliedRuntime, DeviceMemory, RuntimeConfig
from sharedserve.server.version.signature import Signature, TensorSpec

__all__ = ["MODEL_FILE", "OnnxBackend", "read_signature"]

log = logging.getLogger(__name__)

# Triton's file name; also what sharedserve.models writes, which this layer may not import.
MODEL_FILE = "model.onnx"
_SIGNATURE = "serving_default"
_MAX_ERROR_CHARS = 400
_PROVIDERS = ["CPUExecutionProvider"]
_MIB = 1 << 20

# onnxruntime's element types (``NodeArg.type``) -> TF Serving's names.
_DTYPES = {
    "tensor(float)": "DT_FLOAT",
    "tensor(double)": "DT_DOUBLE",
    "tensor(float16)": "DT_HALF",
    "tensor(int8)": "DT_INT8",
    "tensor(int16)": "DT_INT16",
    "tensor(int32)": "DT_INT32",
    "tensor(int64)": "DT_INT64",
    "tensor(uint8)": "DT_UINT8",
    "tensor(uint16)": "DT_UINT16",
    "tensor(uint32)": "DT_UINT32",
    "tensor(uint64)": "DT_UINT64",
    "tensor(bool)": "DT_BOOL",
    "tensor(string)": "DT_STRING",
}
# What the arena says when it cannot grow: "Available memory of N is smaller than requested
# bytes of M" (bfc_arena.cc); plain allocation failures say "Failed to allocate memory".
_OUT_OF_MEMORY = re.compile(r"Available memory of|Failed to allocate|out of memory", re.I)
_INPUT_ERROR = re.compile(r"shape|dimension|dims\b|rank|type|Invalid input|Got invalid", re.I)

_threads: dict[str, int] = {"intra": 0, "inter": 0}
"""The thread counts ``configure`` set, for every session of the process (0: ORT's choice)."""
_gpu: dict[str, int | None] = {"limit": None}
"""The process's GPU cap in bytes where ``configure`` put the sessions on the CUDA provider;
None: they run on the CPU provider."""
_CUDA = "CUDAExecutionProvider"
_PLACEHOLDER = ort.OrtArenaCfg(1, 1, -1, -1)
"""What the environment holds between capped sessions: an arena no session uses, which an
arena allocates nothing for until its first allocation."""
_ARENA_LOCK = threading.Lock()
"""One capped session made at a time: its arena is the environment's until the next one's."""


def _short(error: BaseException) -> str:
    # ORT's messages carry the source location and node; a client needs the first line.
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return first[:_MAX_ERROR_CHARS]


def read_signature(session: Any, model_file: Path) -> Signature:
    """The session's inputs and outputs as the one signature clients see; ModelLoadError for an
    input or output that is not a tensor (a sequence or a map) or of a type not served."""
    return Signature(
        name=_SIGNATURE,
        inputs=_specs(session.get_inputs(), model_file, "input"),
        outputs=_specs(session.get_outputs(), model_file, "output"),
    )


def _specs(args: list[Any], model_file: Path, kind: str) -> dict[str, TensorSpec]:
    specs = {}
    for arg in args:
        dtype = _DTYPES.get(arg.type)
        if dtype is None or (dtype == "DT_STRING" and kind == "input"):
            raise ModelLoadError(
                f"{model_file}: {kind} {arg.name!r} is {arg.type}, which sharedserve does not "
                f"serve; served: {sorted(t for t in _DTYPES if t != 'tensor(string)')}"
            )
        shape = arg.shape
        dims = None if shape is None else tuple(d if isinstance(d, int) else -1 for d in shape)
        specs[arg.name] = TensorSpec(name=arg.name, dtype=dtype, shape=dims, tensor_name=arg.name)
    return specs


class OnnxBackend:
    """Serves one ONNX model version: ``model.onnx``."""

    framework = "onnx"
    pages_to_host = False
    warm_up_calls = 1

    def __init__(self, path: Path) -> None:
        self._path = path
        self._source: _Mapped | str | None = None
        """What a session is made from: the file, mapped, or its path where its weights are in
        external data files beside it (which the mapping alone does not hold); None until
        loaded."""
        self._session: Any = None
        self.page_in_from = "mapped_file"
        self._signatures: dict[str, Signature] = {}
        self._cap: int | None = None

    def configure(self, config: RuntimeConfig) -> AppliedRuntime:
        # Set on each session as it is made (ORT has no process-wide pool the Python API sizes).
        _threads["intra"], _threads["inter"] = config.intra_op_threads, config.inter_op_threads
        cap = apply_onnxruntime(config.gpu_cap, _CUDA in ort.get_available_providers())
        _gpu["limit"] = None
        if cap.enforced and cap.share.mib is not None:
            _gpu["limit"] = cap.share.mib * _MIB
            # onnxruntime-gpu finds CUDA and cuDNN in NVIDIA's wheels (torch's) only when told
            # to (1.21 on); where they are on the linker's path this loads nothing new.
            preload = getattr(ort, "preload_dlls", None)
            if preload is not None:
                preload()
        return AppliedRuntime(
            gpu_cap=cap,
            intra_op_threads=config.intra_op_threads,
            inter_op_threads=config.inter_op_threads,
        )

    def cap_memory(self, limit: int | None) -> bool:
        self._cap = limit
        return limit is not None

    def load(self) -> None:
        model_file = self._path / MODEL_FILE
        # Files beside it are its weights (external data), which a mapping of it alone would
        # not hold: made from its path then, as onnxruntime finds them from there.
        try:
            beside = [f for f in self._path.iterdir() if f.is_file() and f.name != MODEL_FILE]
        except OSError as e:
            raise ModelLoadError(f"cannot read {self._path}: {e}") from e
        source = str(model_file) if beside else _Mapped.of(model_file)
        try:
            session = self._session_of(source, model_file)
        except ModelLoadError:
            _unmap(source)
            raise
        self._signatures = {_SIGNATURE: read_signature(session, model_file)}
        self._source, self._session = source, session
        self.page_in_from = "file" if isinstance(source, str) else "mapped_file"
        on = "the GPU" if _gpu["limit"] is not None else "the CPU"
        capped = "arena capped" if self._cap or _gpu["limit"] else "no arena cap"
        log.info("loaded %s on %s (%s)", model_file, on, capped)

    def _session_of(self, source: _Mapped | str, model_file: Path) -> Any:
        """A session made from ``source``: a path, or the file mapped at load, made from its
        path while that is the same file (checked again once made: a rename meanwhile), else
        from the mapping's bytes; the mapping's pages let go of afterwards either way."""
        if isinstance(source, str):
            return self._new_session(source, model_file)
        try:
            if source.is_at(model_file):
                session = self._new_session(str(model_file), model_file)
                if source.is_at(model_file):
                    return session
            return self._new_session(source.mapping[:], model_file)
        finally:
            source.mapping.madvise(mmap.MADV_DONTNEED)

    def _new_session(self, data: bytes | str, model_file: Path) -> Any:
        options = ort.SessionOptions()
        options.intra_op_num_threads = _threads["intra"]
        options.inter_op_num_threads = _threads["inter"]
        # Idle intra-op threads spin by default, burning a CPU limit shared with other models.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # A refused request is the client's answer, not an error line in the server's log.
        options.log_severity_level = 4
        try:
            if _gpu["limit"] is not None:
                return self._cuda_session(data, options, model_file)
            if self._cap is None:
                return ort.InferenceSession(data, options, providers=_PROVIDERS)
            options.add_session_config_entry("session.use_env_allocators", "1")
            info = ort.OrtMemoryInfo(
                "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
            )
            # kSameAsRequested (1): the arena grows by what is asked, so the cap is reached by
            # the request that needs it, not by a power-of-two step before it.
            arena = ort.OrtArenaCfg(self._cap, 1, -1, -1)
            with _ARENA_LOCK:
                ort.create_and_register_allocator(info, arena)
                try:
                    return ort.InferenceSession(data, options, providers=_PROVIDERS)
                finally:  # the session keeps its arena; the environment lets go of it
                    ort.create_and_register_allocator(info, _PLACEHOLDER)
        except ModelLoadError:
            raise
        except Exception as e:  # a malformed file, an unknown op, an arena too small to load
            raise ModelLoadError(f"onnxruntime could not load {model_file}: {_short(e)}") from e

    def _cuda_session(self, data: bytes | str, options: Any, model_file: Path) -> Any:
        """A session on the CUDA provider, its arena held to the model's budget (the process's
        cap without one); the CPU provider only for the ops CUDA has no kernel for."""
        limit = self._cap if self._cap is not None else _gpu["limit"]
        cuda = {
            "device_id": "0",  # CUDA's device 0: the one the cap was sized on (limits.gpu)
            "gpu_mem_limit": str(limit),
            # The arena grows by what is asked, so the limit is reached by the request that
            # needs it, not by a power-of-two step before it (as the CPU arena above).
            "arena_extend_strategy": "kSameAsRequested",
            # cuDNN's convolution search may otherwise ask for a workspace of all the GPU's
            # free memory, allocated beside the arena: past the cap, if only for a moment.
            "cudnn_conv_use_max_workspace": "0",
        }
        session = ort.InferenceSession(data, options, providers=[(_CUDA, cuda), *_PROVIDERS])
        if _CUDA not in session.get_providers():  # onnxruntime falls back to the CPU silently
            raise ModelLoadError(
                f"onnxruntime's CUDA provider did not load for {model_file} (its CUDA or cuDNN "
                "libraries not found?): the GPU cap could not be held, so the model is not served"
            )
        return session

    def unload(self) -> None:
        _unmap(self._source)
        self._session, self._source = None, None

    def signatures(self) -> dict[str, Signature]:
        return self._signatures

    def predict(self, signature: Signature, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        session = self._session
        if session is None:
            state = "paged out" if self._source is not None else "not loaded"
            raise SharedServeError(f"the model is {state}")
        feed = {
            spec.tensor_name: np.ascontiguousarray(inputs[spec.name], dtype=spec.numpy_dtype)
            for spec in signature.inputs.values()
        }
        names = list(signature.outputs)
        try:
            results = session.run(names, feed)
        except Exception as e:  # ORT raises its own exception types, none a common base
            message = _short(e)
            if _OUT_OF_MEMORY.search(str(e)):
                raise ResourceExhausted(
                    f"out of memory running the model (its arena is capped at its budget, "
                    f"gpu_memory_mib): {message}"
                ) from e
            if _INPUT_ERROR.search(message):
                raise InvalidInput(message) from e
            raise SharedServeError(f"model execution failed: {message}") from e
        return {name: np.asarray(value) for name, value in zip(names, results, strict=True)}

    def allocator_reserved_bytes(self) -> int | None:
        return None  # on the GPU too: onnxruntime's Python API does not count its CUDA arena

    def weight_bytes(self) -> int:
        # The file's size: an ONNX file is its initializers and a graph small beside them.
        if self._session is None:
            return 0
        source = self._source
        return len(source.mapping) if isinstance(source, _Mapped) else _files_size(self._path)

    def device_memory(self) -> DeviceMemory | None:
        return None

    def reset_peak(self) -> None:
        """Nothing to measure off the GPU."""

    def page_out(self) -> None:
        self._session = None  # ORT's session frees its weights and arena when dropped

    def page_in(self) -> None:
        if self._source is None:
            raise SharedServeError("the model is not loaded: page-in needs a paged-out model")
        if self._session is None:
            self._session = self._session_of(self._source, self._path / MODEL_FILE)


@dataclass(frozen=True)
class _Mapped:
    """A model file mapped read-only, and which file it was (device, inode, size, mtime)."""

    mapping: mmap.mmap
    identity: tuple[int, int, int, int]

    @classmethod
    def of(cls, model_file: Path) -> _Mapped | str:
        """``model_file`` mapped; its path where it cannot be (an empty file: onnxruntime says
        what is wrong with it). ModelLoadError if it cannot be read."""
        try:
            with model_file.open("rb") as f:
                # The mapping outlives the descriptor: nothing is left open but the mapping.
                mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                return cls(mapping, _identity(os.fstat(f.fileno())))
        except ValueError:  # "cannot mmap an empty file"
            return str(model_file)
        except OSError as e:
            raise ModelLoadError(f"cannot read {model_file}: {e}") from e

    def is_at(self, model_file: Path) -> bool:
        """Whether ``model_file`` is still the file mapped."""
        try:
            return _identity(model_file.stat()) == self.identity
        except OSError:  # deleted
            return False


def _identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def _unmap(source: _Mapped | str | None) -> None:
    if isinstance(source, _Mapped):
        source.mapping.close()


def _files_size(directory: Path) -> int:
    """The version directory's files: ``model.onnx`` and its external data."""
    return sum(f.stat().st_size for f in directory.iterdir() if f.is_file())

"""TensorFlow SavedModel backend.

Signatures are read from ``saved_model.pb`` itself (not from the loaded functions) so metadata
shows exactly what TF Serving would: graph tensor names, ``-1`` dimensions, method names.
TensorFlow's own errors are wrapped here: an allocation past the GPU cap
(``ResourceExhaustedError``) becomes ``ResourceExhausted`` (503) and the process serves on.

Paging unloads and reloads: a loaded SavedModel's functions are bound to its variables on the
device, and TensorFlow has no supported way to move them to host memory and back.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from sharedserve.errors import (
    InvalidInput,
    ModelLoadError,
    ResourceExhausted,
    SharedServeError,
)
from sharedserve.framework_output import framework_needed, framework_startup
from sharedserve.limits.gpu import apply_tensorflow
from sharedserve.server.version.backends.base import AppliedRuntime, DeviceMemory, RuntimeConfig
from sharedserve.server.version.signature import DTYPE_TO_NUMPY, Signature, TensorSpec

__all__ = ["TensorFlowBackend", "read_signature_defs"]

# Graph-internal entries TF writes into every SavedModel; not callable signatures.
_INTERNAL_PREFIX = "__"
_MAX_ERROR_CHARS = 400
# TensorFlow places a model on the first GPU it sees; the cap applies to that one.
_GPU = "GPU:0"


log = logging.getLogger(__name__)


def _short(error: Exception) -> str:
    # TF error texts carry multi-KB allocator dumps; a client needs the first line.
    text = getattr(error, "message", None) or str(error)
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return first[:_MAX_ERROR_CHARS]


def read_signature_defs(saved_model_dir: Path) -> dict[str, Signature]:
    """Parse the ``serve`` MetaGraph's SignatureDefs into our neutral form."""
    from google.protobuf import text_format
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    pb = saved_model_dir / "saved_model.pb"
    if pb.is_file():
        proto.ParseFromString(pb.read_bytes())
    else:
        text_format.Parse((saved_model_dir / "saved_model.pbtxt").read_text(), proto)
    graphs = [g for g in proto.meta_graphs if "serve" in g.meta_info_def.tags]
    if not graphs:
        raise ModelLoadError(f"{saved_model_dir} has no MetaGraph tagged 'serve'")

    def spec(key: str, info: Any) -> TensorSpec:
        dtype = types_pb2.DataType.Name(info.dtype)
        if dtype not in DTYPE_TO_NUMPY:
            raise ModelLoadError(
                f"tensor {key!r} has dtype {dtype}, which sharedserve cannot serve"
            )
        shape = None
        if not info.tensor_shape.unknown_rank:
            shape = tuple(int(d.size) for d in info.tensor_shape.dim)
        return TensorSpec(name=key, dtype=dtype, shape=shape, tensor_name=info.name)

    signatures = {}
    for name, sig in graphs[0].signature_def.items():
        if name.startswith(_INTERNAL_PREFIX):
            continue
        signatures[name] = Signature(
            name=name,
            inputs={k: spec(k, v) for k, v in sorted(sig.inputs.items())},
            outputs={k: spec(k, v) for k, v in sorted(sig.outputs.items())},
            method_name=sig.method_name,
        )
    return signatures


class TensorFlowBackend:
    """Serves one SavedModel version."""

    framework = "tensorflow"
    pages_to_host = False
    warm_up_calls = 1
    page_in_from = "file"

    def __init__(self, path: Path) -> None:
        self._path = path
        self._signatures: dict[str, Signature] = {}
        self._functions: dict[str, Any] = {}
        self._loaded: Any = None

    def configure(self, config: RuntimeConfig) -> AppliedRuntime:
        # The first import of TensorFlow in a server: where a missing one is one line.
        with framework_needed("tensorflow"), framework_startup():
            import tensorflow as tf

        # Both must be set before TensorFlow's runtime starts, i.e. before the model loads; in
        # a process where it has started already (a second server in it) they stay as they are.
        try:
            tf.config.threading.set_intra_op_parallelism_threads(config.intra_op_threads)
            tf.config.threading.set_inter_op_parallelism_threads(config.inter_op_threads)
        except RuntimeError as e:
            log.warning("TensorFlow's thread pools stay as they are: %s", _short(e))
        cap = apply_tensorflow(config.gpu_cap)
        return AppliedRuntime(
            gpu_cap=cap,
            intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
            inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads(),
        )

    def cap_memory(self, limit: int | None) -> bool:
        return False  # the process's cap only: TensorFlow's allocator has no per-model one

    def load(self) -> None:
        import tensorflow as tf

        try:
            self._signatures = read_signature_defs(self._path)
            self._loaded = tf.saved_model.load(str(self._path), tags=["serve"])
        except ModelLoadError:
            raise
        except Exception as e:  # TF raises a zoo of types for corrupt or incompatible models
            raise ModelLoadError(f"TensorFlow could not load {self._path}: {_short(e)}") from e
        self._functions = {name: self._loaded.signatures[name] for name in self._signatures}
        if not self._signatures:
            raise ModelLoadError(f"{self._path} has no serving signatures")

    def unload(self) -> None:
        # The functions hold the loaded object's graph; with both gone, what TensorFlow holds
        # for them (variables, device buffers) goes at the next garbage collection, which the
        # model manager runs after an unload (a SavedModel's objects form cycles).
        self._functions = {}
        self._loaded = None

    def signatures(self) -> dict[str, Signature]:
        return self._signatures

    def allocator_reserved_bytes(self) -> int | None:
        # TensorFlow reports the bytes its allocator has handed out, not what it has taken from
        # the device (with a memory_limit it may take all of it up front): no honest figure.
        return None

    def weight_bytes(self) -> int:
        import tensorflow as tf

        if self._loaded is None:
            return 0
        # A SavedModel saved through a tf.Module (as `models build` saves) loads as a plain
        # trackable object without Keras' `.variables`: walk everything it holds. Variables
        # reached by two paths (a layer and its model) are one tensor: count once.
        variables = {
            id(node): node
            for node in tf.train.TrackableView(self._loaded).descendants()
            if isinstance(node, tf.Variable)
        }
        return sum(
            v.shape.num_elements() * v.dtype.size
            for v in variables.values()
            if v.shape.is_fully_defined()
        )

    def device_memory(self) -> DeviceMemory | None:
        if not _gpu_visible():
            return None
        import tensorflow as tf

        info = tf.config.experimental.get_memory_info(_GPU)
        return DeviceMemory(in_use=int(info["current"]), peak=int(info["peak"]))

    def reset_peak(self) -> None:
        if _gpu_visible():
            import tensorflow as tf

            tf.config.experimental.reset_memory_stats(_GPU)

    def page_out(self) -> None:
        # A SavedModel's objects form cycles: what it holds is freed at the next full
        # collection, which the caller runs (a version's page-out: off a page-in's path).
        self.unload()

    def page_in(self) -> None:
        if self._loaded is None:
            self.load()

    def predict(self, signature: Signature, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        function = self._functions.get(signature.name)
        if function is None:
            raise SharedServeError("the model is not loaded (or is paged out)")
        try:
            tensors = {
                key: tf.constant(value, dtype=tf.dtypes.as_dtype(signature.inputs[key].numpy_dtype))
                if signature.inputs[key].dtype != "DT_STRING"
                else tf.constant(value, dtype=tf.string)
                for key, value in inputs.items()
            }
            result = function(**tensors)
        except tf.errors.ResourceExhaustedError as e:
            raise ResourceExhausted(f"out of memory running the model: {_short(e)}") from e
        except tf.errors.InvalidArgumentError as e:
            raise InvalidInput(_short(e)) from e
        except (TypeError, ValueError) as e:
            # Raised by the concrete function's own argument checks (shape/dtype mismatch).
            raise InvalidInput(_short(e)) from e
        except tf.errors.OpError as e:
            raise SharedServeError(f"model execution failed: {_short(e)}") from e
        return {key: result[key].numpy() for key in signature.outputs}


def _gpu_visible() -> bool:
    import tensorflow as tf

    # Logical, not physical: a GPU hidden by the configuration holds nothing of ours.
    return bool(tf.config.list_logical_devices("GPU"))

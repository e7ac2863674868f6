"""One served model version and its life cycle, as TF Serving reports it.

States follow TF Serving's ``ModelVersionStatus.State``: START -> LOADING -> AVAILABLE ->
UNLOADING -> END. The model answers predictions only once loaded and warmed up, so a readiness
probe (``/v2/health/ready``) never admits traffic to a cold model. On SIGTERM it turns
UNLOADING at once (``begin_shutdown``): every readiness answer, REST and gRPC, reads ``state``, so
all of them say not-ready from then on, while predictions are still served until the listeners
close (``server/shutdown.py``).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from enum import Enum
from typing import Any

import numpy as np

from sharedserve.errors import InvalidInput, NotFound, NotReady, quoted
from sharedserve.server.version.backends.base import Backend, warm_up
from sharedserve.server.version.footprint import Footprint
from sharedserve.server.version.signature import Signature, TensorSpec
from sharedserve.server.version.source import ModelSource

__all__ = ["DEFAULT_SIGNATURE", "ModelState", "ServedModel", "parse_version", "unfrozen"]

log = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
_VERSION = re.compile(r"0*(?P<digits>[0-9]{1,19})")  # ASCII digits, no more than int64 has
_INT64_MAX = 2**63 - 1


def parse_version(text: str | None) -> int | None:
    """A version as a request names it (a path segment, a gRPC field); None or "" for the latest.

    InvalidInput unless it is an int64 in ASCII digits. Not int() alone: it takes any Unicode
    digit, and raises ValueError (a 500) from 4,301 digits on. TF Serving's versions are int64s;
    past that it answers 400 too.
    """
    if not text:
        return None
    number = _VERSION.fullmatch(text)
    if number is None or int(number["digits"]) > _INT64_MAX:
        raise InvalidInput(f"Malformed request: version {quoted(text)} is not an integer (int64)")
    return int(number["digits"])


def _nothing() -> None:
    return None


@contextlib.contextmanager
def unfrozen() -> Iterator[None]:
    """What ``run.py`` froze after loading at start (``gc.freeze``) is collectable within the
    block, and frozen again after it. A framework's model is objects in cycles (a TensorFlow
    ``mobilenet_v2``: some 39,000), which only a collection frees; frozen, no collection
    looks at them, so a model unloaded or paged out would keep its memory, host and device,
    for the life of the process."""
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    try:
        yield
    finally:
        if frozen:
            gc.freeze()


class ModelState(str, Enum):
    START = "START"
    LOADING = "LOADING"
    AVAILABLE = "AVAILABLE"
    UNLOADING = "UNLOADING"
    END = "END"


class ServedModel:
    """One served version; transports find it through ``registry.py`` and call ``signature``,
    ``predict``."""

    def __init__(self, source: ModelSource, backend: Backend, warm_rows: int = 1) -> None:
        """``warm_rows``: the largest batch it serves (its batching's ``max_batch_size``), the
        batch its warm-up runs and its footprint is measured at."""
        self.source = source
        self.backend = backend
        self.warm_rows = warm_rows
        self.footprint: Footprint | None = None
        self.state = ModelState.START
        self.error: str | None = None
        self.load_seconds: float | None = None
        self._serving = False  # loaded and warmed up, not yet unloaded: predictions answered
        self._stopping = False
        self._lock = threading.Lock()  # the loader thread's AVAILABLE vs. a shutdown's UNLOADING

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def version(self) -> int:
        return self.source.version

    @property
    def serving(self) -> bool:
        """Loaded and warmed up, not yet unloaded: predictions are answered."""
        return self._serving

    def load(
        self, prepare: Callable[[], object] = _nothing, admit: Callable[[], object] = _nothing
    ) -> None:
        """``prepare`` (room made for its budget: ``paging.py``), load and warm up, ``admit``
        (its memory counted), and only then serve; on a failure of any of them the framework
        lets go of it and the state is END with the error kept for status."""
        self.state = ModelState.LOADING
        started = time.perf_counter()
        try:
            prepare()
            self.footprint = self._measured_load()
            admit()
        except Exception as e:
            self.backend.unload()
            self.state = ModelState.END
            self.error = getattr(e, "message", None) or str(e)
            raise
        self.load_seconds = time.perf_counter() - started
        with self._lock:
            self._serving = True
            self.state = ModelState.UNLOADING if self._stopping else ModelState.AVAILABLE
        log.info(
            "model %r version %d AVAILABLE (loaded and warmed up in %.1f s)",
            self.name,
            self.version,
            self.load_seconds,
        )

    def _measured_load(self) -> Footprint:
        """Load and warm up at ``warm_rows``, measuring what each step took (``footprint.py``).
        Other models' requests may run meanwhile: on a GPU their activations come and go
        within the counters, so the weights (what stays) are exact and the peak an upper
        bound, the safe side for a budget."""
        backend = self.backend
        before = backend.device_memory()
        backend.reset_peak()
        backend.load()
        loaded = backend.device_memory()
        backend.reset_peak()
        tensors = warm_up(backend, self.warm_rows)
        warm = backend.device_memory()
        if before is None or loaded is None or warm is None:
            weights = backend.weight_bytes()
            return Footprint(weights, weights + tensors, self.warm_rows, on_gpu=False)
        weights = max(loaded.in_use - before.in_use, 0)
        peak = max(warm.peak - before.in_use, weights)
        return Footprint(weights, peak, self.warm_rows, on_gpu=True)

    def page_out(self) -> None:
        """Out of the device (``paging.py`` chose it, idle): torch keeps it in host memory,
        TensorFlow unloads it. Still served: the next request pages it in."""
        self.backend.page_out()

    def page_in(self) -> None:
        """Back on the device; a reloaded model is warmed up again, so that its first request
        is not the slow one."""
        self.backend.page_in()
        if not self.backend.pages_to_host:
            warm_up(self.backend)

    def begin_shutdown(self) -> None:
        """Not ready from now on (UNLOADING), while predictions are still answered: the drain
        before the listeners close."""
        with self._lock:
            self._stopping = True
            if self.state is ModelState.AVAILABLE:
                self.state = ModelState.UNLOADING

    @property
    def failed(self) -> bool:
        """It tried to load and could not (END with its error)."""
        return self.state is ModelState.END and self.error is not None

    def unload(self) -> None:
        """Predictions refused from now on, and the framework lets go of the model."""
        with self._lock:
            self._serving = False
            self.state = ModelState.UNLOADING
        self.backend.unload()
        with self._lock:
            self.state = ModelState.END

    def require_available(self) -> None:
        """NotReady, saying why, unless the model is ready for traffic (a readiness probe's
        question: no longer once the server is shutting down)."""
        if self.state is not ModelState.AVAILABLE:
            raise NotReady(self._not_ready_message())

    def require_serving(self) -> None:
        """NotReady, saying why, unless the model answers predictions: loaded and warmed up,
        and still while draining for a shutdown."""
        if not self._serving:
            raise NotReady(self._not_ready_message())

    def signature(self, signature_name: str | None) -> Signature:
        name = signature_name or DEFAULT_SIGNATURE
        self.require_serving()
        signature = self.backend.signatures().get(name)
        if signature is None:
            known = sorted(self.backend.signatures())
            raise NotFound(
                f"Serving signature name: {quoted(name)} not found in signature def; has {known}"
            )
        return signature

    def predict(self, signature: Signature, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.require_serving()
        return self.backend.predict(signature, inputs)

    def _not_ready_message(self) -> str:
        if self.state is ModelState.END and self.error:
            return f"model {self.name!r} failed to load: {self.error}"
        if self._stopping:
            return f"model {self.name!r} version {self.version} is shutting down (not ready)"
        return f"model {self.name!r} version {self.version} is not ready (state {self.state.value})"

    # -- TF Serving JSON views -------------------------------------------------------------

    def status_json(self) -> dict[str, Any]:
        error_code, message = ("OK", "")
        if self.state is ModelState.END and self.error:
            error_code, message = ("UNKNOWN", self.error)
        return {
            "model_version_status": [
                {
                    "version": str(self.version),
                    "state": self.state.value,
                    "status": {"error_code": error_code, "error_message": message},
                }
            ]
        }

    def metadata_json(self) -> dict[str, Any]:
        self.require_serving()
        signature_defs = {
            name: {
                "inputs": {k: _tensor_info(v) for k, v in sig.inputs.items()},
                "outputs": {k: _tensor_info(v) for k, v in sig.outputs.items()},
                "method_name": sig.method_name,
                "defaults": {},
            }
            for name, sig in self.backend.signatures().items()
        }
        return {
            "model_spec": {"name": self.name, "signature_name": "", "version": str(self.version)},
            "metadata": {"signature_def": {"signature_def": signature_defs}},
        }


def _tensor_info(spec: TensorSpec) -> dict[str, Any]:
    # int64 fields are strings in proto3 JSON, which is what TF Serving's REST API prints.
    dims = [] if spec.shape is None else [{"size": str(d), "name": ""} for d in spec.shape]
    return {
        "dtype": spec.dtype,
        "tensor_shape": {"dim": dims, "unknown_rank": spec.shape is None},
        "name": spec.tensor_name,
    }

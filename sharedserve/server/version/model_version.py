"""One served model version: what it is (its source and its model's settings), what runs it (its
backend), what it holds (its footprint, the bytes counted for it), its requests in flight, and
its one state, with every transition in this file.

::

    START -> LOADING -> AVAILABLE -> PAGING_OUT -> PAGED_OUT -> PAGING_IN -> AVAILABLE
                   \\           \\                    \\
                    FAILED       RETIRING <------------' (idle, not moving) -> GONE

- START: named (routed, so status answers), not loading yet; LOADING: loading and warming up.
- AVAILABLE: resident and serving. PAGING_OUT, PAGED_OUT, PAGING_IN: moved off the device to
  make room for another version, and back (``memory/``); still served: a request pages it in.
- RETIRING: no longer routed, idle, being unloaded; GONE: unloaded.
- FAILED: it could not load (``error`` says why); reported, never served. A stand-in for a
  model none of whose versions could be made (``stand_in``) is FAILED from the start.

One lock, ``LOCK``, guards every version's state and counts and the process memory's totals:
requests take it on the event loop (a state check and a counter), loads and moves in worker
threads. Every request holds its version through ``inflight`` from its admission to its answer
(``memory.Memory.use``): a retire waits for it to reach 0, paging moves out only a version with
none, and its model's ``max_inflight`` adds its versions' counts.

A shutdown is not a state of a version but of the server: the registry answers not-ready while
the versions serve on until the listeners close (``process/shutdown.py``).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from sharedserve.enums import Framework
from sharedserve.errors import InvalidInput, NotFound, NotReady, ResourceExhausted, quoted
from sharedserve.server.version.backends.base import Backend, NoModel, warm_up
from sharedserve.server.version.footprint import Footprint, mib, shown
from sharedserve.server.version.moves import Moves
from sharedserve.server.version.settings import ModelSettings
from sharedserve.server.version.signature import Signature
from sharedserve.server.version.source import ModelSource

__all__ = [
    "DEFAULT_SIGNATURE",
    "LOCK",
    "MEMORY_STATES",
    "MOVES",
    "SERVING",
    "ModelVersion",
    "VersionState",
    "collect",
    "freeze_process",
    "parse_version",
    "unfrozen",
]

log = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
_VERSION = re.compile(r"0*(?P<digits>[0-9]{1,19})")  # ASCII digits, no more than int64 has
_INT64_MAX = 2**63 - 1

LOCK = threading.Lock()
"""Every version's state and counts, and the process memory's totals (module docstring)."""
MOVES = Moves(LOCK)
"""Notified under ``LOCK`` on every state move and every version's last request ending: what a
blocked page-in or a retire waits for (``moves.py``)."""


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


_FREEZES = [0]
"""How many times the process's objects were frozen (``freeze_process``, ``unfrozen``)."""


def freeze_process() -> None:
    """What the process holds now (the frameworks imported, the server's own objects) kept out
    of every later collection. Called once, before a model loads: a collection that frees a
    model let go of then walks the models' objects, not the framework's (a full collection of
    a process with TensorFlow and four ``mobilenet_v2``, ~600,000 objects, held the interpreter
    lock for 0.27 s, nearly all of it walking them; freeing one model added 0.01 s:
    ``benchmarks/results/interpreter_lock_cpu.md``)."""
    gc.collect()
    gc.freeze()
    _FREEZES[0] += 1


@contextlib.contextmanager
def unfrozen() -> Iterator[None]:
    """What was frozen (``gc.freeze``) is collectable within the block, and frozen again after
    it. Needed where a model let go of was made before the last freeze (a server started in a
    process where another had frozen its objects): a framework's model is objects in cycles (a
    TensorFlow ``mobilenet_v2``: some 39,000), which only a collection frees; frozen, no
    collection looks at them, and the model would keep its memory, host and device, for the
    life of the process."""
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    try:
        yield
    finally:
        if frozen:
            gc.freeze()
            _FREEZES[0] += 1  # what was made before is frozen now


def collect(versions: Iterable[ModelVersion]) -> None:
    """The collection that frees what ``versions`` let go of: of the unfrozen objects alone
    where they were all made since the last freeze, else of every object (``unfrozen``)."""
    if any(version.made_at < _FREEZES[0] for version in versions):
        with unfrozen():
            gc.collect()
    else:
        gc.collect()


class VersionState(str, Enum):
    START = "start"
    LOADING = "loading"
    AVAILABLE = "available"
    PAGING_OUT = "paging_out"
    PAGED_OUT = "paged_out"
    PAGING_IN = "paging_in"
    RETIRING = "retiring"
    GONE = "gone"
    FAILED = "failed"


S = VersionState
SERVING = frozenset({S.AVAILABLE, S.PAGING_OUT, S.PAGED_OUT, S.PAGING_IN})
"""Loaded and warmed up, not retired: predictions are answered (paged in first where out)."""
_NEXT: dict[VersionState, frozenset[VersionState]] = {
    S.START: frozenset({S.LOADING, S.RETIRING}),
    S.LOADING: frozenset({S.AVAILABLE, S.FAILED}),
    S.AVAILABLE: frozenset({S.PAGING_OUT, S.RETIRING}),
    S.PAGING_OUT: frozenset({S.PAGED_OUT}),
    S.PAGED_OUT: frozenset({S.PAGING_IN, S.RETIRING}),
    S.PAGING_IN: frozenset({S.AVAILABLE, S.PAGED_OUT}),
    S.RETIRING: frozenset({S.GONE}),
    S.FAILED: frozenset({S.RETIRING}),
    S.GONE: frozenset(),
}
_MEMORY_STATE = {
    S.START: "loading",
    S.LOADING: "loading",
    S.AVAILABLE: "resident",
    S.PAGING_OUT: "paging_out",
    S.PAGED_OUT: "paged_out",
    S.PAGING_IN: "paging_in",
    S.RETIRING: "resident",
    S.GONE: "paged_out",
    S.FAILED: "failed",
}
MEMORY_STATES = tuple(dict.fromkeys(_MEMORY_STATE.values()))
"""The states ``/sharedserve/v1/limits`` shows for a version's memory."""


class ModelVersion:
    """One served version of a model (see the module docstring)."""

    def __init__(self, source: ModelSource, settings: ModelSettings, backend: Backend) -> None:
        self.source, self.settings, self.backend = source, settings, backend
        self.state = VersionState.START
        self.error: str | None = None
        """Why it failed to load (FAILED)."""
        self.footprint: Footprint | None = None
        """What it held at load, measured (``footprint.py``); None until loaded."""
        self.load_seconds: float | None = None
        self.made_at = _FREEZES[0]
        """The freezes before its framework objects were made (``collect``)."""
        self.held = 0
        """Bytes counted for it against the process's memory now."""
        self.inflight = 0
        """Its requests admitted and not yet answered, those waiting for a page-in included."""
        self.last_use: float | None = None  # wall clock, for /limits; LRU order reads touched
        self.touched = 0.0
        self.paging_in: Any = None  # the page-in under way (an asyncio task), for its waiters
        self.enforced = False
        """Its runtime holds it to its budget itself (``Backend.cap_memory``), from its load."""

    @classmethod
    def stand_in(cls, name: str, reason: str) -> ModelVersion:
        """In the place of a model none of whose versions could be made (its path missing, its
        folder empty or half-copied, its framework not installed): FAILED with ``reason`` from
        the start, so that it is routed and reported as a version that failed to load is
        (status END with the reason, the repository index, readiness, 503 to its requests)
        until the model's next load replaces it. Version 0, for status's sake; no files, so
        its framework is never read (a FAILED version has no metadata)."""
        stand_in = cls(
            ModelSource(name, 0, Path(), Framework.TENSORFLOW), ModelSettings(), NoModel()
        )
        with LOCK:  # a move wakes waiters (``moves.py``), which needs the lock held
            stand_in.to(S.LOADING)
            stand_in.to(S.FAILED)
            stand_in.error = reason
        return stand_in

    @property
    def is_stand_in(self) -> bool:
        """A stand-in (``stand_in``), not a version on disk."""
        return isinstance(self.backend, NoModel)

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def version(self) -> int:
        return self.source.version

    @property
    def serving(self) -> bool:
        return self.state in SERVING

    @property
    def need(self) -> int:
        """Bytes it holds while resident: its budget, else its measured peak."""
        budget = self.settings.memory_budget
        if budget is not None:
            return budget
        return 0 if self.footprint is None else self.footprint.peak

    # -- transitions (under LOCK, but for load and unload: their worker thread owns them) ------

    def to(self, state: VersionState) -> None:
        """The one way its state changes; a move the diagram does not have is a bug."""
        if state not in _NEXT[self.state]:
            raise RuntimeError(
                f"model {self.name!r} version {self.version}: no move {self.state.value} -> "
                f"{state.value}"
            )
        self.state = state
        MOVES.notify()

    def admit(self) -> bool:
        """Under LOCK: one more request in flight; -> resident now (else it waits for a
        page-in). NotFound once retired (routed to before the swap), NotReady until loaded."""
        if self.state in (S.RETIRING, S.GONE):
            raise NotFound(
                f"Servable not found for request: Specific({quoted(self.name)}, {self.version})"
            )
        if self.state not in SERVING:
            raise NotReady(self.not_ready_message())
        self.inflight += 1
        if self.state is S.AVAILABLE:
            self.touch()
            return True
        return False

    def release(self) -> None:
        """Under LOCK: a request answered; its last one makes it movable (and retirable)."""
        self.inflight -= 1
        if not self.inflight:
            MOVES.notify()

    def touch(self) -> None:
        self.last_use, self.touched = time.time(), time.monotonic()

    # -- work (worker threads) ------------------------------------------------------------------

    def load(self) -> Footprint:
        """Load and warm up at its largest batch, measuring what each step took: on a GPU from
        the framework's allocator (other models' activations come and go within the counters,
        so the weights are exact and the peak an upper bound, the safe side for a budget), else
        from the tensors' bytes. Its state is the memory's to move (``Memory.load``)."""
        backend, rows = self.backend, self.settings.warm_rows
        started = time.perf_counter()
        before = backend.device_memory()
        backend.reset_peak()
        enforced = backend.cap_memory(self.settings.memory_budget)
        backend.load()
        self.made_at = _FREEZES[0]
        self.enforced = enforced  # once loaded: a version that failed to load enforces nothing
        loaded = backend.device_memory()
        backend.reset_peak()
        tensors = warm_up(backend, rows)
        warm = backend.device_memory()
        self.load_seconds = time.perf_counter() - started
        if before is None or loaded is None or warm is None:
            weights = backend.weight_bytes()
            return Footprint(weights, weights + tensors, rows, on_gpu=False)
        weights = max(loaded.in_use - before.in_use, 0)
        peak = max(warm.peak - before.in_use, weights)
        return Footprint(weights, peak, rows, on_gpu=True)

    def page_out(self) -> bool:
        """Off the device (idle, chosen by the memory): torch keeps it in host memory,
        TensorFlow lets go of it. -> whether a collection (``collect``) is owed: what was let
        go of is freed only by one, which the caller runs where it costs no page-in a wait."""
        self.backend.page_out()
        return not self.backend.pages_to_host

    @property
    def on_device(self) -> bool:
        """Its framework runs it on a GPU, where what it frees is device memory."""
        return self.backend.device_memory() is not None

    def page_in(self) -> None:
        """Back on the device; a reloaded model is warmed up again, so that its first request
        is not the slow one."""
        self.backend.page_in()
        if not self.backend.pages_to_host:
            self.made_at = _FREEZES[0]  # reloaded: its objects are new
            warm_up(self.backend)

    def unload(self) -> None:
        """RETIRING -> GONE: the framework lets go of it."""
        self.backend.unload()
        with LOCK:
            self.to(S.GONE)

    # -- what requests ask ------------------------------------------------------------------------

    def signature(self, signature_name: str | None) -> Signature:
        name = signature_name or DEFAULT_SIGNATURE
        if not self.serving:
            raise NotReady(self.not_ready_message())
        signature = self.backend.signatures().get(name)
        if signature is None:
            known = sorted(self.backend.signatures())
            raise NotFound(
                f"Serving signature name: {quoted(name)} not found in signature def; has {known}"
            )
        return signature

    def signatures(self) -> dict[str, Signature]:
        """Every signature, by name; NotReady until it serves."""
        if not self.serving:
            raise NotReady(self.not_ready_message())
        return dict(self.backend.signatures())

    def predict(self, signature: Signature, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.backend.predict(signature, inputs)

    def check_rows(self, rows: int) -> None:
        """ResourceExhausted when a batch of ``rows`` would outgrow the version's budget."""
        budget, footprint = self.settings.memory_budget, self.footprint
        if budget is None or footprint is None:
            return
        need = footprint.need(rows)
        if need > budget:
            raise ResourceExhausted(
                f"model {self.name!r} version {self.version} would need about {shown(need)} "
                f"for a batch of {rows} rows, past its budget of {shown(budget)} "
                "(gpu_memory_mib); send fewer rows per request"
            )

    def not_ready_message(self) -> str:
        if self.state is S.FAILED:
            return f"model {self.name!r} failed to load: {self.error}"
        return (
            f"model {self.name!r} version {self.version} is not ready (state "
            f"{self.state.value.upper()})"
        )

    def report(self) -> dict[str, Any]:
        """Its part of ``/sharedserve/v1/limits``: state, budget, footprint, last use."""
        footprint = self.footprint
        return {
            "state": _MEMORY_STATE[self.state],
            "error": self.error,
            "pinned": self.settings.pinned,
            "budget_mib": mib(self.settings.memory_budget),
            "enforced": self.enforced,
            "weights_mib": None if footprint is None else mib(footprint.weights),
            "peak_mib": None if footprint is None else mib(footprint.peak),
            "measured_on": None if footprint is None else ("gpu" if footprint.on_gpu else "host"),
            "held_mib": mib(self.held),
            "page_in_from": self.backend.page_in_from,
            "last_use": self.last_use,
        }

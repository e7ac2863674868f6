"""One model version's place in its server's memory (``paging.py`` keeps them all): its state,
budget, what it holds, its requests running and waiting, and its last use."""

from __future__ import annotations

import asyncio
import contextlib
import time
from enum import Enum
from typing import TYPE_CHECKING, Any

from sharedserve.errors import ResourceExhausted
from sharedserve.server.version.footprint import Footprint, mib, shown
from sharedserve.server.version.model import ServedModel

if TYPE_CHECKING:  # paging.py makes tenants; only a type here
    from sharedserve.server.memory.paging import Memory

__all__ = ["Residence", "Tenant"]


class Residence(str, Enum):
    LOADING = "loading"
    RESIDENT = "resident"
    PAGING_OUT = "paging_out"
    PAGED_OUT = "paged_out"
    PAGING_IN = "paging_in"


class Tenant:
    """One model version's place in the process's memory."""

    def __init__(self, memory: Memory, model: ServedModel, budget: int | None, pinned: bool):
        self.memory = memory
        self.model, self.budget, self.pinned = model, budget, pinned
        self.state = Residence.LOADING
        self.gone = False  # unloaded: a page-in it waited for is called off
        self.held = 0  # bytes counted against the capacity now
        self.busy = 0  # requests running on it
        self.waiting = 0  # requests waiting for it to be paged in
        self.last_use: float | None = None  # wall clock, for /limits; LRU order uses touched
        self.touched = 0.0
        self.paging_in: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def need(self) -> int:
        """Bytes it holds while resident: its budget, else its measured peak."""
        if self.budget is not None:
            return self.budget
        footprint = self.model.footprint
        return 0 if footprint is None else footprint.peak

    def load(self) -> None:
        """Its model loaded and counted: ``Memory.load``."""
        self.memory.load(self)

    def use(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Resident for the block (paged in first where it is out): ``Memory.use``."""
        return self.memory.use(self)

    def touch(self) -> None:
        self.last_use, self.touched = time.time(), time.monotonic()

    def check_rows(self, rows: int) -> None:
        """ResourceExhausted when a batch of ``rows`` would outgrow the version's budget."""
        footprint: Footprint | None = self.model.footprint
        if self.budget is None or footprint is None:
            return
        need = footprint.need(rows)
        if need > self.budget:
            raise ResourceExhausted(
                f"model {self.name!r} version {self.model.version} would need about "
                f"{shown(need)} for a batch of {rows} rows, past its budget of "
                f"{shown(self.budget)} (gpu_memory_mib); send fewer rows per request"
            )

    def report(self) -> dict[str, Any]:
        footprint = self.model.footprint
        return {
            # A version that failed to load (or did not fit) stays listed, saying why.
            "state": "failed" if self.model.failed else self.state.value,
            "error": self.model.error,
            "pinned": self.pinned,
            "budget_mib": mib(self.budget),
            "weights_mib": None if footprint is None else mib(footprint.weights),
            "peak_mib": None if footprint is None else mib(footprint.peak),
            "measured_on": None if footprint is None else ("gpu" if footprint.on_gpu else "host"),
            "held_mib": mib(self.held),
            "last_use": self.last_use,
        }

"""Which model versions hold the process's memory, and making room for one.

The capacity is the process's GPU cap (the env contract's, ``--gpu-memory-mib``); on a host
without a GPU the same accounting runs against the recorded cap, so every path here runs and is
tested without one: only the device copy is a no-op there. Each served version holds ``need``
bytes while resident: its budget (``gpu_memory_mib`` in its model file), else its peak as
measured at load (``version/footprint.py``).

- A version that does not fit is refused (``InsufficientMemory``, with the figures): a budget
  past the capacity before anything loads, a measured peak past its own budget, a need past
  what the others leave. Its own requests that would outgrow its budget get 503; no other
  model is touched.
- With ``--paging lru`` room is made instead: the least recently used versions that are idle
  (no request in flight, those waiting for a page-in included) and not ``pinned`` move out
  (torch to host memory, TensorFlow unloaded), and a request for a paged-out version pages it
  back in, waiting at most ``--page-in-timeout`` for room, then 503 with ``Retry-After``.

The versions' one lock (``version.LOCK``) guards their states and what they hold. The moves
themselves run in worker threads outside it: a version chosen to move out is marked first
(PAGING_OUT), so no request starts on it, and one moving in is counted as held before it
arrives, so two page-ins never count on the same room. A page-in blocked for room, and a
retire waiting for its version, wake on the move that unblocks them (``version.MOVES``), not
on a poll.

A TensorFlow version paged out is let go of at once, but freed only by a full collection
(0.25-0.35 s for a ``mobilenet_v2``, most of it TensorFlow freeing the model). Off a GPU that
collection runs after the page-in that evicted it, in a thread of its own, so no page-in waits
for it; on a GPU it runs before, as the room the accounting grants must be free on the device
before the next model allocates there.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from anyio import to_thread

from sharedserve.errors import InsufficientMemory, NotReady, NotResident
from sharedserve.server.metrics import PagingMetrics
from sharedserve.server.version import (
    LOCK,
    MOVES,
    ModelVersion,
    VersionState,
    collect,
    mib,
    shown,
)

__all__ = ["DEFAULT_PAGE_IN_TIMEOUT_S", "Memory"]

S = VersionState
DEFAULT_PAGE_IN_TIMEOUT_S = 30.0
RETRY_AFTER_S = 1.0
"""What a timed-out request is told to wait: the wait ended because every model in memory was
busy, which clears within about a request's time, and the page-in it started goes on, so a
retry a second later finds its model resident (or its page-in under way)."""


class Memory:
    """The process's model memory: its versions, what they hold, paging when it is on."""

    def __init__(
        self,
        metrics: PagingMetrics | None = None,
        capacity: int | None = None,
        *,
        paging: bool = False,
        page_in_timeout_s: float = DEFAULT_PAGE_IN_TIMEOUT_S,
    ) -> None:
        self.metrics, self.capacity, self.paging = metrics, capacity, paging
        self.page_in_timeout_s = page_in_timeout_s
        self._versions: list[ModelVersion] = []
        self._owed: list[ModelVersion] = []  # paged out, let go of, not yet collected
        self._collecting = threading.Lock()

    @property
    def held(self) -> int:
        return sum(v.held for v in self._versions)

    def versions_of(self, name: str) -> list[ModelVersion]:
        return [v for v in self._versions if v.name == name]

    # -- loads and retires (worker threads) ---------------------------------------------------

    def load(self, version: ModelVersion) -> None:
        """In a worker thread: room for the version (a budget's before it loads), then it
        loaded, measured and counted before it serves; on any failure (InsufficientMemory with
        the figures, or the framework's) it is FAILED with the reason, the framework has let
        go of it, and it holds nothing."""
        with LOCK:
            version.to(S.LOADING)
            if version not in self._versions:
                self._versions.append(version)
        self._track(version.name)
        started, wall = time.thread_time(), time.perf_counter()
        try:
            budget = version.settings.memory_budget
            if budget is not None:  # the room first: a GPU's allocator never holds it past the cap
                self._take(version, budget)
            version.footprint = version.load()
            self._admit(version)
        except Exception as e:
            version.backend.unload()
            with LOCK:
                version.held, version.error = 0, getattr(e, "message", None) or str(e)
                if version.state is S.LOADING:
                    version.to(S.FAILED)
            raise
        finally:
            self._cpu_spent(version.name, started)
            self.settle()
        if self.metrics is not None:
            self.metrics.loaded(version.name, time.perf_counter() - wall)

    def _admit(self, version: ModelVersion) -> None:
        footprint, budget = version.footprint, version.settings.memory_budget
        if budget is not None and footprint is not None and footprint.peak > budget:
            raise InsufficientMemory(
                f"model {version.name!r} version {version.version} measured "
                f"{shown(footprint.peak)} at its peak (a warm-up at {footprint.rows} rows), "
                f"past its budget of {shown(budget)} (gpu_memory_mib)"
            )
        self._take(version, version.need, becomes=S.AVAILABLE)

    def _take(self, version: ModelVersion, size: int, becomes: S | None = None) -> None:
        """``version`` holds ``size`` bytes (and ``becomes`` that state), others paged out for
        it where paging allows; InsufficientMemory where there is no room."""
        with LOCK:
            victims = self._room_for(version, size)
            if victims is None:
                raise InsufficientMemory(self._no_room(version, size))
            self._claim(version, size, victims)
            if becomes is not None:
                version.to(becomes)
                version.touch()
        self._make_room(victims)

    def retire(self, version: ModelVersion, drain_s: float) -> bool:
        """In a worker thread, once no longer routed: RETIRING as soon as it is idle and not
        moving (its bytes free from then on), or at ``drain_s`` whatever runs; -> whether its
        requests all finished."""
        deadline = time.monotonic() + drain_s
        with LOCK:
            while True:
                settled = version.state not in (S.LOADING, S.PAGING_IN, S.PAGING_OUT)
                left = deadline - time.monotonic()
                if settled and (version.inflight == 0 or left <= 0):
                    version.to(S.RETIRING)
                    version.held = 0
                    self._versions = [v for v in self._versions if v is not version]
                    return version.inflight == 0
                # Woken as its last request ends or its move does; the deadline only matters
                # while requests run (a move always ends).
                MOVES.wait(left if settled else None)

    # -- requests (the event loop) ----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def use(self, version: ModelVersion) -> AsyncIterator[None]:
        """The request is in flight on ``version`` for the block, which is resident and not
        moved out meanwhile (paged in first where it was out)."""
        with LOCK:
            resident = version.admit()
        try:
            if not resident:
                await self._wait_resident(version)
            yield
        finally:
            with LOCK:
                version.release()

    async def _wait_resident(self, version: ModelVersion) -> None:
        started = time.perf_counter()
        try:
            while True:
                if version.paging_in is None or version.paging_in.done():
                    loop = asyncio.get_running_loop()
                    version.paging_in = loop.create_task(self._page_in(version))
                left = self.page_in_timeout_s - (time.perf_counter() - started)
                try:
                    await asyncio.wait_for(asyncio.shield(version.paging_in), max(left, 0))
                except asyncio.TimeoutError:  # not TimeoutError before Python 3.11
                    raise NotResident(self._timed_out(version), RETRY_AFTER_S) from None
                with LOCK:
                    if version.state is S.AVAILABLE:
                        version.touch()
                        return
        finally:
            if self.metrics is not None:
                self.metrics.waited(version.name, time.perf_counter() - started)

    async def _page_in(self, version: ModelVersion) -> None:
        """Room made (waiting while the others are busy), then the version moved in."""
        started = time.perf_counter()
        while True:
            with LOCK:
                if version.state in (S.RETIRING, S.GONE):
                    raise NotReady(f"model {version.name!r} version {version.version} was unloaded")
                if version.state is S.AVAILABLE:
                    return
                victims = None
                if version.state is S.PAGED_OUT:
                    victims = self._room_for(version, version.need)
                if victims is not None:
                    self._claim(version, version.need, victims)
                    version.to(S.PAGING_IN)
                    break
                # Others busy or pinned, or it is still moving out: registered under the lock,
                # so the move that makes room wakes it.
                moved = MOVES.next()
            await moved
        try:
            await to_thread.run_sync(self._charged, version.name, self._make_room, victims)
            await to_thread.run_sync(self._charged, version.name, version.page_in)
        except BaseException:
            with LOCK:
                version.to(S.PAGED_OUT)
                version.held = 0
            self._settle_later()
            raise
        with LOCK:
            version.to(S.AVAILABLE)
            version.touch()
        self._settle_later()  # once it serves: its waiters need not wait for the collection
        if self.metrics is not None:
            reload = not version.backend.pages_to_host
            self.metrics.page_in(
                version.name, "reload" if reload else "device_copy", time.perf_counter() - started
            )
            if reload:
                self.metrics.cold_start(version.name)

    # -- choosing and moving (under the lock / in worker threads) --------------------------------

    def _room_for(self, version: ModelVersion, size: int) -> list[ModelVersion] | None:
        """The versions to move out so that ``version`` can hold ``size`` bytes (none needed:
        []), least recently used first; None when even all of the movable ones would not do."""
        if self.capacity is None:
            return []
        free = self.capacity - (self.held - version.held)
        if size <= free:
            return []
        if not self.paging or size > self.capacity:
            return None
        movable = sorted(
            (
                v
                for v in self._versions
                if v is not version
                and v.state is S.AVAILABLE
                and not v.settings.pinned
                and v.inflight == 0
            ),
            key=lambda v: v.touched,
        )
        victims: list[ModelVersion] = []
        for victim in movable:
            if size <= free:
                break
            victims.append(victim)
            free += victim.held
        return victims if size <= free else None

    def _claim(self, version: ModelVersion, size: int, victims: list[ModelVersion]) -> None:
        for victim in victims:
            victim.to(S.PAGING_OUT)
            victim.held = 0
        version.held = size

    def _make_room(self, victims: list[ModelVersion]) -> None:
        """In a worker thread: each victim paged out (a failure leaves it out all the same:
        its room is taken already, and a page-in reloads it). What they let go of is collected
        now where it is device memory the next model needs, else later (``settle``)."""
        owed: list[ModelVersion] = []
        try:
            for victim in victims:
                try:
                    if victim.page_out():
                        owed.append(victim)
                finally:
                    with LOCK:
                        victim.to(S.PAGED_OUT)
                if self.metrics is not None:
                    self.metrics.page_out(victim.name)
        finally:
            if owed:
                with LOCK:
                    self._owed += owed
                if any(v.on_device for v in victims):
                    self.settle()

    def settle(self) -> None:
        """In a worker thread: the collection that frees what page-outs let go of, if one is
        owed; returns once it has run (whoever started it)."""
        with self._collecting:
            with LOCK:
                owed, self._owed = self._owed, []
            if owed:
                collect(owed)

    def _settle_later(self) -> None:
        with LOCK:
            owed = bool(self._owed)
        if owed:  # not on the page-in's path: its waiters go on meanwhile
            threading.Thread(target=self.settle, name="sharedserve-collect", daemon=True).start()

    def _charged(self, model: str, run: Callable[..., Any], *args: Any) -> None:
        """In a worker thread: ``run(*args)``, its CPU time charged to ``model``, whose page-in
        it is for (the page-outs that make its room too)."""
        started = time.thread_time()
        try:
            run(*args)
        finally:
            self._cpu_spent(model, started)

    def _cpu_spent(self, model: str, started: float) -> None:
        if self.metrics is not None:
            self.metrics.cpu_spent(model, time.thread_time() - started)

    def _track(self, name: str) -> None:
        if self.metrics is not None:
            self.metrics.track_memory(
                name,
                lambda: float(sum(v.need for v in self.versions_of(name))),
                lambda: float(sum(v.held for v in self.versions_of(name))),
            )

    # -- reports ----------------------------------------------------------------------------------

    def _no_room(self, version: ModelVersion, size: int) -> str:
        what = f"model {version.name!r} version {version.version} needs {shown(size)}"
        budgeted = version.settings.memory_budget is not None
        source = "its budget, gpu_memory_mib" if budgeted else "its measured peak"
        assert self.capacity is not None  # no capacity: always room
        if size > self.capacity:
            return f"{what} ({source}), more than the process's cap of {shown(self.capacity)}"
        holders = sorted({v.name for v in self._versions if v.held and v is not version})
        why = "the others are busy or pinned" if self.paging else "paging is off (--paging lru)"
        return (
            f"{what} ({source}); the process's cap is {shown(self.capacity)}, of which "
            f"{shown(self.held - version.held)} is held by {', '.join(holders) or 'none'}, "
            f"and {why}"
        )

    def _timed_out(self, version: ModelVersion) -> str:
        return (
            f"model {version.name!r} version {version.version} is paged out and could not "
            f"be paged in within {self.page_in_timeout_s:g} s (--page-in-timeout): the models "
            "in memory are busy or pinned; retry later"
        )

    def report(self) -> dict[str, Any]:
        """The ``memory`` part of ``/sharedserve/v1/limits``."""
        return {
            "capacity_mib": mib(self.capacity),
            "held_mib": mib(self.held),
            "paging": "lru" if self.paging else "off",
            "page_in_timeout_s": self.page_in_timeout_s,
            "timings": {} if self.metrics is None else self.metrics.timings(),
        }

"""Which model versions hold the process's memory, and making room for one (issue 30 items 3-4).

The capacity is the process's GPU cap (the env contract's, ``--gpu-memory-mib``); on a host
without a GPU the same accounting runs against the recorded cap, so every path here runs and is
tested without one: only the device copy is a no-op there. Each served version is a ``Tenant``
that holds ``need`` bytes while resident: its budget (``gpu_memory_mib`` in its model file),
else its peak as measured at load (``footprint.py``).

- A version that does not fit is refused (``InsufficientMemory``, with the figures): a budget
  past the capacity before anything loads, a measured peak past its own budget, a need past
  what the others leave. Its own requests that would outgrow its budget get 503; no other
  model is touched.
- With ``--paging lru`` room is made instead: the least recently used versions that are idle
  (no request in flight or waiting) and not ``pinned`` move out (``ServedModel.page_out``:
  torch to host memory, TensorFlow unloaded), and a request for a paged-out version pages it
  back in, waiting at most ``--page-in-timeout`` for room, then 503 with ``Retry-After``.

One threading lock guards every tenant's state and the total held: requests take it on the
event loop (a state check and a counter), loads in worker threads. The moves themselves run in
worker threads outside it: a version chosen to move out is marked first (PAGING_OUT), so no
request starts on it, and one moving in is counted as held before it arrives, so two page-ins
never count on the same room.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from anyio import to_thread

from sharedserve.errors import InsufficientMemory, NotReady, NotResident
from sharedserve.server.memory.tenant import Residence, Tenant
from sharedserve.server.metrics.paging import PagingMetrics
from sharedserve.server.version.footprint import mib, shown
from sharedserve.server.version.model import ServedModel, unfrozen

__all__ = ["Memory"]

DEFAULT_PAGE_IN_TIMEOUT_S = 30.0
RETRY_AFTER_S = 1.0
"""What a timed-out request is told to wait: the wait ended because every model in memory was
busy, which clears within about a request's time, and the page-in it started goes on, so a
retry a second later finds its model resident (or its page-in under way)."""
_POLL_S = 0.005
"""How often a blocked page-in looks again for room. A poll, not a condition: room is freed
on the loop (requests ending) and in worker threads (loads, unloads), and a short poll while
blocked is simpler to get right than waking a loop from both."""


class Memory:
    """The process's model memory: its tenants, what they hold, paging when it is on."""

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
        self._tenants: list[Tenant] = []
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        return sum(t.held for t in self._tenants)

    def tenant(self, model: ServedModel, budget: int | None, pinned: bool) -> Tenant:
        """A place for ``model`` (LOADING: not counted until ``admit``)."""
        tenant = Tenant(self, model, budget, pinned)
        with self._lock:
            self._tenants.append(tenant)
        if self.metrics is not None:
            name = tenant.name
            self.metrics.track_memory(
                name,
                lambda: float(sum(t.need for t in self.tenants_of(name))),
                lambda: float(sum(t.held for t in self.tenants_of(name))),
            )
        return tenant

    def forget(self, tenant: Tenant) -> None:
        """The version is no longer served: its bytes are free."""
        with self._lock:
            tenant.held, tenant.gone = 0, True
            self._tenants = [t for t in self._tenants if t is not tenant]

    # -- loads (worker threads) --------------------------------------------------------------

    def load(self, tenant: Tenant) -> None:
        """In a worker thread: room for the version (a budget's before it loads), then its
        model loaded, measured and counted before it serves; InsufficientMemory (the model
        unloaded again, END with the figures) where it does not fit."""
        try:
            tenant.model.load(
                prepare=lambda: self.before_load(tenant), admit=lambda: self.admit(tenant)
            )
        except BaseException:
            self._release(tenant)
            raise

    def before_load(self, tenant: Tenant) -> None:
        """Room for a budget before its model loads, so a GPU's allocator never holds it past
        the cap; InsufficientMemory where there is none. No budget: nothing to check yet."""
        if tenant.budget is not None:
            self._take(tenant, tenant.budget)

    def admit(self, tenant: Tenant) -> None:
        """The loaded version counted at its need (InsufficientMemory: does not fit), resident."""
        footprint = tenant.model.footprint
        if tenant.budget is not None and footprint is not None and footprint.peak > tenant.budget:
            raise InsufficientMemory(
                f"model {tenant.name!r} version {tenant.model.version} measured "
                f"{shown(footprint.peak)} at its peak (a warm-up at {footprint.rows} rows), "
                f"past its budget of {shown(tenant.budget)} (gpu_memory_mib)"
            )
        self._take(tenant, tenant.need)
        with self._lock:
            tenant.state = Residence.RESIDENT
            tenant.touch()
        if self.metrics is not None:
            self.metrics.cold_start(tenant.name)

    def _take(self, tenant: Tenant, size: int) -> None:
        """``tenant`` holds ``size`` bytes, others paged out for it where paging allows."""
        with self._lock:
            victims = self._room_for(tenant, size)
            if victims is None:
                raise InsufficientMemory(self._no_room(tenant, size))
            self._claim(tenant, size, victims)
        self._move_out(victims)

    def _release(self, tenant: Tenant) -> None:
        with self._lock:
            tenant.held = 0

    # -- requests (the event loop) -----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def use(self, tenant: Tenant) -> AsyncIterator[None]:
        """The version is resident while the block runs, and not moved out meanwhile."""
        with self._lock:
            ready = tenant.state in (Residence.RESIDENT, Residence.LOADING)
            if ready:  # LOADING: not served yet; the model itself answers why
                tenant.busy += 1
                tenant.touch()
            else:
                tenant.waiting += 1
        if not ready:
            await self._wait_resident(tenant)
        try:
            yield
        finally:
            with self._lock:
                tenant.busy -= 1

    async def _wait_resident(self, tenant: Tenant) -> None:
        started = time.perf_counter()
        try:
            while True:
                if tenant.paging_in is None or tenant.paging_in.done():
                    tenant.paging_in = asyncio.get_running_loop().create_task(self._page_in(tenant))
                left = self.page_in_timeout_s - (time.perf_counter() - started)
                try:
                    await asyncio.wait_for(asyncio.shield(tenant.paging_in), max(left, 0))
                except asyncio.TimeoutError:  # not TimeoutError before Python 3.11
                    raise NotResident(self._timed_out(tenant), RETRY_AFTER_S) from None
                with self._lock:
                    if tenant.state is Residence.RESIDENT:
                        tenant.busy += 1
                        tenant.touch()
                        return
        finally:
            with self._lock:
                tenant.waiting -= 1
            if self.metrics is not None:
                self.metrics.waited(tenant.name, time.perf_counter() - started)

    async def _page_in(self, tenant: Tenant) -> None:
        """Room made (waiting while the others are busy), then the version moved in."""
        started = time.perf_counter()
        while True:
            with self._lock:
                if tenant.gone:
                    raise NotReady(
                        f"model {tenant.name!r} version {tenant.model.version} was unloaded"
                    )
                if tenant.state is Residence.RESIDENT:
                    return
                victims = None
                if tenant.state is Residence.PAGED_OUT:
                    victims = self._room_for(tenant, tenant.need)
                if victims is not None:
                    self._claim(tenant, tenant.need, victims)
                    tenant.state = Residence.PAGING_IN
                    break
            await asyncio.sleep(_POLL_S)  # others busy or pinned, or it is still moving out
        try:
            await to_thread.run_sync(self._move_out, victims)
            await to_thread.run_sync(tenant.model.page_in)
        except BaseException:
            with self._lock:
                tenant.state, tenant.held = Residence.PAGED_OUT, 0
            raise
        with self._lock:
            tenant.state = Residence.RESIDENT
            tenant.touch()
        if self.metrics is not None:
            reload = not tenant.model.backend.pages_to_host
            self.metrics.page_in(
                tenant.name, "reload" if reload else "device_copy", time.perf_counter() - started
            )
            if reload:
                self.metrics.cold_start(tenant.name)

    # -- choosing and moving (under the lock / in worker threads) ------------------------------

    def _room_for(self, tenant: Tenant, size: int) -> list[Tenant] | None:
        """The versions to move out so that ``tenant`` can hold ``size`` bytes (none needed:
        []), least recently used first; None when even all of the movable ones would not do."""
        if self.capacity is None:
            return []
        free = self.capacity - (self.held - tenant.held)
        if size <= free:
            return []
        if not self.paging or size > self.capacity:
            return None
        movable = sorted(
            (
                t
                for t in self._tenants
                if t is not tenant
                and t.state is Residence.RESIDENT
                and not t.pinned
                and t.busy == 0
                and t.waiting == 0
            ),
            key=lambda t: t.touched,
        )
        victims: list[Tenant] = []
        for victim in movable:
            if size <= free:
                break
            victims.append(victim)
            free += victim.held
        return victims if size <= free else None

    def _claim(self, tenant: Tenant, size: int, victims: list[Tenant]) -> None:
        for victim in victims:
            victim.state, victim.held = Residence.PAGING_OUT, 0
        tenant.held = size

    def _move_out(self, victims: list[Tenant]) -> None:
        """In a worker thread: each victim paged out (a failure leaves it out all the same:
        its room is taken already, and a page-in reloads it)."""
        for victim in victims:
            try:
                if victim.model.backend.pages_to_host:
                    victim.model.page_out()  # a move: nothing is freed in Python
                else:
                    with unfrozen():  # unloaded: freed by its collection, frozen at start or not
                        victim.model.page_out()
            finally:
                with self._lock:
                    victim.state = Residence.PAGED_OUT
            if self.metrics is not None:
                self.metrics.page_out(victim.name)

    # -- reports ---------------------------------------------------------------------------------

    def _no_room(self, tenant: Tenant, size: int) -> str:
        what = f"model {tenant.name!r} version {tenant.model.version} needs {shown(size)}"
        source = "its budget, gpu_memory_mib" if tenant.budget is not None else "its measured peak"
        assert self.capacity is not None  # no capacity: always room
        if size > self.capacity:
            return f"{what} ({source}), more than the process's cap of {shown(self.capacity)}"
        holders = sorted({t.name for t in self._tenants if t.held and t is not tenant})
        why = "the others are busy or pinned" if self.paging else "paging is off (--paging lru)"
        return (
            f"{what} ({source}); the process's cap is {shown(self.capacity)}, of which "
            f"{shown(self.held - tenant.held)} is held by {', '.join(holders) or 'none'}, "
            f"and {why}"
        )

    def _timed_out(self, tenant: Tenant) -> str:
        return (
            f"model {tenant.name!r} version {tenant.model.version} is paged out and could not "
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
        }

    def tenants_of(self, name: str) -> list[Tenant]:
        return [t for t in self._tenants if t.name == name]

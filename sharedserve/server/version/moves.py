"""Waking whoever waits for a version to move: a page-in blocked for room, a retire waiting for
its version to settle or go idle. Every move that can unblock one (a state change, a version's
last request ending) happens under ``LOCK`` and calls ``Moves.notify`` there, so a waiter that
checked its condition and registered under the same lock cannot miss it: it wakes on the move,
not on a poll. Waiters are of two kinds, and both are woken: worker threads (a condition on the
lock) and coroutines on an event loop (a future, resolved through the loop's thread-safe call,
since most moves happen in worker threads)."""

from __future__ import annotations

import asyncio
import contextlib
import threading

__all__ = ["Moves"]


class Moves:
    """The wake-ups for one lock's moves; every method is called with the lock held."""

    def __init__(self, lock: threading.Lock) -> None:
        self._threads = threading.Condition(lock)
        self._futures: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def notify(self) -> None:
        """Something moved: every waiter looks again once the lock is free."""
        self._threads.notify_all()
        futures, self._futures = self._futures, []
        for loop, future in futures:
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody is waiting there
                loop.call_soon_threadsafe(_wake, future)

    def wait(self, timeout_s: float | None) -> None:
        """In a worker thread: the lock let go until the next move (or ``timeout_s``)."""
        self._threads.wait(timeout_s)

    def next(self) -> asyncio.Future[None]:
        """On an event loop: a future done at the next move, to await once the lock is free."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._futures.append((loop, future))
        return future

    @property
    def waiting(self) -> int:
        """Coroutines waiting for the next move now."""
        return sum(not future.done() for _, future in self._futures)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():  # its waiter may have been cancelled meanwhile
        future.set_result(None)

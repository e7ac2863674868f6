"""Bounds on the memory of request bodies: the bytes still arriving, and those being decoded.

Decoding JSON costs many times a body's size (a 60 MiB body of floats peaks at ~1 GiB: a Python
float and a list slot per number before numpy packs them), so without a bound a few large bodies
at once can push a replica past its container's memory limit. Requests take their body's size
from the bytes that may be decoded at once (``DecodingBytes``) before decoding and give it back
when answered; one that finds no room waits, in arrival order so small bodies cannot starve a
large one, and is refused with 503 if none comes.

Before decoding, a body is arriving: its memory grows with the bytes that came, and those are
taken from ``ArrivingBytes`` (``--max-arriving-bytes``) until the decoding limit takes the
whole body over. A client declaring 64 MiB and sending a byte a minute so holds a byte, and past
the bound a body is refused with 503 at once: waiting would let slow clients hold memory
indefinitely, the very thing the bound is for.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sharedserve.errors import ArrivingBytesExhausted, ResourceExhausted

__all__ = ["DECODE_WAIT_S", "ArrivingBytes", "ArrivingShare", "DecodingBytes"]

# How long a body waits for room in the decoding limit before 503: several decodes of a large
# body, so a burst of big requests queues rather than fails, but not so long that a client's
# own timeout fires first.
DECODE_WAIT_S = 10.0


class DecodingBytes:
    def __init__(self, limit: int, wait_s: float) -> None:
        self.limit, self.wait_s = limit, wait_s
        self.used = 0
        self._queue: deque[object] = deque()
        self._changed: asyncio.Condition | None = None  # made on the serving loop, when first used

    @asynccontextmanager
    async def hold(self, size: int) -> AsyncIterator[None]:
        """Hold ``size`` bytes (a body over the whole limit runs alone) for the block."""
        size = min(size, self.limit)
        if not self._queue and self.used + size <= self.limit:
            self.used += size  # the common case: room at once, no lock, no wait
        else:
            await self._wait(size)
        try:
            yield
        finally:
            self.used -= size
            if self._changed is not None and self._queue:
                async with self._changed:
                    self._changed.notify_all()

    async def _wait(self, size: int) -> None:
        if self._changed is None:
            self._changed = asyncio.Condition()
        ticket = object()
        self._queue.append(ticket)
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(
                        lambda: self._queue[0] is ticket and self.used + size <= self.limit
                    ),
                    self.wait_s,
                )
            except asyncio.TimeoutError:
                raise ResourceExhausted(
                    f"the server is decoding {self.used} bytes of other requests (at most "
                    f"{self.limit}, --max-decoding-bytes); retry later"
                ) from None
            finally:
                self._queue.remove(ticket)
                self._changed.notify_all()  # the next in line may fit now
            self.used += size


class ArrivingBytes:
    """The bytes held by request bodies still arriving (or waiting for the decoding limit),
    over all connections, at most ``limit``. One event loop takes and gives: no lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def share(self) -> ArrivingShare:
        """One body's share, empty; give it back (``release``) however the body ends."""
        return ArrivingShare(self)


class ArrivingShare:
    """What one body holds of an ``ArrivingBytes``."""

    def __init__(self, pool: ArrivingBytes) -> None:
        self._pool = pool
        self.held = 0

    def take(self, size: int) -> None:
        """Take ``size`` more bytes, or raise ``ArrivingBytesExhausted`` if others hold too many.
        A body alone may pass the limit (as a body over the decoding limit runs alone), so a
        limit under --max-body-bytes refuses large bodies only while others arrive."""
        pool = self._pool
        if pool.held + size > pool.limit and pool.held > self.held:
            raise ArrivingBytesExhausted(
                f"request bodies still arriving hold {pool.held} bytes (at most {pool.limit}, "
                "--max-arriving-bytes); retry later"
            )
        pool.held += size
        self.held += size

    def release(self) -> None:
        """Give back all this body holds; a second call gives back nothing."""
        self._pool.held -= self.held
        self.held = 0

"""The load path's loader thread: a stop while a model loads does not wait for the load, nor
keep the process from exiting; what a load returns or raises reaches the waiter."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from sharedserve.server.repository.threads import in_loader_thread
from sharedserve.server.version import ModelVersion


def test_a_cancelled_wait_does_not_wait_for_the_load() -> None:
    gate, started = threading.Event(), threading.Event()

    def load(_: Sequence[ModelVersion]) -> Exception | None:
        started.set()
        gate.wait(60)
        return None

    async def stop_while_loading() -> None:
        waiting = asyncio.get_running_loop().create_task(in_loader_thread(load, []))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 60)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    try:
        asyncio.run(stop_while_loading())  # returns while the load is still held at the gate
        loaders = [t for t in threading.enumerate() if t.name == "model-loader" and t.is_alive()]
        assert loaders and all(t.daemon for t in loaders)
    finally:
        gate.set()


def test_what_a_load_returns_or_raises_reaches_the_waiter() -> None:
    failure = ValueError("no room")

    def raises(_: Sequence[ModelVersion]) -> Exception | None:
        raise RuntimeError("a bug")

    assert asyncio.run(in_loader_thread(lambda _: failure, [])) is failure
    with pytest.raises(RuntimeError, match="a bug"):
        asyncio.run(in_loader_thread(raises, []))

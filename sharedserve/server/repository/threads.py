"""The load path's work off the event loop: loads in a daemon thread of their own, one version
after another, unloads with the collection that frees a framework's objects."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence

from sharedserve.server.memory import Memory
from sharedserve.server.version import ModelVersion, collect

__all__ = ["in_loader_thread", "load_versions", "unload_versions"]

log = logging.getLogger(__name__)


async def in_loader_thread(
    load: Callable[[Sequence[ModelVersion]], Exception | None], versions: Sequence[ModelVersion]
) -> Exception | None:
    """``load(versions)`` in a daemon thread of its own: a stop while a model loads (seconds,
    for a large one) neither waits for it nor keeps the process from exiting."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Exception | None] = loop.create_future()

    def settle(outcome: Exception | None, failed: BaseException | None) -> None:
        if done.done():  # the waiter was cancelled: a stop
            return
        if failed is not None:
            done.set_exception(failed)
        else:
            done.set_result(outcome)

    def work() -> None:
        outcome: Exception | None = None
        failed: BaseException | None = None
        try:
            outcome = load(versions)
        except BaseException as e:  # handed to the loop, which raises it to the waiter
            failed = e
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: no one waits
            loop.call_soon_threadsafe(settle, outcome, failed)

    threading.Thread(target=work, name="model-loader", daemon=True).start()
    return await done


def load_versions(memory: Memory, versions: Sequence[ModelVersion]) -> Exception | None:
    """In a worker thread: each version loaded, warmed and counted in ``memory``, one after
    another; the first failure (the others are loaded all the same)."""
    first: Exception | None = None
    for version in versions:
        try:
            memory.load(version)
        except Exception as e:
            log.error(
                "failed to load model %r version %d: %s",
                version.name,
                version.version,
                version.error or getattr(e, "message", None) or str(e),
            )
            first = first or e
            continue
        log.info(
            "model %r version %d AVAILABLE (loaded and warmed up in %.1f s)",
            version.name,
            version.version,
            version.load_seconds or 0.0,
        )
    return first


def unload_versions(versions: Sequence[ModelVersion]) -> None:
    """In a worker thread: each version unloaded, then the collection that frees its
    framework's objects now (``version.collect``)."""
    for version in versions:
        version.unload()
    collect(versions)

"""The end of a model version's life: a version its model no longer routes (reloaded, unloaded,
a failed load's) is retired once idle, its requests in flight finished or ``DRAIN_S`` passed,
then taken off the inference path and unloaded with the collection that frees its framework's
objects. At the process's end, every version that is not loading or moving is unloaded alike;
those that are are the process's to drop as it exits."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from anyio import to_thread

from sharedserve.server.inference import InferencePath
from sharedserve.server.memory import Memory
from sharedserve.server.repository.threads import unload_versions
from sharedserve.server.version import LOCK, ModelVersion, VersionState

__all__ = ["DRAIN_S", "retire", "unload_settled"]

log = logging.getLogger(__name__)

DRAIN_S = 30.0
"""How long an unload waits for a version's requests in flight before it unloads it anyway."""
_SETTLED = frozenset(
    {VersionState.START, VersionState.AVAILABLE, VersionState.PAGED_OUT, VersionState.FAILED}
)
"""The states a version may retire from at once: not loading, not moving."""


async def retire(
    gone: Sequence[ModelVersion], memory: Memory, path: InferencePath, drain_s: float
) -> None:
    """Versions no longer routed: each once idle (at most ``drain_s``), off the path, then
    all unloaded and their objects collected."""
    for version in gone:
        drained = await to_thread.run_sync(memory.retire, version, drain_s)
        if not drained:
            log.warning(
                "model %r version %d still had %d request(s) in flight after %g s; unloading",
                version.name,
                version.version,
                version.inflight,
                drain_s,
            )
        await path.remove(version)
    if gone:
        await to_thread.run_sync(unload_versions, gone)


def unload_settled(versions: Iterable[ModelVersion]) -> None:
    """After the listeners closed: each of ``versions`` that is not loading or moving
    unloaded."""
    settled: list[ModelVersion] = []
    for version in versions:
        with LOCK:
            if version.state in _SETTLED:
                version.to(VersionState.RETIRING)
                version.held = 0
                settled.append(version)
    unload_versions(settled)

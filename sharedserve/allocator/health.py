"""Feeding the health state machine: a periodic probe and the driver's XID events.

Both run beside the event loop that serves the kubelet: NVML calls block, so the probe runs in
a worker thread per round and the XID watch in a thread of its own (``nvmlEventSetWait`` blocks
up to its timeout). Every observation is applied on the event loop, which owns the
``HealthBook``; a change is published to ListAndWatch at once. No NVML failure ends either
loop: it marks GPUs Unhealthy, and the next passing probe brings them back.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from sharedserve.allocator.health_state import (
    HealthBook,
    NvmlFailed,
    Observation,
    ProbeFailed,
    ProbePassed,
    Xid,
)
from sharedserve.errors import SharedServeError
from sharedserve.gpu.backend import GpuBackend, XidEvent, XidWatch

__all__ = ["MPS_PID_FILE", "HealthMonitor", "mps_daemon_check"]

log = logging.getLogger(__name__)

# How long one nvmlEventSetWait blocks: bounds how long stopping the watch thread takes.
_XID_WAIT_S = 0.5


#: Written by nvidia-cuda-mps-control into its pipe directory while it runs (NVIDIA's MPS
#: documentation, "nvidia-cuda-mps-control").
MPS_PID_FILE = "nvidia-cuda-mps-control.pid"


def mps_daemon_check(pipe_dir: Path) -> Callable[[], str | None]:
    """A node check for MPS mode: without the control daemon, a pod would run with no MPS
    limits at all, so every GPU counts as failed until the daemon is up."""

    def check() -> str | None:
        if (pipe_dir / MPS_PID_FILE).is_file():
            return None
        return f"MPS control daemon not running (no {MPS_PID_FILE} in {pipe_dir})"

    return check


def _probe_one(backend: GpuBackend, uuid: str) -> Observation:
    try:
        reason = backend.probe(uuid)
    except SharedServeError as e:
        return ProbeFailed(e.message)
    except Exception as e:  # a bug or an unexpected driver error must not stop health checks
        log.exception("probe of GPU %s raised", uuid)
        return ProbeFailed(f"probe raised {type(e).__name__}: {e}")
    return ProbePassed() if reason is None else ProbeFailed(reason)


class HealthMonitor:
    """Runs the probe loop and the XID watch; calls ``on_change`` after any health change."""

    def __init__(
        self,
        backend: GpuBackend,
        book: HealthBook,
        uuids: Sequence[str],
        interval_s: float,
        on_change: Callable[[], None],
        *,
        node_check: Callable[[], str | None] | None = None,
    ) -> None:
        """``node_check`` runs with every probe round; a reason from it fails every GPU."""
        self._node_check = node_check
        self._backend = backend
        self._book = book
        self._uuids = list(uuids)
        self._interval_s = interval_s
        self._on_change = on_change
        self._stop = threading.Event()
        self._xid_thread: threading.Thread | None = None

    def observe(self, uuid: str | None, observation: Observation) -> None:
        """Apply one observation (on the event loop) and publish if any GPU changed."""
        changed = self._book.observe(uuid, observation)
        for gpu in changed:
            state = self._book.state(gpu)
            log.warning(
                "GPU %s is now %s%s",
                gpu,
                state.health.value,
                f" ({state.reason})" if state.reason else "",
            )
        if changed:
            self._on_change()

    async def probe_round(self) -> None:
        """Probe every GPU once (in a worker thread) and apply the results."""
        results = await asyncio.to_thread(self._probe_all)
        for uuid, observation in results:
            self.observe(uuid, observation)

    async def probe_forever(self) -> None:
        """A round every interval after the first (a slow round shortens the wait, not the
        rate), so a failure shows in ListAndWatch within one interval."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            await asyncio.sleep(max(0.0, started + self._interval_s - loop.time()))
            started = loop.time()
            await self.probe_round()

    def _probe_all(self) -> list[tuple[str, Observation]]:
        results = [(uuid, _probe_one(self._backend, uuid)) for uuid in self._uuids]
        reason = self._node_check() if self._node_check is not None else None
        if reason is None:
            return results
        return [(uuid, ProbeFailed(reason)) for uuid in self._uuids]

    def start_xid_watch(self, loop: asyncio.AbstractEventLoop) -> None:
        self._xid_thread = threading.Thread(
            target=self._watch_xids, args=(loop,), name="xid-watch", daemon=True
        )
        self._xid_thread.start()

    async def stop(self) -> None:
        self._stop.set()
        if self._xid_thread is not None:
            await asyncio.to_thread(self._xid_thread.join)

    def _post(self, loop: asyncio.AbstractEventLoop, uuid: str | None, obs: Observation) -> None:
        if not self._stop.is_set():
            loop.call_soon_threadsafe(self.observe, uuid, obs)

    def _watch_xids(self, loop: asyncio.AbstractEventLoop) -> None:
        watch: XidWatch | None = None
        retry_s = self._interval_s
        while not self._stop.is_set():
            try:
                if watch is None:
                    watch = self._backend.open_xid_watch(self._uuids)
                    if watch is None:
                        log.info("no XID events from this GPU backend; the probe alone watches")
                        return
                event = watch.wait(_XID_WAIT_S)
            except Exception as e:  # GpuError, or a bug: neither may end the watch for good
                # As NVIDIA's plugin does: a broken event wait may hide XIDs on any GPU.
                reason = e.message if isinstance(e, SharedServeError) else repr(e)
                log.error("XID watch failed (%s); marking every GPU Unhealthy", reason)
                self._post(loop, None, NvmlFailed(f"XID watch failed: {reason}"))
                if watch is not None:
                    watch.close()
                    watch = None
                self._stop.wait(retry_s)
                continue
            if event is not None:
                self._post_xid(loop, event)
        if watch is not None:
            watch.close()

    def _post_xid(self, loop: asyncio.AbstractEventLoop, event: XidEvent) -> None:
        log.warning("XID %d on GPU %s", event.xid, event.gpu_uuid or "(unknown)")
        self._post(loop, event.gpu_uuid, Xid(event.xid))

"""The GPU health state machine (table-driven), and the monitor that feeds it from a backend."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from sharedserve.allocator.health import MPS_PID_FILE, HealthMonitor, mps_daemon_check
from sharedserve.allocator.health_state import (
    DEFAULT_IGNORED_XIDS,
    Cause,
    GpuHealth,
    Health,
    HealthBook,
    NvmlFailed,
    Observation,
    ProbeFailed,
    ProbePassed,
    Xid,
    step,
)
from sharedserve.errors import GpuError
from sharedserve.gpu.backend import XidEvent

H, U = Health.HEALTHY, Health.UNHEALTHY
PASS, FAIL = ProbePassed(), ProbeFailed("lost")


@pytest.mark.parametrize(
    ("observations", "expected"),
    [
        pytest.param([], [], id="nothing"),
        pytest.param([PASS, PASS], [H, H], id="passing-stays-healthy"),
        pytest.param([FAIL], [U], id="probe-failure"),
        pytest.param([FAIL, PASS], [U, H], id="probe-failure-recovers-on-one-pass"),
        pytest.param([FAIL, FAIL, PASS], [U, U, H], id="repeated-failure-one-pass"),
        pytest.param([Xid(79)], [U], id="critical-xid"),
        pytest.param([Xid(79), PASS, PASS, PASS], [U, U, U, H], id="xid-needs-three-passes"),
        pytest.param(
            [Xid(79), PASS, FAIL, PASS, PASS, PASS], [U, U, U, U, U, H], id="xid-count-restarts"
        ),
        pytest.param(
            [Xid(48), PASS, Xid(48), PASS, PASS], [U, U, U, U, U], id="second-xid-restarts"
        ),
        pytest.param(
            [Xid(13), Xid(31), Xid(43), Xid(45), Xid(68), Xid(109)], [H] * 6, id="app-xids-ignored"
        ),
        pytest.param([FAIL, Xid(13), PASS], [U, U, H], id="ignored-xid-keeps-state"),
        pytest.param([NvmlFailed("driver"), PASS], [U, H], id="nvml-failure-recovers"),
        pytest.param([Xid(79), FAIL, PASS], [U, U, U], id="probe-failure-keeps-xid-requirement"),
        pytest.param(
            [FAIL, Xid(94), PASS, PASS, PASS], [U, U, U, U, H], id="xid-raises-requirement"
        ),
    ],
)
def test_step(observations: list[Observation], expected: list[Health]) -> None:
    state = GpuHealth()
    seen = []
    for observation in observations:
        state = step(state, observation, DEFAULT_IGNORED_XIDS, xid_recovery_probes=3)
        seen.append(state.health)
    assert seen == expected


@pytest.mark.parametrize(
    ("observation", "cause", "reason"),
    [
        (FAIL, Cause.PROBE, "lost"),
        (Xid(79), Cause.XID, "critical XID 79"),
        (NvmlFailed("no driver"), Cause.NVML, "no driver"),
    ],
)
def test_step_records_cause(observation: Observation, cause: Cause, reason: str) -> None:
    state = step(GpuHealth(), observation)
    assert (state.health, state.cause, state.reason) == (U, cause, reason)


def test_ignored_xids_are_configurable() -> None:
    assert step(GpuHealth(), Xid(13), ignored_xids=frozenset()).health is U
    assert step(GpuHealth(), Xid(79), ignored_xids=frozenset({79})).health is H


def test_book_reports_changes_only() -> None:
    book = HealthBook(["GPU-A", "GPU-B"])
    assert book.observe("GPU-A", PASS) == []
    assert book.observe("GPU-A", FAIL) == ["GPU-A"]
    assert book.observe("GPU-A", FAIL) == []
    assert book.snapshot() == {"GPU-A": U, "GPU-B": H}
    assert book.observe("GPU-Z", FAIL) == []  # not ours: ignored
    assert book.observe(None, Xid(79)) == ["GPU-B"]  # unknown GPU: every GPU suspect
    assert book.observe("GPU-A", PASS) == []  # the XID asked for three passes
    assert book.observe("GPU-A", PASS) == []
    assert book.observe("GPU-A", PASS) == ["GPU-A"]


def test_book_snapshot_is_a_copy() -> None:
    book = HealthBook(["GPU-A"])
    before = book.snapshot()
    book.observe("GPU-A", FAIL)
    assert before == {"GPU-A": H}


class ScriptedWatch:
    """XID events handed over by the test, as NVML's event set would."""

    def __init__(self, backend: ScriptedBackend) -> None:
        self._backend = backend
        self.closed = False

    def wait(self, timeout_s: float) -> XidEvent | None:
        try:
            item = self._backend.events.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self.closed = True


class ScriptedBackend:
    """A GPU backend whose XID events the test sends; GPU-RAISES fails every probe."""

    simulated = True

    def __init__(self) -> None:
        self.events: queue.Queue[XidEvent | Exception] = queue.Queue()
        self.watches = 0

    def probe(self, gpu_uuid: str) -> str | None:
        if gpu_uuid == "GPU-RAISES":
            raise GpuError("NVML: GPU is lost")
        return None

    def open_xid_watch(self, gpu_uuids: Sequence[str]) -> ScriptedWatch:
        self.watches += 1
        return ScriptedWatch(self)


async def _until(condition: Callable[[], bool], timeout: float = 5) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_monitor_probe_xid_and_watch_failure() -> None:
    """Probe failures, XIDs from the watch thread and a broken watch all reach the book; the
    broken watch is reopened and a passing probe brings the GPUs back."""

    async def scenario() -> None:
        backend = ScriptedBackend()
        uuids = ["GPU-A", "GPU-B", "GPU-RAISES"]
        book = HealthBook(uuids, xid_recovery_probes=1)
        published = threading.Event()
        monitor = HealthMonitor(backend, book, uuids, 0.05, published.set)
        await monitor.probe_round()
        assert book.snapshot() == {"GPU-A": H, "GPU-B": H, "GPU-RAISES": U}
        assert "GPU is lost" in book.state("GPU-RAISES").reason
        assert published.is_set()

        monitor.start_xid_watch(asyncio.get_running_loop())
        backend.events.put(XidEvent("GPU-B", 79))
        await _until(lambda: book.snapshot()["GPU-B"] is U)
        assert book.state("GPU-B").cause is Cause.XID

        backend.events.put(GpuError("event wait failed"))
        await _until(lambda: book.state("GPU-A").cause is Cause.NVML)
        await _until(lambda: backend.watches == 2)  # reopened after the failure

        prober = asyncio.create_task(monitor.probe_forever())
        await _until(lambda: book.snapshot()["GPU-A"] is H and book.snapshot()["GPU-B"] is H)
        assert book.snapshot()["GPU-RAISES"] is U
        prober.cancel()
        await monitor.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))


def test_node_check_fails_every_gpu(tmp_path: Path) -> None:
    """MPS mode: no control daemon (pid file) in the pipe directory, no healthy GPU."""
    check = mps_daemon_check(tmp_path)
    book = HealthBook(["GPU-A", "GPU-B"])
    monitor = HealthMonitor(
        ScriptedBackend(), book, ["GPU-A", "GPU-B"], 1, lambda: None, node_check=check
    )
    asyncio.run(monitor.probe_round())
    assert book.snapshot() == {"GPU-A": U, "GPU-B": U}
    assert "MPS control daemon not running" in book.state("GPU-A").reason
    (tmp_path / MPS_PID_FILE).write_text("1\n")
    asyncio.run(monitor.probe_round())
    assert book.snapshot() == {"GPU-A": H, "GPU-B": H}

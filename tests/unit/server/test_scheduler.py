"""The shared scheduler (``server/inference/scheduler.py``): fair turns for the slots, and a
spare thread for a model with no call running. Model calls here wait on gates the test opens,
so every step is decided by the test, not by timing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from sharedserve.server.inference.scheduler import Scheduler, Share


def _gated(gate: threading.Event, result: str) -> Callable[[], str]:
    def run() -> str:
        assert gate.wait(30)
        return result

    return run


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def test_an_idle_model_runs_beside_a_busy_ones_calls_and_its_backlog_keeps_its_turn() -> None:
    async def scenario() -> None:
        scheduler = Scheduler(slots=1)
        heavy, light = scheduler.lane("heavy"), scheduler.lane("light", Share(weight=1))
        heavy_gate, light_gate = threading.Event(), threading.Event()
        backlog = [asyncio.ensure_future(heavy.call(_gated(heavy_gate, f"h{i}"))) for i in range(3)]
        await _until(lambda: scheduler.running == 1, "heavy's first call running")
        assert scheduler.depth("heavy") == 2  # the slot is taken; spare threads are not for it

        first = asyncio.ensure_future(light.call(_gated(light_gate, "l0")))
        await _until(lambda: scheduler.running_of("light") == 1, "light's call on a spare thread")
        second = asyncio.ensure_future(light.call(lambda: "l1"))
        await _until(lambda: scheduler.depth("light") == 1, "light's second call queued")
        # light has a call running now: its next one waits for a fair turn like anyone's.
        assert scheduler.running == 2 and list(scheduler.started) == ["heavy", "light"]

        light_gate.set()
        assert await first == "l0"
        heavy_gate.set()
        assert [await call for call in backlog] == ["h0", "h1", "h2"]
        assert await second == "l1"
        # Once its first call was done, light had none running: its queued call took the spare
        # thread at once, while heavy's backlog waited for the slot its gate held.
        assert list(scheduler.started) == ["heavy", "light", "light", "heavy", "heavy"]
        assert scheduler.running == 0 and scheduler.running_of("heavy") == 0
        scheduler.close()

    asyncio.run(scenario())


def test_spare_threads_are_bounded() -> None:
    async def scenario() -> None:
        scheduler = Scheduler(slots=1, spare=1)
        gate = threading.Event()
        calls = [
            asyncio.ensure_future(scheduler.lane(f"m{i}").call(_gated(gate, f"m{i}")))
            for i in range(4)
        ]
        await _until(lambda: scheduler.running == 2, "the slot and one spare thread busy")
        # Two more idle models wait: at most the slots and the spare threads run at once.
        assert scheduler.depth("m2") == 1 and scheduler.depth("m3") == 1
        gate.set()
        assert [await call for call in calls] == ["m0", "m1", "m2", "m3"]
        scheduler.close()

    asyncio.run(scenario())


def test_slots_must_be_positive() -> None:
    with pytest.raises(ValueError, match="slots must be >= 1"):
        Scheduler(0)

"""The shared scheduler's picking order (``server/fair_queue.py``): weighted, and a model's
burst never queued ahead of another model's next call."""

from __future__ import annotations

import pytest

from sharedserve.server.inference.fair_queue import FairQueue


def popped(queue: FairQueue[int], n: int | None = None) -> list[str]:
    order = []
    while (n is None or len(order) < n) and (item := queue.pop()) is not None:
        order.append(item[0])
    return order


def test_a_burst_does_not_queue_ahead_of_another_models_next_call() -> None:
    queue: FairQueue[int] = FairQueue()
    for i in range(100):
        queue.push("aggressor", i)
    assert popped(queue, 2) == ["aggressor", "aggressor"]  # running, say
    queue.push("victim", 0)
    # FIFO would run 98 aggressor calls first; the victim goes next.
    assert popped(queue, 2) == ["victim", "aggressor"]
    assert queue.depth("aggressor") == 97 and queue.depth("victim") == 0


def test_busy_models_share_by_weight() -> None:
    queue: FairQueue[int] = FairQueue()
    queue.set_weight("heavy", 3)
    queue.set_weight("light", 1)
    for i in range(40):
        queue.push("light", i)
        queue.push("heavy", i)
    first = popped(queue, 40)
    assert first.count("heavy") == 30 and first.count("light") == 10
    # Deterministic order: ties go to the call queued first.
    assert first[:8] == ["light", "heavy", "heavy", "heavy", "light", "heavy", "heavy", "heavy"]


def test_equal_weights_alternate_and_fifo_within_a_model() -> None:
    queue: FairQueue[int] = FairQueue()
    for i in range(3):
        queue.push("a", i)
    for i in range(3):
        queue.push("b", i)
    order = []
    while (item := queue.pop()) is not None:
        order.append(item)
    assert order == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]


def test_an_idle_model_banks_no_credit() -> None:
    queue: FairQueue[int] = FairQueue()
    for i in range(10):
        queue.push("busy", i)
    assert popped(queue, 6) == ["busy"] * 6
    for i in range(4):  # idle until now: it starts level with the busy one, not 6 calls ahead
        queue.push("late", i)
    assert popped(queue) == ["late", "busy", "late", "busy", "late", "busy", "late", "busy"]


def test_weights_must_be_positive_and_drain_empties() -> None:
    queue: FairQueue[int] = FairQueue()
    with pytest.raises(ValueError, match="positive"):
        queue.set_weight("a", 0)
    queue.push("a", 1)
    queue.push("b", 2)
    assert len(queue) == 2
    assert sorted(queue.drain()) == [1, 2]
    assert len(queue) == 0 and queue.pop() is None

"""Which model's call runs next: start-time fair queuing over per-model queues. Pure.

Why SFQ (Goyal et al., 1996) and not FIFO: with one FIFO queue a model that sends a burst puts
its whole backlog ahead of every other model's next request. SFQ tags each call with a virtual
start time, ``max(V, F_model)``, where ``V`` is the start tag of the call last picked and
``F_model`` the finish tag of the model's previous call (start + cost / weight); the lowest
start tag runs next. A model idle until now starts at ``V``, right behind what is running, not
behind another's backlog; two backlogged models are served in proportion to their weights. A
model with nothing queued keeps no credit for later (its tag restarts at ``V``), so being idle
buys no burst. Every call costs 1: the scheduler cannot know a call's time before it runs, and
one call per turn keeps a large model from being starved by a small one's many short calls
only as far as weights say.

Ties (equal start tags) go to the call queued first, so the order is deterministic.

``pop`` may be limited to some models (``among``): the scheduler's spare threads start only the
calls of models that have none running. Such a pick leaves ``V`` where it was: it is a call run
beside the fair turns, not one of them (its model's finish tag still counts it, so it costs the
model its turn all the same).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["FairQueue"]

T = TypeVar("T")


@dataclass
class _Lane(Generic[T]):
    weight: float
    finish: float = 0.0
    """Finish tag of the model's last queued call."""
    calls: deque[tuple[float, int, T]] = field(default_factory=deque)
    """(start tag, arrival number, item), in arrival order (so start tags rise)."""


class FairQueue(Generic[T]):
    """Per-model FIFO queues, popped in weighted-fair order across models."""

    def __init__(self) -> None:
        self._lanes: dict[str, _Lane[T]] = {}
        self._virtual = 0.0
        self._arrivals = itertools.count()

    def set_weight(self, model: str, weight: float) -> None:
        """``model``'s share from its next call on: ``weight`` / the sum of the busy ones'."""
        if not weight > 0:
            raise ValueError(f"a model's weight must be positive, got {weight!r}")
        lane = self._lanes.get(model)
        if lane is None:
            self._lanes[model] = _Lane(weight)
        else:
            lane.weight = weight

    def push(self, model: str, item: T) -> None:
        lane = self._lanes.get(model)
        if lane is None:
            lane = self._lanes[model] = _Lane(1.0)
        start = max(self._virtual, lane.finish)
        lane.finish = start + 1.0 / lane.weight
        lane.calls.append((start, next(self._arrivals), item))

    def pop(self, among: Callable[[str], bool] | None = None) -> tuple[str, T] | None:
        """The next call by start tag (then arrival), or None when every queue is empty; with
        ``among``, the next of the models it accepts, beside the fair turns."""
        best: tuple[float, int, str] | None = None
        for model, lane in self._lanes.items():
            if lane.calls and (among is None or among(model)):
                start, arrival, _ = lane.calls[0]
                if best is None or (start, arrival) < best[:2]:
                    best = (start, arrival, model)
        if best is None:
            return None
        model = best[2]
        start, _, item = self._lanes[model].calls.popleft()
        if among is None:
            self._virtual = start
        return model, item

    def depth(self, model: str) -> int:
        lane = self._lanes.get(model)
        return 0 if lane is None else len(lane.calls)

    def __len__(self) -> int:
        return sum(len(lane.calls) for lane in self._lanes.values())

    def drain(self) -> list[T]:
        """Every queued item, removed (at shutdown, to fail them)."""
        items = [item for lane in self._lanes.values() for _, _, item in lane.calls]
        for lane in self._lanes.values():
            lane.calls.clear()
        return items

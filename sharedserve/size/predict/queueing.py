"""p50 and p99 at planned rates, by simulating one server process's queue. Pure (numpy).

What is modelled: one ``serve`` process (or all of one GPU's models taken as one process) under
open-loop Poisson arrivals, a rate per model; each model call's time drawn from that model's
measured service-time histogram (an empirical distribution, seeded, so a result is repeatable);
the process's ``slots`` model calls at once, taken from per-model queues in start-time fair
order with every call costing one turn, as ``server/scheduler.py`` and ``server/fair_queue.py``
do; and optional batching per model as ``server/batching.py`` does it: a batch is taken by one
of the model's ``threads`` once it is due (``max_batch_size`` requests, or its first waited
``timeout_ms``) and the thread is free, filling until then, and queues for a slot as one call,
whose time is one draw scaled by ``1 + row_cost * (rows - 1)`` (``row_cost`` 0 by default: a
batch costs what a request does, a GPU's best case; measure it to do better; with more than one
thread, a thread's next batch waits for its own last, a slight approximation). Each request's
sojourn (queue, batch wait and service) gives its model's p50, p99 and mean; a paged model's
request first waits for its page-in where another paged model took its room (``predict.page_ins``).
What is not modelled: interference between processes on a GPU, or between calls running at once
beyond taking a slot (a draw is a call's time as it was measured, neighbours included: the
caller picks histograms measured beside the planned neighbours, from measured mixes, which is
where interference comes from); the network and the client; ``max_inflight`` and
``max_enqueued_batches`` refusals; requests of more than one row.
A model whose calls need more than its fair share of the slots (rho >= 1) is ``saturated``: its
p50/p99 are infinite and its QPS is the share it would get, never a figure a finite run made up.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sharedserve.size.predict.page_ins import ready_times
from sharedserve.size.service_times import ServiceTimes

__all__ = ["Batching", "ModelLoad", "Prediction", "simulate"]


@dataclass(frozen=True)
class Batching:
    max_batch_size: int
    timeout_ms: float
    row_cost: float = 0.0
    """A batch of ``rows`` takes a draw times ``1 + row_cost * (rows - 1)``."""
    threads: int = 1
    """``num_batch_threads``: the model's batches queued or running at once."""

    def call_ms(self, service: ServiceTimes) -> float:
        """A full batch's mean time."""
        return service.mean_ms * (1 + self.row_cost * (self.max_batch_size - 1))


@dataclass(frozen=True)
class ModelLoad:
    """One model of the process: its planned rate, call times, fair-turn weight, batching."""

    name: str
    rate_qps: float
    service: ServiceTimes
    weight: float = 1.0
    batching: Batching | None = None
    delay: ServiceTimes | None = None
    """Latency each request has outside the slots (added to its sojourn, holding no slot): what
    an open-loop request costs beyond its call (``ModelProfile.open_loop_delay``)."""
    page_in_ms: float | None = None
    """Paged (``paging: lru``): the page-in a request waits for, before its queue, where its
    model is not the last paged model requested (``predict.page_ins``); None: always resident."""


@dataclass(frozen=True)
class Prediction:
    model: str
    offered_qps: float
    qps: float
    """What it is served at: the offered rate, or the fair share a saturated model gets."""
    p50_ms: float | None
    """Sojourn (queue + batch wait + service); inf when saturated; None: no request simulated."""
    p99_ms: float | None
    mean_ms: float | None
    saturated: bool
    requests: int
    """Simulated requests behind p50/p99 (after the warm-up), for their own sampling error."""


def _lindley(queued: np.ndarray, service: np.ndarray) -> np.ndarray:
    """Completion times at one FIFO slot, vectorised: W(n+1) = max(0, W(n) + S(n) - A(n+1)),
    i.e. W(n) = C(n) - min(C(0..n), 0) for C the running sum of S(k) - A(k+1)."""
    steps = np.concatenate(([0.0], np.cumsum(service[:-1] - np.diff(queued))))
    wait = steps - np.minimum.accumulate(np.minimum(steps, 0.0))
    return np.asarray(queued + wait + service)


@dataclass
class _Batcher:
    """One batched model's batcher: its arrivals, its draws, its threads' known free times."""

    model: int
    arrivals: list[float]
    draws: list[float]
    settings: Batching
    free: list[float]
    next: int = 0

    def take(self) -> list[tuple[float, int, int, float]]:
        """The batches its free threads take: (when, first, past last request, call time).

        A thread takes the oldest batch once it is due (full, or its first request waited the
        timeout) and the thread is free; until then the batch keeps filling, so a busy model's
        batches grow."""
        out = []
        size, timeout = self.settings.max_batch_size, self.settings.timeout_ms / 1000
        arrivals, n = self.arrivals, len(self.arrivals)
        while self.free and self.next < n:
            first = self.next
            last = min(first + size, n) - 1
            due = arrivals[first] + timeout
            if last - first + 1 == size and arrivals[last] < due:
                due = arrivals[last]
            when = max(heapq.heappop(self.free), due)
            end = min(first + size, bisect.bisect_right(arrivals, when, first))
            rows = end - first
            call = self.draws[first] * (1 + self.settings.row_cost * (rows - 1))
            out.append((when, first, end, call))
            self.next = end
        return out


def _serve(
    stream: tuple[list[float], list[int], list[int], list[float]],
    batchers: dict[int, _Batcher],
    inverse: list[float],
    slots: int,
) -> list[tuple[int, int, int, float]]:
    """Every call's (model, first request, past last, completion time): ``slots`` slots take
    calls in start-time fair order as fair_queue.py does. A call's tag is max(V, its model's
    last finish tag), which then grows by 1 / weight; the lowest tag, then the first queued,
    runs next; V is the tag last started. ``stream``: the unbatched requests (time, model,
    index, call time), by time. A heap of tags stands in for fair_queue's scan of its models
    (the same order, since a model's tags rise), so fifty models cost about what one does."""
    times, models, indexes, services = stream
    n = len(times)
    free = [0.0] * slots
    finish = [0.0] * len(inverse)
    waiting: list[tuple[float, int, int, int, int, float]] = []
    entries: list[tuple[float, int, int, int, float]] = []  # batches taken, not yet queued
    for b in batchers.values():
        for when, first, end, call in b.take():
            heapq.heappush(entries, (when, b.model, first, end, call))
    out: list[tuple[int, int, int, float]] = []
    virtual, seq, i = 0.0, 0, 0
    inf = math.inf
    push, pop = heapq.heappush, heapq.heappop
    while True:
        now = free[0]
        while True:  # queue what arrived by now, in time order, tagged as it arrives
            at = times[i] if i < n else inf
            eat = entries[0][0] if entries else inf
            if not waiting and now < at and now < eat:
                now = at if at < eat else eat  # an idle slot waits for the next call
                if now == inf:
                    return out
            if at <= eat:
                if at > now:
                    break
                m, first, end, call = models[i], indexes[i], indexes[i] + 1, services[i]
                i += 1
            else:
                if eat > now:
                    break
                _, m, first, end, call = pop(entries)
            tag = finish[m] if finish[m] > virtual else virtual
            finish[m] = tag + inverse[m]
            push(waiting, (tag, seq, m, first, end, call))
            seq += 1
        virtual, _, m, first, end, call = pop(waiting)
        done = now + call
        out.append((m, first, end, done))
        heapq.heapreplace(free, done)
        batcher = batchers.get(m)
        if batcher is not None:
            heapq.heappush(batcher.free, done)
            for when, first, end, call in batcher.take():
                push(entries, (when, m, first, end, call))


def _shares(loads: Sequence[ModelLoad], slots: int) -> list[float | None]:
    """The QPS each saturated model is served at, None for the others. Turns go in proportion
    to weight (every call one turn) among the models that want more than their share, and the
    slots' time the others leave is split so (water-filling, where start-time fair queuing
    settles). A batched model is counted in full batches, as a busy one's grow to: it is
    saturated only if even those cannot keep up, or its threads cannot."""
    rows = [1 if x.batching is None else x.batching.max_batch_size for x in loads]
    calls = [x.rate_qps / r for x, r in zip(loads, rows, strict=True)]
    mean_s = [
        (x.service.mean_ms if x.batching is None else x.batching.call_ms(x.service)) / 1000
        for x in loads
    ]
    cap = [
        math.inf if x.batching is None else x.batching.threads / t
        for x, t in zip(loads, mean_s, strict=True)
    ]
    wants = [min(c, k) for c, k in zip(calls, cap, strict=True)]
    weights = [x.weight for x in loads]
    backlogged = set(range(len(loads)))
    per_weight = math.inf
    while backlogged:
        left = slots - sum(wants[i] * mean_s[i] for i in range(len(loads)) if i not in backlogged)
        per_weight = left / sum(weights[i] * mean_s[i] for i in backlogged)
        # At rho == 1 exactly a queue grows without bound too: only a strict margin is stable.
        settled = {i for i in backlogged if wants[i] < per_weight * weights[i] * (1 - 1e-9)}
        if not settled:
            break
        backlogged -= settled
    out: list[float | None] = []
    for i in range(len(loads)):
        if i in backlogged:
            out.append(min(per_weight * weights[i], cap[i]) * rows[i])
        elif calls[i] >= cap[i] * (1 - 1e-9):  # its own threads hold it back
            out.append(cap[i] * rows[i])
        else:
            out.append(None)
    return out


def _figures(sojourn_s: np.ndarray) -> tuple[float, float, float] | None:
    """p50, p99 and mean in ms; None without a request."""
    if not len(sojourn_s):
        return None
    # inverted_cdf: the smallest value with at least q of the requests at or below it, as
    # bench's histogram reads a percentile.
    p50, p99 = np.quantile(sojourn_s, [0.5, 0.99], method="inverted_cdf") * 1000
    return float(p50), float(p99), float(sojourn_s.mean() * 1000)


def simulate(
    loads: Sequence[ModelLoad],
    slots: int,
    *,
    requests: int = 20_000,
    seed: int = 0,
    warmup: float = 0.1,
) -> list[Prediction]:
    """Each model's predicted QPS, p50 and p99 in one process of ``slots`` model-call slots.

    About ``requests`` requests are simulated in all (over a window that long at the summed
    rates), from an empty server; those that arrive in the first ``warmup`` share of the window
    are left out of the figures. The same arguments give the same figures.
    """
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    if len({load.name for load in loads}) != len(loads):
        raise ValueError("each model may appear once")
    for load in loads:
        if not load.rate_qps > 0 or not load.weight > 0:
            raise ValueError(f"model {load.name}: rate and weight must be > 0")
    if not loads:
        return []
    rng = np.random.default_rng(seed)
    horizon = requests / sum(load.rate_qps for load in loads)
    arrivals, draws = [], []
    for load in loads:
        count = rng.poisson(load.rate_qps * horizon)
        arrivals.append(np.sort(rng.uniform(0.0, horizon, count)))
        draws.append(load.service.draw(rng, count) / 1000)
    # When each request may take its place in the queue: its arrival, or a page-in's end.
    queued = ready_times(
        arrivals, [None if x.page_in_ms is None else x.page_in_ms / 1000 for x in loads]
    )
    done = [np.empty_like(a) for a in arrivals]
    plain = [k for k, load in enumerate(loads) if load.batching is None]
    if len(loads) == 1 and slots == 1 and plain:
        done[0] = _lindley(queued[0], draws[0])
    else:
        times = np.concatenate([queued[k] for k in plain] + [np.empty(0)])
        order = np.argsort(times, kind="stable")
        stream = (
            times[order].tolist(),
            np.repeat(plain, [len(queued[k]) for k in plain]).astype(int)[order].tolist(),
            np.concatenate([np.arange(len(queued[k])) for k in plain] + [np.empty(0, int)])[
                order
            ].tolist(),
            np.concatenate([draws[k] for k in plain] + [np.empty(0)])[order].tolist(),
        )
        batchers = {
            k: _Batcher(k, queued[k].tolist(), draws[k].tolist(), b, [0.0] * b.threads)
            for k, load in enumerate(loads)
            if (b := load.batching) is not None
        }
        for m, first, end, finished in _serve(
            stream, batchers, [1 / x.weight for x in loads], slots
        ):
            done[m][first:end] = finished
    # Drawn after the service times, so that a load without a delay simulates as before.
    for k, load in enumerate(loads):
        if load.delay is not None:
            done[k] = done[k] + load.delay.draw(rng, len(done[k])) / 1000
    return [
        _predict(load, a, d, share, warmup * horizon)
        for load, a, d, share in zip(loads, arrivals, done, _shares(loads, slots), strict=True)
    ]


def _predict(
    load: ModelLoad, arrivals: np.ndarray, done: np.ndarray, share: float | None, warm: float
) -> Prediction:
    kept = arrivals >= warm
    if share is not None:
        figures: tuple[float, float, float] | None = (math.inf, math.inf, math.inf)
    else:
        figures = _figures(done[kept] - arrivals[kept])
    return Prediction(
        model=load.name,
        offered_qps=load.rate_qps,
        qps=load.rate_qps if share is None else min(load.rate_qps, share),
        p50_ms=None if figures is None else figures[0],
        p99_ms=None if figures is None else figures[1],
        mean_ms=None if figures is None else figures[2],
        saturated=share is not None,
        requests=int(kept.sum()),
    )

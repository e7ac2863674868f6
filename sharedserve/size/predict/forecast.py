"""Each planned replica's p50 and p99, the error expected of them and where they came from. Pure.

Where a model's profile holds its service times (``ModelProfile.service_times``: one call's time
measured alone; with ``open_loop_delay``, what an open-loop request costs beyond it, outside the
slots; the error text says which), the figures come from ``predict.queueing.simulate`` of one
replica: open-loop
arrivals at its planned rate per replica, the model-call slots its CPU limit gives a ``serve``
process (``scheduler.model_call_slots`` of ``limits.cpu.thread_pool_sizes``; from a CPU profile,
the limit's whole cores: ``calls_at_once``), each call's time
scaled by the p50 slowdown of the measured neighbourhood closest to the replica's planned one
(``predict.interference``: the GPU's other processes at their planned rates), its p99 by that
neighbourhood's p99 slowdown; a model with neighbours and no measured neighbourhood is
predicted without interference, and says so. Elsewhere, as before: the profile's sequential row
at that density (else the capacity point), p50 from the same row.

A shared server's models are one process (``size.grouping``): they are simulated together, each
at its planned rate per replica, taking the server's slots in the scheduler's weighted fair
turns (a model's weight its planned rate, as ``size.plan.specs`` writes it), so a cold model's
p99 has its neighbours' calls in it, not only its own. Where the server pages (``paging:``
in the fleet), its paged models' requests wait the fleet's ``page_in_ms`` where another paged
model took their room (``predict.page_ins``).

Speed: a replica alone on its slots is a queue whose sojourn scales with its service times, so
a rate and a slowdown meet in one figure, the load per slot (rho). Simulations are kept by
(service times, slots, rho) with rho rounded up to a step of 2% of the headroom ``1 - rho``
(about 2% in a p99 near saturation, less elsewhere, and always towards the worse), then scaled
by the slowdown: a fleet of 10,000 models drawn from a few dozen profiles simulates a few
hundred queues, not 10,000.

Corrections: where ``size --verify`` measured a model (``predict.corrections``), each of its
predictions is multiplied by its factors last (``LatencyForecaster._corrected``), whichever
way it was made, so that every figure judged against its objective is the corrected one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sharedserve.limits.cpu import CpuLimit, CpuLimitSource, thread_pool_sizes
from sharedserve.server import model_call_slots
from sharedserve.size.demand import Demand
from sharedserve.size.fleet import Fleet
from sharedserve.size.grouping import SharedServer
from sharedserve.size.predict.corrections import Correction
from sharedserve.size.predict.interference import (
    ALONE,
    UNMEASURED,
    Neighbour,
    Slowdown,
    lookup,
    planned,
)
from sharedserve.size.predict.queueing import ModelLoad, Prediction, simulate
from sharedserve.size.service_times import ServiceTimes, cpu_slots

__all__ = ["REQUESTS", "LatencyForecaster", "PredictedLatency", "calls_at_once", "slots_of"]

REQUESTS = 3000
"""Requests simulated a queue: a p99 from about 30 requests' tail, 2,700 after the warm-up."""

_STEP = 0.02
"""Rho is rounded up so that its headroom ``1 - rho`` shrinks by at most this share."""

SHARED = "queueing simulation (shared server)"
"""The ``source`` of a model simulated in its shared server's process."""

UNVERIFIED = "model error unmeasured: size --verify compares it with a measured run"


@dataclass(frozen=True)
class PredictedLatency:
    p50_ms: float | None
    p99_ms: float
    source: str
    """``queueing simulation`` or ``profile row``."""
    error: str
    """The error expected, and where that figure comes from, in words."""
    correction: Correction | None = None
    """The factors its figures were multiplied by (``predict.corrections``); None: none."""
    uncorrected_p50_ms: float | None = None
    """Its p50 before ``correction``."""
    uncorrected_p99_ms: float | None = None
    """Its p99 before ``correction``."""
    interference: str = ""
    """Which measured neighbourhood its slowdown beside the GPU's other processes came from
    (``Slowdown.source``); empty where it was read off a profile row."""


def slots_of(cpu_limit: float | None, node_cores: float) -> int:
    """A replica's model-call slots as ``serve`` sets them: from its CPU limit's whole cores,
    or the node's without a limit."""
    limit = CpuLimit(cpu_limit, CpuLimitSource.FLAG, None, max(1, math.floor(node_cores)))
    return model_call_slots(thread_pool_sizes(limit)[1])


def calls_at_once(d: Demand, node_cores: float) -> int:
    """The model calls a process runs side by side, as the simulation's slots. On a GPU, the
    ``serve`` process's model-call slots (``slots_of``). From a CPU profile (busy share from
    throughput), ``profile.cpu_slots`` of its CPU limit, or the node's cores: a CPU profile's
    parallel row (several users on one core) takes that many times a call's time alone at the
    sequential row's throughput, and on a verify run a small model in a server beside resnet50
    waited whole resnet50 calls."""
    if d.busy_source != "throughput":
        return slots_of(d.cpu_limit, node_cores)
    return cpu_slots(d.cpu_limit, node_cores)


def _rounded_rho(rho: float) -> float:
    """``rho`` rounded up on a grid whose steps shrink ``1 - rho`` by ``_STEP`` each."""
    if rho >= 1:
        return rho
    steps = math.ceil(-math.log(1 - rho) / -math.log(1 - _STEP) - 1e-9)
    return 1 - (1 - _STEP) ** steps


def _sampling(requests: int) -> str:
    """The p99's own sampling error: the ranks a 95% interval spans among ``requests``
    independent draws (a queue's waits are correlated, so it is wider)."""
    spread = 1.96 * math.sqrt(requests * 0.99 * 0.01)
    low = max(0.0, (requests * 0.99 - spread) / requests)
    high = min(1.0, (requests * 0.99 + spread) / requests)
    return (
        f"simulation sampling: p99 of {requests:,} simulated requests, its 95% interval the "
        f"p{low * 100:.2f} to p{high * 100:.2f} of them (wider: queue waits are correlated)"
    )


def _row(d: Demand, sharing: int) -> tuple[int | None, float | None, float]:
    """(density, p50, p99) of the sequential row ``p99_sharing`` reads; density None: the
    capacity point's figures."""
    for density, p99 in d.sharing_p99_ms:
        if density >= sharing:
            return density, dict(d.sharing_p50_ms).get(density), p99
    return None, d.point.p50_ms, d.predicted_p99_ms


def _interference(d: Demand, sharing: int, neighbours: Sequence[Neighbour] | None) -> Slowdown:
    """The one place a replica's slowdown beside its GPU's other processes is chosen
    (``predict.interference``). ``neighbours`` None: not placed yet (``server_p99``), so
    ``sharing - 1`` copies of itself, each always busy, as its sequential rows measured them."""
    if neighbours is None:
        neighbours = [Neighbour(d.kind or d.model, 1.0)] * (sharing - 1)
    found = lookup(d.neighbourhoods, neighbours)
    return UNMEASURED if found is None else found


def _slowed(s: Slowdown) -> str:
    """The error text's words on the slowdown ``s``."""
    if s in (ALONE, UNMEASURED):
        return s.source
    return f"{s.source}: p50 {s.p50:.3g}x, p99 {s.p99:.3g}x its own alone"


def _paging(model: str, paged: list[str], page_in_ms: float | None) -> str:
    """The error text's words on ``model``'s page-ins, if it is paged."""
    if model not in paged or page_in_ms is None:
        return ""
    if len(paged) == 1:
        return "; paged, alone: nothing else asks for its room, so no page-in"
    return (
        f"; paged: a {page_in_ms:g} ms page-in before a request whose model is not the last "
        "paged one asked for (room for one paged model; fewer where several fit)"
    )


def _unsimulated(d: Demand, sharing: int, why: str) -> PredictedLatency:
    """The profile's row at ``sharing``, where a simulation could not give a figure (``why``)."""
    density, p50, p99 = _row(d, sharing)
    where = "its capacity point" if density is None else f"its sequential row at {density}"
    return PredictedLatency(p50, p99, "profile row", f"{where} ({why}); {UNVERIFIED}")


class LatencyForecaster:
    """Forecasts replicas' p50 and p99; keeps each simulation for the plan's other replicas."""

    def __init__(
        self,
        node_cores: float,
        page_in_ms: float | None = None,
        corrections: Mapping[str, Correction] | None = None,
    ) -> None:
        self.node_cores = node_cores
        self.corrections = dict(corrections or {})
        """Each verified model's correction factors (``predict.corrections``), by name."""
        self.page_in_ms = page_in_ms
        """The fleet's page-in (``paging.page_in_ms``): what a shared server's paged model's
        request waits where its model was paged out (``predict.page_ins``); None: no paging."""
        self._runs: dict[tuple[ServiceTimes, int, float, ServiceTimes | None], Prediction] = {}
        self._done: dict[tuple[str, int, tuple[Slowdown, ...]], PredictedLatency] = {}
        self._simulations: dict[tuple[Any, ...], list[Prediction]] = {}

    @classmethod
    def for_fleet(
        cls, fleet: Fleet, corrections: Mapping[str, Correction] | None = None
    ) -> LatencyForecaster:
        """A forecaster of ``fleet``'s node and paging, its models corrected by
        ``corrections``."""
        page_in_ms = None if fleet.paging is None else fleet.paging.page_in_ms
        return cls(fleet.node.cpu_cores, page_in_ms, corrections)

    def _corrected(self, model: str, p: PredictedLatency) -> PredictedLatency:
        """``p`` times ``model``'s correction factors, if it has any; the one place they are
        applied, after whatever made the prediction."""
        c = self.corrections.get(model)
        if c is None:
            return p
        p99 = p.p99_ms * c.p99_factor
        p50 = p.p50_ms
        if p50 is not None and c.p50_factor is not None:
            p50 = p50 * c.p50_factor
        measured = f"model error measured by size --verify and corrected for: {c.words()}"
        return replace(
            p,
            p50_ms=None if p50 is None else min(p50, p99),  # a p50 over its p99 is no figure
            p99_ms=p99,
            source=f"{p.source}, corrected by size --verify",
            error=p.error.replace(UNVERIFIED, measured) if UNVERIFIED in p.error
            else f"{p.error}; {measured}",
            correction=c,
            uncorrected_p50_ms=p.p50_ms,
            uncorrected_p99_ms=p.p99_ms,
        )  # fmt: skip

    def alone(self, d: Demand, sharing: int) -> float:
        """``d``'s corrected p99 in a process of its own on a GPU of ``sharing`` processes, not
        kept: ``predict.corrections.meet_objective`` tries it at other rates than the plan's."""
        slowdown = _interference(d, sharing, None)  # not placed: its neighbours are not known
        return self._corrected(d.model, self._predict(d, sharing, slowdown)).p99_ms

    def forget(self) -> None:
        """Drop the plan's predictions, keeping the simulations: the models are re-planned."""
        self._done.clear()

    def __call__(
        self,
        d: Demand,
        sharing: int,
        server: SharedServer | None = None,
        neighbours: Sequence[Demand] | None = None,
    ) -> PredictedLatency:
        """Model ``d``'s replica on a GPU of ``sharing`` processes; ``server``: the shared
        server whose process holds it beside its other models (None: a process of its own);
        ``neighbours``: the models of the GPU's other processes, each at its planned rate
        (None: not placed yet, as ``server_p99``)."""
        together = server is not None and all(m.service_times for m in server.models)
        held = server.models if server is not None and together else [d]
        kinds = None if neighbours is None else planned(neighbours)
        slowdowns = tuple(_interference(m, sharing, kinds) for m in held)
        key = (d.model, sharing, slowdowns)
        found = self._done.get(key)
        if found is None:
            if server is not None and together:
                for (name, _), p in self._shared_server(server, sharing, slowdowns).items():
                    self._done[(name, sharing, slowdowns)] = p
                return self._corrected(d.model, self._done[key])
            found = self._done[key] = self._predict(d, sharing, slowdowns[0])
        return self._corrected(d.model, found)

    def server_p99(self, models: Sequence[Demand], sharing: int) -> dict[str, float] | None:
        """What ``size.grouping`` checks a candidate server by (its ``ServerP99``): each model's
        p99 in one process holding ``models`` on a GPU of ``sharing`` processes, as the plan
        would predict it (inf where that process cannot keep up); None where some model has no
        service times (the plan then reads each model's own row, whatever its neighbours).
        Kept out of the per-model cache: a candidate is not the plan's server."""
        if not all(m.service_times for m in models):
            return None
        server = SharedServer("a shared server", 1, list(models))
        slowdowns = tuple(_interference(m, sharing, None) for m in models)
        out = {}
        for (name, _), p in self._shared_server(server, sharing, slowdowns).items():
            # not simulated: it saturated
            out[name] = self._corrected(name, p).p99_ms if p.source == SHARED else math.inf
        return out

    def _shared_server(
        self, server: SharedServer, sharing: int, slowdowns: tuple[Slowdown, ...]
    ) -> dict[tuple[str, int], PredictedLatency]:
        """Every model of ``server`` simulated in one process of its slots, each model's calls
        slowed by its p50 slowdown (``slowdowns``, in its models' order) and its p99 then by
        what its p99 slowdown adds to that. Each model's rate is rounded up as a replica's is
        (its own rho on the grid), so that servers of like models at like rates share a
        simulation."""
        # One process: the fewest calls at once of its models (they share its thread pool).
        slots = min(calls_at_once(d, self.node_cores) for d in server.models)
        loads, key = [], []
        for d, slowdown in zip(server.models, slowdowns, strict=True):
            service = d.service_times
            assert service is not None
            scaled = ServiceTimes(tuple(v * slowdown.p50 for v in service.values_ms),
                                  service.counts)  # fmt: skip
            rho = _rounded_rho(d.rate_per_replica * scaled.mean_ms / 1000 / slots)
            rate = rho * slots * 1000 / scaled.mean_ms
            page_in = self.page_in_ms if d.model in server.paged else None
            loads.append(
                ModelLoad(
                    d.model, rate, scaled, weight=rate, delay=d.open_loop_delay, page_in_ms=page_in
                )
            )
            key.append((scaled, rho, d.open_loop_delay, page_in))
        cached = (slots, tuple(key))
        runs = self._simulations.get(cached)
        if runs is None:
            # A few requests a model at the least, for each model's own p99.
            requests = max(REQUESTS, 300 * len(loads))
            runs = self._simulations[cached] = simulate(loads, slots, requests=requests)
        out = {}
        for d, run, slowdown in zip(server.models, runs, slowdowns, strict=True):
            if run.saturated or run.p99_ms is None or run.p50_ms is None:
                # Not its simulation alone, which would promise what the shared process
                # cannot keep (server_p99 counts it as inf): its row, saying so.
                out[(d.model, sharing)] = _unsimulated(
                    d,
                    sharing,
                    f"a queueing simulation of {server.name}'s one process of "
                    f"{slots} slots saturates at its models' planned rates",
                )
                continue
            out[(d.model, sharing)] = PredictedLatency(
                run.p50_ms,
                # The calls ran slowed by the p50 factor; the tail the neighbours add beyond it.
                run.p99_ms * slowdown.p99 / slowdown.p50,
                SHARED,
                f"{_sampling(run.requests)}; service times from {d.service_times_source}; "
                f"one process of {slots} slots with "
                f"{', '.join(m.model for m in server.models if m is not d)} ({server.name}) at "
                "their planned rates, fair turns by rate; other processes on the GPU: "
                f"{_slowed(slowdown)}{_paging(d.model, server.paged, self.page_in_ms)}; "
                f"{UNVERIFIED}",
                interference=slowdown.source,
            )
        return out

    def _predict(self, d: Demand, sharing: int, slowdown: Slowdown) -> PredictedLatency:
        density, p50, p99 = _row(d, sharing)
        where = "its capacity point" if density is None else f"its sequential row at {density}"
        row = PredictedLatency(
            p50,
            p99,
            "profile row",
            f"{where}, measured beside copies of itself, not the planned neighbours at the "
            f"planned rates; {UNVERIFIED}",
        )
        service = d.service_times
        if service is None or d.rate_per_replica <= 0:
            return row
        slots = calls_at_once(d, self.node_cores)
        rho = _rounded_rho(d.rate_per_replica * service.mean_ms * slowdown.p50 / 1000 / slots)
        # Simulated at the slowdown's scale 1, at the rate that gives rho; sojourns scale (the
        # p50 by the p50 slowdown, the p99 by the p99's). The open-loop delay is outside the
        # slots and the slowdown: scaled down by it here, so that scaling the sojourns back
        # gives it whole.
        delay = d.open_loop_delay
        if delay is not None:
            delay = ServiceTimes(tuple(v / slowdown.p50 for v in delay.values_ms), delay.counts)
        run = self._runs.get((service, slots, rho, delay))
        if run is None:
            rate = rho * slots * 1000 / service.mean_ms
            load = ModelLoad(d.model, rate, service, delay=delay)
            run = simulate([load], slots, requests=REQUESTS)[0]
            self._runs[(service, slots, rho, delay)] = run
        if run.saturated or run.p99_ms is None or run.p50_ms is None:
            return _unsimulated(
                d,
                sharing,
                f"a queueing simulation saturates at {d.rate_per_replica:g} QPS on "
                f"{slots} slots with its service times",
            )
        return PredictedLatency(
            run.p50_ms * slowdown.p50,
            run.p99_ms * slowdown.p99,
            "queueing simulation",
            f"{_sampling(run.requests)}; service times from {d.service_times_source}; "
            f"other processes on the GPU: {_slowed(slowdown)}; {UNVERIFIED}",
            interference=slowdown.source,
        )

"""Model profiles for fleet sizing, read from ``bench`` reports: no second way of measuring. Pure.

A profile is what one ``report.json`` measured of one model: a point per row (a density of a
one-model sweep, or a scale of a mix) with the model's sustained QPS per replica, its p50/p99
(its replicas' histograms merged, as ``bench`` judged it), its failed share, the CPU and GPU
memory a replica used, and whether the row was trusted (stable, load generator not the limit,
a hundred requests at least).
``capacity`` picks the point sizing builds on: the highest QPS per replica at which the model
still met a given objective.

What a report does not say per model is estimated, and every point says how:

- GPU memory per replica: the NVML peak of its highest replica (``nvml``); else its cap, as a
  share of the GPU the report names (``cap``); else unknown (``None``: the planner falls back on
  the model's weights on disk and says so).
- CPU per replica: the row's server CPU over its replicas, an average over the mix's models.
- Service times: the model's latencies as the row's compact histogram gives them
  (``latency_histogram_ms``), None in reports from before it. ``ModelProfile.service_times``
  takes them from a trusted sequential row of one replica alone, where a request's latency is
  one call's time with no queue before it: what ``size.predict``'s queue draws from.
  ``ModelProfile.open_loop_delay``: what the open-loop (``poisson``) row at a low rate adds to a
  request beyond its call, measured as ``size --verify`` measures; the simulation adds it
  outside the slots.
- GPU busy share per replica: the row's mean GPU utilisation over its replicas, for a row of one
  model only (a mix's utilisation cannot be split between its models); ``None`` otherwise and
  without a real GPU.
- Neighbourhoods (``ModelProfile.neighbourhoods``): how much slower the model ran beside other
  processes, measured. Its rows beside another model's process (``profile --beside``: a
  directory's ``beside-*`` folders, read by ``load_profiles``) over its open-loop row alone, and
  its sequential rows at density N (beside N - 1 copies of itself) over its sequential row
  alone. ``size.predict.interference`` picks the one a planned GPU is closest to.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from sharedserve.bench.row import ModelFigures, ReportRow, parse_rows
from sharedserve.contract import mib_of
from sharedserve.errors import ConfigError
from sharedserve.size.neighbourhood import BESIDE, BesideRow, Neighbourhood
from sharedserve.size.service_times import ServiceTimes, in_flight, mean_wait_ms

__all__ = [
    "Capacity",
    "ModelProfile",
    "ProfilePoint",
    "beside_rows",
    "capacity",
    "load_profiles",
    "profiles_of",
]


MIN_REQUESTS = 100
"""Requests a point needs behind its p99 to be used: fewer, and the p99 is one slow request
(a short window on a slow model: ``profile`` of a CPU-bound model once gave a row of one)."""


@dataclass(frozen=True)
class ProfilePoint:
    """One model in one row of a report."""

    pattern: str
    density: int
    """Replicas of every model that shared the host (GPU) in that row."""
    replicas: int
    """Of those, replicas of this model."""
    qps_per_replica: float
    p50_ms: float | None
    p99_ms: float | None
    failed_share: float
    """Errors and dropped requests over completed plus dropped."""
    trusted: bool
    """Neither unstable nor limited by the load generator (``bench`` never recommends those),
    and at least ``MIN_REQUESTS`` requests."""
    cpu_cores_per_replica: float | None
    cpu_limit: float | None
    """The CPU limit each replica was measured under (cores); None: none."""
    gpu_mem_mib: float | None
    """GPU memory one replica needs, per ``gpu_mem_source``; None when the report cannot say."""
    gpu_mem_source: str | None
    """``nvml`` (measured peak), ``cap`` (its cap; nothing measured) or None."""
    gpu_busy_share: float | None
    """Share (0-1) of the GPU's time one replica kept it busy; None for a mix or without a GPU."""
    service_times: ServiceTimes | None = None
    """The model's latencies in this row (its replicas' merged); None: the report lacks them."""


def _mean_ms(times: ServiceTimes | None, p50_ms: float | None) -> float:
    """A row's mean latency: from its histogram, else its p50 (a report from before them)."""
    return times.mean_ms if times is not None else p50_ms or 0.0


@dataclass(frozen=True)
class ModelProfile:
    """Every point a report measured of one model."""

    model: str
    gpu_name: str | None
    """The real GPU the report measured on; None without one (a CPU profile)."""
    points: tuple[ProfilePoint, ...]
    source: str
    """Where the profile came from (the report's path), for messages and the plan."""
    beside: tuple[BesideRow, ...] = ()
    """Its rows beside other models' processes (a profile directory's ``beside-*`` reports)."""

    @property
    def max_density(self) -> int:
        """The most replicas that shared a GPU in any trusted row: beyond it is extrapolation."""
        return max((p.density for p in self.points if p.trusted), default=0)

    def _alone(self, pattern: str, timed: bool = True) -> ProfilePoint | None:
        """The trusted ``pattern`` row of one replica alone (density 1) with a histogram (any,
        unless ``timed``); of several (a directory of reports), the one with the most
        requests."""
        alone = [
            p
            for p in self.points
            if p.trusted
            and p.pattern == pattern
            and p.density == 1
            and p.replicas == 1
            and (p.service_times is not None or not timed)
        ]
        return max(alone, key=_service_count, default=None)

    @cached_property
    def neighbourhoods(self) -> tuple[Neighbourhood, ...]:
        """Every neighbourhood it was measured in, with its slowdown there: its sequential rows
        at density N (N - 1 copies of itself, each as busy as that row shows a replica) over
        its sequential row alone, and its rows beside other models (``beside``) over its
        open-loop row alone, whose rate they repeat. Trusted rows with a p50 and p99 only; a
        mix's sequential rows are left out (their neighbours are not copies of it)."""
        out: list[Neighbourhood | None] = []
        alone = self._alone("sequential", timed=False)
        for p in self.points:
            if p.pattern == "sequential" and 1 < p.density == p.replicas and alone is not None:
                copies = p.density - 1
                busy = copies * in_flight(p.qps_per_replica, _mean_ms(p.service_times, p.p50_ms))
                words = f"{copies} cop{'y' if copies == 1 else 'ies'} of itself"
                where = f"profile {self.source}, its sequential row at density {p.density}"
                out.append(
                    _slowed(p, alone, kind=self.model, neighbours=words, busy=busy, where=where)
                )
        solo = self._alone("poisson", timed=False)
        for row in self.beside:
            if row.neighbours and solo is not None:
                kind = max(row.neighbours, key=lambda n: n[1])[0]
                words = ", ".join(name for name, _ in row.neighbours)
                busy = sum(share for _, share in row.neighbours)
                where = f"profile {row.source}"
                out.append(
                    _slowed(row.point, solo, kind=kind, neighbours=words, busy=busy, where=where)
                )
        return tuple(n for n in out if n is not None)

    # Cached: every fleet model drawing on this profile reads these three (size.demand), and
    # each reads the others.
    @cached_property
    def service_times(self) -> ServiceTimes | None:
        """One call's time, the time it holds its slot: from the trusted sequential point of
        one replica alone (one request in flight, so its latency had no queue in it); None
        without one."""
        row = self._alone("sequential")
        return None if row is None else row.service_times

    @cached_property
    def open_loop_delay(self) -> ServiceTimes | None:
        """What an open-loop request costs beyond its call, holding no slot: the open-loop
        (``poisson``) row's latencies less the call's mean time (at least 0). That row is
        measured as ``size --verify`` measures (arrivals on a schedule, latency from it, the
        server idle between requests), the sequential row closed loop (the next request on a
        hot connection the moment the last returns): tiny's p50 is 2.4 ms in one and 0.96 ms in
        the other (benchmarks/results/sizing_verify_cpu.md). Taken as service time, those 2.4 ms
        would keep a slot busy half the time at 200 requests/s, where the calls keep it busy a
        fifth (an earlier version did, and predicted a hot model's p50 at +323%), so it is a
        delay beside the queue, not a longer call. None without both rows.

        The row runs at up to a quarter of a replica's sequential rate (``profile``: enough
        requests for a slow model), where a request may also queue behind the one before; the
        simulation adds its own queue, so the mean wait an M/G/1 queue of the row's rate would
        show (Pollaczek-Khinchine, one slot a whole core of its CPU limit: if it had more, this
        takes off too much, never below 0) is taken off as well: counted once, not twice."""
        row, calls = self._alone("poisson"), self.service_times
        if row is None or row.service_times is None or calls is None:
            return None
        beyond = calls.mean_ms + mean_wait_ms(calls, row.qps_per_replica, row.cpu_limit)
        times = row.service_times
        return ServiceTimes(tuple(max(0.0, v - beyond) for v in times.values_ms), times.counts)

    @cached_property
    def service_times_source(self) -> str | None:
        """Where ``service_times`` and ``open_loop_delay`` come from, in words, for the plan."""
        if self.service_times is None:
            return None
        delay = self.open_loop_delay
        if delay is None:
            return (
                "its sequential row at density 1 (closed loop; no trusted open-loop row, so a "
                "request's open-loop cost is not in the prediction)"
            )
        return (
            "its sequential row at density 1, plus its open-loop row's latency beyond a call "
            f"(mean {delay.mean_ms:.3g} ms, outside the slots) as size --verify measures"
        )


def _slowed(
    beside: ProfilePoint,
    alone: ProfilePoint,
    *,
    kind: str,
    neighbours: str,
    busy: float,
    where: str,
) -> Neighbourhood | None:
    """The neighbourhood ``beside`` was measured in (the rest as ``Neighbourhood``'s), its p50
    and p99 over ``alone``'s; None where either row is untrusted or lacks them."""
    rows = (beside, alone)
    if not all(r.trusted and r.p50_ms and r.p99_ms for r in rows):
        return None
    assert beside.p50_ms and beside.p99_ms and alone.p50_ms and alone.p99_ms
    return Neighbourhood(kind, neighbours, busy, beside.p50_ms / alone.p50_ms,
                         beside.p99_ms / alone.p99_ms, where)  # fmt: skip


def _service_count(point: ProfilePoint) -> int:
    return 0 if point.service_times is None else sum(point.service_times.counts)


@dataclass(frozen=True)
class Capacity:
    """What sizing builds on: the best point that met the objective."""

    qps_per_replica: float
    point: ProfilePoint


def _model_point(row: ReportRow, model: ModelFigures, gpu_mib: int | None) -> ProfilePoint:
    attempted = model.requests + (model.dropped or 0)
    failed = model.failed / attempted if attempted else 1.0
    cpu = row.cpu_util_mean
    mem = model.gpu_mem_mib
    source: str | None = "nvml"
    if mem is None:
        fraction = model.gpu_memory_fraction
        # The cap in force, in MiB, as the server resolved it from the share (mib_of).
        mem, source = (mib_of(fraction, gpu_mib), "cap") if fraction and gpu_mib else (None, None)
    util = row.gpu_util_mean
    alone = len(row.models) == 1
    return ProfilePoint(
        pattern=row.pattern,
        density=row.density,
        replicas=model.replicas,
        qps_per_replica=model.qps / model.replicas,
        p50_ms=model.p50_ms,
        p99_ms=model.p99_ms,
        failed_share=failed,
        trusted=row.stable is not False and not row.unreliable and model.requests >= MIN_REQUESTS,
        cpu_cores_per_replica=None if cpu is None else cpu / row.density,
        cpu_limit=model.cpu_limit,
        gpu_mem_mib=None if mem is None else float(mem),
        gpu_mem_source=source,
        gpu_busy_share=util / 100 / row.density if util is not None and alone else None,
        service_times=_times(model),
    )


def _gpu(report: dict[str, Any], rows: list[ReportRow]) -> tuple[str | None, int | None]:
    """The real GPU the report measured on: its name and memory in MiB (None, None without)."""
    names = {r.gpu_name for r in rows if r.gpu_name is not None}
    gpus = (report.get("environment") or {}).get("gpus") or []
    if not names:
        return None, None
    name = sorted(names)[0]
    memory = next((g.get("memory_mib") for g in gpus if g.get("name") == name), None)
    return name, None if memory is None else int(memory)


def profiles_of(report: Any, source: str = "report") -> dict[str, ModelProfile]:
    """Each model's profile in a parsed ``report.json``, by model name, in the report's order."""
    rows = parse_rows(report, source)
    gpu_name, gpu_mib = _gpu(report, rows)
    points: dict[str, list[ProfilePoint]] = {}
    try:
        for row in rows:
            for name, model in row.models.items():
                points.setdefault(name, []).append(_model_point(row, model, gpu_mib))
    except (ValueError, ZeroDivisionError) as e:
        raise ConfigError(f"{source}: a row is not in bench's format ({e!r})") from e
    except ConfigError as e:  # a cap the server itself would have refused
        raise ConfigError(f"{source}: {e.message}") from e
    return {
        name: ModelProfile(name, gpu_name, tuple(found), source) for name, found in points.items()
    }


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read profile {path}: {e.strerror}") from e
    except ValueError as e:
        raise ConfigError(f"profile {path} is not valid JSON: {e}") from e


def beside_rows(report: Any, source: str) -> dict[str, list[BesideRow]]:
    """Each model's rows in a parsed report of models measured beside each other's processes
    (``profile --beside``), with the others' busy shares there, by model name."""
    rows = parse_rows(report, source)
    out: dict[str, list[BesideRow]] = {}
    for name, profile in profiles_of(report, source).items():  # its points, as any report's
        held = [row for row in rows if name in row.models]
        for row, point in zip(held, profile.points, strict=True):
            others = tuple(
                (n, in_flight(m.qps, _mean_ms(_times(m), m.p50_ms)))
                for n, m in row.models.items()
                if n != name
            )
            out.setdefault(name, []).append(BesideRow(point, others, source))
    return out


def _times(model: ModelFigures) -> ServiceTimes | None:
    pairs = model.latency_histogram_ms
    return ServiceTimes.of([(v, n) for v, n in pairs]) if pairs else None


def load_profiles(path: Path) -> dict[str, ModelProfile]:
    """The profiles of every model in a ``report.json``, or in every report.json under a
    directory (``sharedserve profile``'s sequential, parallel and poisson sweeps), their points
    together; a directory's ``beside-*`` reports (``profile --beside``) are its models' rows
    beside other processes (``ModelProfile.beside``), and their neighbours are no profiles."""
    if not path.is_dir():
        return profiles_of(_json(path), str(path))
    reports = sorted(path.rglob("report.json"))
    beside = [r for r in reports if r.parent.name.startswith(BESIDE)]
    own = [r for r in reports if r not in beside]
    if not own:
        raise ConfigError(
            f"profile directory {path} holds no report.json"
            + (f" but its {BESIDE}* ones, which measure it beside others" if beside else "")
        )
    merged: dict[str, ModelProfile] = {}
    for report in own:
        for name, found in profiles_of(_json(report), str(report)).items():
            have = merged.get(name)
            if have is None:
                merged[name] = ModelProfile(name, found.gpu_name, found.points, str(path))
                continue
            if found.gpu_name != have.gpu_name:
                raise ConfigError(
                    f"profile directory {path}: model {name} was measured on {have.gpu_name} "
                    f"and on {found.gpu_name}; a profile is one kind of GPU"
                )
            merged[name] = ModelProfile(name, have.gpu_name, have.points + found.points, str(path))
    for report in beside:
        for name, rows in beside_rows(_json(report), str(report.parent)).items():
            if name in merged:
                merged[name] = replace(merged[name], beside=merged[name].beside + tuple(rows))
    return merged


def capacity(
    profile: ModelProfile, slo_p99_ms: float, max_failed_share: float = 0.001
) -> Capacity | None:
    """The trusted point with the highest QPS per replica at which the model met ``slo_p99_ms``
    with under ``max_failed_share`` failed; None when no point did (the model cannot be sized
    on this profile)."""
    met = [
        p
        for p in profile.points
        if p.trusted
        and p.p99_ms is not None
        and p.p99_ms <= slo_p99_ms
        and p.failed_share < max_failed_share
        and p.qps_per_replica > 0
    ]
    if not met:
        return None
    best = max(met, key=lambda p: (p.qps_per_replica, -p.density))
    return Capacity(best.qps_per_replica, best)

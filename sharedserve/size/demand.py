"""What each model of a fleet asks of the GPUs: replicas, and each replica's memory and time. Pure.

From a model's profile (``size.profile``) and its fleet entry:

- **Replicas**: enough that each carries at most ``utilization_target`` of the highest QPS per
  replica at which its profile met its objective (the headroom), and at least ``min_replicas``.
- **Memory per replica**: what the profile measured at that point (NVML peak, else its cap),
  else the model's files on disk; the source is kept, for the plan to say.
- **Busy share per replica**: the share of a GPU's time it needs at its planned rate. From the
  GPU utilisation of the profile's row when it measured this model alone; otherwise from
  throughput: a replica at its measured QPS, sharing the GPU with ``density`` replicas, is counted
  as ``1 / density`` of it, which overstates a GPU that had time to spare.
- **Densest measured**: the most replicas that shared a GPU in a trusted row of its profile, and
  at most ``max_replicas_per_gpu``; packing never goes beyond it.

A profile that never met the model's objective, or that lacks the model, is an error naming both;
one measured on another kind of GPU, or on CPU, is a warning the plan carries.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sharedserve.errors import ConfigError
from sharedserve.placement import Replicas
from sharedserve.size.fleet import Fleet, FleetModel, listed
from sharedserve.size.neighbourhood import Neighbourhood
from sharedserve.size.profile import ModelProfile, ProfilePoint, capacity
from sharedserve.size.service_times import ServiceTimes

__all__ = ["Demand", "demands"]


@dataclass(frozen=True)
class Demand:
    """One model's share of the fleet."""

    model: str
    replicas: int
    rate_per_replica: float
    """Requests/s each replica carries at the model's peak."""
    capacity_qps: float
    """The highest QPS per replica at which the profile met the objective."""
    memory_mib: float
    """GPU memory per replica, without the context reserve."""
    memory_source: str
    """``nvml``, ``cap`` or ``weights`` (its files on disk: nothing was measured)."""
    busy_share: float
    """Share (0-1) of a GPU's time per replica at ``rate_per_replica``."""
    busy_source: str
    """``gpu utilisation`` or ``throughput`` (see the module's docstring)."""
    max_density: int
    """Most replicas of any model a GPU holding this one may have."""
    spread: int
    """GPUs (and, where the fleet has them, nodes) its replicas must be spread over: its
    ``min_replicas``, the replicas kept for availability, or all of them when fewer."""
    predicted_p99_ms: float
    """The p99 the profile measured at the point the plan builds on."""
    cpu_cores: float | None
    """CPU cores per replica at that point; None when not measured."""
    cpu_limit: float | None
    """The CPU limit a replica was measured under, which its plan keeps; None: none."""
    point: ProfilePoint
    sharing_p99_ms: tuple[tuple[int, float], ...] = ()
    """(density, p99) of the profile's trusted sequential rows, densest last: one request in
    flight a replica, beside density - 1 replicas doing the same."""
    sharing_p50_ms: tuple[tuple[int, float], ...] = ()
    """(density, p50) of the same rows, where they have a p50."""
    service_times: ServiceTimes | None = None
    """One call's time measured alone (``ModelProfile.service_times``); None: not in the
    profile, and its p50/p99 are read off the profile's rows (``size.predict``)."""
    open_loop_delay: ServiceTimes | None = None
    """What an open-loop request costs beyond its call (``ModelProfile.open_loop_delay``)."""
    service_times_source: str | None = None
    """Where both come from, in words (``ModelProfile.service_times_source``)."""
    slo_p99_ms: float | None = None
    """Its objective (the fleet's), which a page-in must leave room in (``size.grouping``)."""
    files_mib: float | None = None
    """Its files' size on disk; None: the fleet gives no files (``size.host``)."""
    kind: str | None = None
    """The model its profile measured (``profile_model``): what a neighbour is matched by in
    another model's measured neighbourhoods (``size.predict.interference``); None: its name."""
    neighbourhoods: tuple[Neighbourhood, ...] = ()
    """Where its profile measured it beside other processes, and its slowdown there
    (``ModelProfile.neighbourhoods``)."""

    def p99_sharing(self, replicas: int) -> float:
        """The p99 predicted for a replica on a GPU of ``replicas`` replicas at the planned
        rates: the sequential row of the fewest replicas no fewer than that. Neighbours below
        their capacity contend about as a sequential neighbour does, which is always busy but
        one request deep; the saturated point capacity comes from overstates it. Without such a
        row, the capacity point's p99."""
        for density, p99 in self.sharing_p99_ms:
            if density >= replicas:
                return p99
        return self.predicted_p99_ms

    def placed_as(self) -> Replicas:
        """What the placement routine places: its replicas, memory, time, density and spread."""
        return Replicas(
            self.model,
            self.replicas,
            self.memory_mib,
            busy_share=self.busy_share,
            max_density=self.max_density,
            spread=self.spread,
        )


def _tokens(name: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", name.lower())) - {"nvidia", "tesla"}


def _gpu_mismatch(fleet: Fleet, profile: ModelProfile) -> str | None:
    """What is wrong with where ``profile`` was measured, for sizing ``fleet``; None: nothing."""
    if profile.gpu_name is None:
        return f"was measured without a GPU (a CPU profile), not on {fleet.gpu.name}"
    if not _tokens(fleet.gpu.name) <= _tokens(profile.gpu_name):
        return f"was measured on {profile.gpu_name}, not on {fleet.gpu.name}"
    return None


def _demand(
    fleet: Fleet, entry: FleetModel, profile: ModelProfile, weights_mib: float | None
) -> Demand:
    found = capacity(profile, entry.slo_p99_ms)
    if found is None:
        measured = [p.p99_ms for p in profile.points if p.p99_ms is not None]
        best = f"; its best p99 was {min(measured):g} ms" if measured else ""
        raise ConfigError(
            f"model {entry.name}: its profile ({profile.source}) never met p99 <= "
            f"{entry.slo_p99_ms:g} ms with its requests served, at any density it measured"
            f"{best}; profile it at lower densities or relax its objective"
        )
    point = found.point
    usable = found.qps_per_replica * fleet.utilization_target
    replicas = max(entry.min_replicas, math.ceil(entry.peak_qps / usable))
    rate = entry.peak_qps / replicas
    if point.gpu_mem_mib is not None and point.gpu_mem_source is not None:
        memory, memory_source = point.gpu_mem_mib, point.gpu_mem_source
    elif weights_mib is not None:
        memory, memory_source = weights_mib, "weights"
    else:
        raise ConfigError(
            f"model {entry.name}: its profile has no GPU memory figure (no NVML peak, no cap); "
            "give its files as `model:` in the fleet file so their size can stand in"
        )
    if point.gpu_busy_share is not None:
        busy = point.gpu_busy_share * rate / point.qps_per_replica
        busy_source = "gpu utilisation"
    else:
        busy = rate / point.qps_per_replica / point.density
        busy_source = "throughput"
    densest = profile.max_density
    if entry.max_replicas_per_gpu is not None:
        densest = min(densest, entry.max_replicas_per_gpu)
    return Demand(
        model=entry.name,
        replicas=replicas,
        rate_per_replica=rate,
        capacity_qps=found.qps_per_replica,
        memory_mib=memory,
        memory_source=memory_source,
        busy_share=busy,
        busy_source=busy_source,
        max_density=max(1, densest),
        spread=min(replicas, entry.min_replicas),
        predicted_p99_ms=float(point.p99_ms or 0.0),
        cpu_cores=point.cpu_cores_per_replica,
        cpu_limit=point.cpu_limit,
        point=point,
        sharing_p99_ms=tuple(
            sorted(
                (p.density, p.p99_ms)
                for p in profile.points
                if p.pattern == "sequential" and p.trusted and p.p99_ms is not None
            )
        ),
        sharing_p50_ms=tuple(
            sorted(
                (p.density, p.p50_ms)
                for p in profile.points
                if p.pattern == "sequential" and p.trusted and p.p50_ms is not None
            )
        ),
        service_times=profile.service_times,
        open_loop_delay=profile.open_loop_delay,
        service_times_source=profile.service_times_source,
        slo_p99_ms=entry.slo_p99_ms,
        files_mib=weights_mib,
        kind=profile.model,
        neighbourhoods=profile.neighbourhoods,
    )


def demands(
    fleet: Fleet,
    profiles: Mapping[str, Mapping[str, ModelProfile]],
    weights_mib: Mapping[str, float] | None = None,
) -> tuple[list[Demand], list[str]]:
    """Each fleet model's demand, in the fleet's order, and the warnings the plan must carry.

    ``profiles``: the profiles of every report the fleet names, by the report's path (as the
    fleet gives it, ``str(entry.profile)``); ``weights_mib``: the size on disk of the models with
    files, by fleet name.
    """
    out = []
    # One warning per profile, naming its models: a fleet of 500 models drawn from a few
    # profiles must not bury the plan under 500 lines saying the same thing.
    mismatched: dict[tuple[str, str], list[str]] = {}
    for entry in fleet.models:
        report = profiles.get(str(entry.profile))
        if report is None:
            raise ConfigError(f"model {entry.name}: no profile was read from {entry.profile}")
        profile = report.get(entry.in_profile)
        if profile is None:
            raise ConfigError(
                f"model {entry.name}: its profile ({entry.profile}) measured no model "
                f"{entry.in_profile!r} (it has: {', '.join(report)}); set profile_model"
            )
        mismatch = _gpu_mismatch(fleet, profile)
        if mismatch:
            mismatched.setdefault((str(profile.source), mismatch), []).append(entry.name)
        out.append(_demand(fleet, entry, profile, (weights_mib or {}).get(entry.name)))
    warnings = [
        f"{'model' if len(names) == 1 else 'models'} {listed(names)}: "
        f"{'its' if len(names) == 1 else 'their'} profile ({source}) {mismatch}"
        for (source, mismatch), names in mismatched.items()
    ]
    return out, warnings

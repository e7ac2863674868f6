"""Demands built from a few numbers, and ``size``'s packing of them, for the unit tests of
sizing, grouping and placement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sharedserve.placement import OpenEnded, Placement, place
from sharedserve.size.demand import Demand
from sharedserve.size.profile import ProfilePoint
from sharedserve.size.service_times import ServiceTimes

POINT = ProfilePoint("parallel", 1, 1, 1.0, None, 1.0, 0.0, True, None, None, None, None, None)
# The GPU (MiB), reserve (MiB) and target utilisation the grouping tests plan for.
GPU, RESERVE, TARGET = 40_000, 512, 0.8


def demand(replicas: int, memory: float, busy: float, densest: int) -> Demand:
    """Model ``m``: ``replicas`` of ``memory`` MiB, each busy ``busy`` of a GPU, at most
    ``densest`` to a GPU."""
    values: dict[str, Any] = {"model": "m", "replicas": replicas, "rate_per_replica": 1.0,
                              "capacity_qps": 1.0, "memory_mib": memory, "memory_source": "nvml",
                              "busy_share": busy, "busy_source": "gpu utilisation",
                              "max_density": densest, "spread": 1, "predicted_p99_ms": 1.0,
                              "cpu_cores": None, "cpu_limit": None,
                              "point": POINT}  # fmt: skip
    return Demand(**values)


def model(name: str, load: float, memory: float = 1000, busy: float = 0.05,
          replicas: int = 1, densest: int = 8) -> Demand:  # fmt: skip
    """A model whose replicas each carry ``load`` of one replica's 100 QPS capacity."""
    d = replace(demand(replicas, memory, busy, densest), model=name)
    return replace(d, rate_per_replica=100 * load, capacity_qps=100.0, spread=replicas)


def timed(name: str, call_ms: float, qps: float, capacity: float, slo: float | None) -> Demand:
    """A model of one CPU core (one call at a time in its process) whose every call takes
    ``call_ms``, at ``qps`` a replica of ``capacity``."""
    d = replace(model(name, qps / capacity), rate_per_replica=qps, capacity_qps=capacity)
    return replace(d, service_times=ServiceTimes.of([(call_ms, 1)]), busy_source="throughput",
                   cpu_limit=1.0, slo_p99_ms=slo, service_times_source="a test")  # fmt: skip


def pack(
    demands: Sequence[Demand],
    *,
    gpu_memory_mib: float,
    reserve_mib: float,
    target: float,
    gpus_per_node: int,
    max_gpus: int | None = None,
) -> Placement:
    """``size``'s packing: its demands onto GPUs of one size, opened as needed."""
    return place(
        [d.placed_as() for d in demands],
        OpenEnded(gpu_memory_mib, gpus_per_node, max_gpus),
        reserve_mib=reserve_mib,
        target=target,
    )

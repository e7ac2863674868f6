"""A row's figures judged in words: why a model missed its objective, and why a row's load
generator is not to be trusted. Pure: what ``bench.summary`` writes into a row, and the
verdict, the report and the summary say of it, come from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sharedserve.bench.row import ModelFigures

__all__ = [
    "LATE_LIMIT",
    "LOADGEN_CPU_LIMIT",
    "loadgen_trouble",
    "model_miss",
    "model_p99",
    "pct",
    "typed_model_miss",
]

#: Above this share of one core the load generator (one Locust process is single-threaded) is
#: likely the bottleneck, and the latencies measure it as much as the servers. Locust itself
#: warns at 90%; we stop trusting a row a little earlier.
LOADGEN_CPU_LIMIT = 0.8
#: Above this share of requests sent over 1 ms after their schedule (open loop), the load
#: generator's own delay is in the latencies and two runs of the same load disagree: the row is
#: not trustworthy, whatever its figures say. Kept off the servers' CPUs (``limits.affinity``)
#: it sends well under this.
LATE_LIMIT = 0.05


def pct(rate: float) -> str:
    """A share as a percentage, to three significant figures."""
    return f"{rate * 100:.3g}%"


def model_miss(
    name: str, model: dict[str, Any], slo_p99_ms: float, max_error_rate: float
) -> str | None:
    """Why one model missed its objective, in words; None when it met it.

    Dropped requests count as failures: an open loop drops only when requests pile up, which is
    the overload the SLO is there to catch, and the latencies they would have had are unmeasured.
    """
    return _miss(
        name, requests=model["requests"], errors=model["errors"],
        dropped=model.get("dropped") or 0, p99_ms=model["p99_ms"], replicas=model.get("replicas"),
        slo_p99_ms=slo_p99_ms, max_error_rate=max_error_rate,
    )  # fmt: skip


def typed_model_miss(
    name: str, model: ModelFigures, slo_p99_ms: float, max_error_rate: float
) -> str | None:
    """``model_miss`` of a model's figures read into their type (``bench.row``)."""
    return _miss(
        name, requests=model.requests, errors=model.errors, dropped=model.dropped or 0,
        p99_ms=model.p99_ms, replicas=model.replicas, slo_p99_ms=slo_p99_ms,
        max_error_rate=max_error_rate,
    )  # fmt: skip


def _miss(
    name: str,
    *,
    requests: int,
    errors: int,
    dropped: int,
    p99_ms: float | None,
    replicas: int | None,
    slo_p99_ms: float,
    max_error_rate: float,
) -> str | None:
    if requests == 0:
        return f"model {name} completed no requests"
    failed = (errors + dropped) / (requests + dropped)
    if failed >= max_error_rate:
        parts = [f"{errors} errors"] if errors else []
        parts += [f"{dropped} dropped"] if dropped else []
        return f"model {name} failed {pct(failed)} ({' + '.join(parts)})"
    if p99_ms is None:
        return f"model {name} had no successful request"
    if p99_ms > slo_p99_ms:
        return f"model {name} {_p99(p99_ms, replicas)} > {slo_p99_ms:g} ms"
    return None


def model_p99(model: dict[str, Any]) -> str:
    """The p99 a model is judged by, as every verdict quotes it: over its replicas' requests
    together (the merged histogram), named so where there are several, since one replica's
    p99 can be worse. ``model`` is an entry of a row's ``models``."""
    return _p99(model["p99_ms"], model.get("replicas"))


def _p99(p99_ms: float, replicas: int | None) -> str:
    text = f"p99 {p99_ms:g} ms"
    replicas = replicas or 1
    return text if replicas == 1 else f"{text} (all {replicas} replicas)"


def loadgen_trouble(row: Mapping[str, Any]) -> str | None:
    """Why a row's load generator is not to be trusted, in words; None when it is: it used
    more than ``LOADGEN_CPU_LIMIT`` of a core, or sent more than ``LATE_LIMIT`` of its requests
    over 1 ms late. Either way its own delay is in the latencies (the row's ``unreliable``)."""
    why = []
    cpu, late = row.get("loadgen_cpu_util"), row.get("late_share")
    if cpu is not None and cpu > LOADGEN_CPU_LIMIT:
        why.append(f"the load generator used {pct(cpu)} of a core (over {pct(LOADGEN_CPU_LIMIT)})")
    if late is not None and late > LATE_LIMIT:
        why.append(f"{pct(late)} of requests were sent over 1 ms late (over {pct(LATE_LIMIT)})")
    return " and ".join(why) or None

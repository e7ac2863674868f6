"""Which measured neighbourhood a replica's slowdown beside its GPU's other processes comes from.
Pure.

A model's table is its profile's measured neighbourhoods (``Demand.neighbourhoods``, from
``ModelProfile.neighbourhoods``): rows beside another model's process (``profile --beside``)
and its sequential rows at density N, beside N - 1 copies of itself. A replica's planned
neighbourhood is the OTHER processes on its GPU, each model at its planned rate (a shared
server's models each count; the replica's own server-mates are in its queueing simulation, not
here). ``lookup`` takes the measured neighbourhood closest to it:

1. of the planned neighbourhood's kind (the model, as profiled, with the largest busy share of
   its neighbours), where one was measured; else of any kind, the copies of itself included,
   rather than none;
2. then the nearest total busy share; of two as near, the busier (the more cautious figure);
3. scaled to the planned busy share: a slowdown grows from none with nobody beside (busy share
   0, factor 1) to the measured one at its busy share, so the planned neighbourhood's factor is
   on the line through both, ``1 + (measured - 1) * planned / measured busy``. Taken whole, a
   neighbourhood measured busier than the plan's said resnet50's process beside two small
   models at 30 requests/s slowed it as 150 requests/s of tiny did (+28% on its p50 in a
   verify run), where the line gives it about a tenth of that.

Busy shares are requests in flight on both sides (``profile.in_flight``): a planned neighbour's
from its planned rate and its profile's mean call (plus its open-loop cost), a measured one's
from its row's QPS and mean latency. A planned neighbour whose profile has no service times
counts its demand's busy share instead (an older profile: GPU utilisation or throughput).

The lookup gives the model's p50 and p99 there over its own alone, and says which measurement
they are; ``None`` where the model has no measured neighbourhood at all (its prediction then
assumes no interference, and the plan says so).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sharedserve.size.demand import Demand
from sharedserve.size.neighbourhood import Neighbourhood
from sharedserve.size.service_times import in_flight

__all__ = ["ALONE", "UNMEASURED", "Neighbour", "Slowdown", "lookup", "neighbour", "planned"]


@dataclass(frozen=True)
class Neighbour:
    """One model in another process on the replica's GPU, at its planned rate."""

    kind: str
    """Its model as profiled (``Demand.kind``)."""
    busy_share: float
    """Its requests in flight (``profile.in_flight``)."""


@dataclass(frozen=True)
class Slowdown:
    """What the neighbours do to a replica's latency: factors on its p50 and p99 alone."""

    p50: float
    p99: float
    source: str
    """Which measurement the factors are, in words, for the plan."""


ALONE = Slowdown(1.0, 1.0, "alone on its GPU: no other process's interference")
UNMEASURED = Slowdown(1.0, 1.0, "assumes no interference (no neighbourhood measured)")


def neighbour(d: Demand) -> Neighbour:
    """``d``'s replica as another replica's neighbour: its kind, and its busy share at its
    planned rate."""
    kind = d.kind or d.model
    if d.service_times is None:
        return Neighbour(kind, d.busy_share)
    mean = d.service_times.mean_ms
    if d.open_loop_delay is not None:
        mean += d.open_loop_delay.mean_ms
    return Neighbour(kind, in_flight(d.rate_per_replica, mean))


def planned(demands: Iterable[Demand]) -> list[Neighbour]:
    """The models of a GPU's other processes as ``lookup`` reads them: a ``Neighbour`` per kind,
    its busy shares summed (once a replica, not once a model of its shared server)."""
    shares: dict[str, float] = {}
    for d in demands:
        n = neighbour(d)
        shares[n.kind] = shares.get(n.kind, 0.0) + n.busy_share
    return [Neighbour(kind, busy) for kind, busy in shares.items()]


def lookup(measured: Sequence[Neighbourhood], neighbours: Sequence[Neighbour]) -> Slowdown | None:
    """The slowdown of the measured neighbourhood closest to ``neighbours`` (the module's
    rule); ``ALONE`` without neighbours; None: nothing measured to choose from."""
    if not neighbours:
        return ALONE
    shares: dict[str, float] = {}
    for n in neighbours:
        shares[n.kind] = shares.get(n.kind, 0.0) + n.busy_share
    # Of kinds as busy, the first named: the same GPU always gives the same choice.
    kind = max(shares, key=lambda k: shares[k])
    total = sum(shares.values())
    same = [m for m in measured if m.kind == kind]
    chosen = min(
        same or measured,
        key=lambda m: (abs(m.busy_share - total), -m.busy_share),
        default=None,
    )
    if chosen is None:
        return None
    scale = total / chosen.busy_share if chosen.busy_share > 0 else 1.0
    if abs(scale - 1) < 0.005:  # at the measured busy share: the measurement itself
        return Slowdown(chosen.p50_slowdown, chosen.p99_slowdown, chosen.description)
    return Slowdown(
        1 + (chosen.p50_slowdown - 1) * scale,
        1 + (chosen.p99_slowdown - 1) * scale,
        f"{chosen.description}, scaled to {total:.2g} busy",
    )

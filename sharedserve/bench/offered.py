"""The load each replica is offered: the mix's total split by model weight, then over replicas.

``--rate`` (Poisson) and ``--concurrency`` (parallel) are the load of the whole mix at scale 1;
scale ``s`` (``s`` times every model's replicas) offers ``s`` times as much, so a replica carries
the same load at every scale and only the packing changes, as a density sweep of one model does.
A model's share is its ``weight`` over the sum of the models' weights, split evenly across its
replicas. Sequential load is one request in flight per replica: weights do not apply.

For a density sweep of one model (one entry of one replica, scaled), this is what the flags have
always meant: ``--rate`` requests/s and ``--concurrency`` users per replica.

Pure: standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sharedserve.config import LoadPattern
from sharedserve.errors import ConfigError

__all__ = ["Offered", "ReplicaRef", "offered_load"]


@dataclass(frozen=True)
class ReplicaRef:
    """What the split needs to know about one replica."""

    name: str
    model: str
    weight: float


@dataclass(frozen=True)
class Offered:
    """One replica's load: closed-loop ``users``, or Poisson ``rate`` requests/s (one user)."""

    users: int
    rate: float | None


def _shares(replicas: Sequence[ReplicaRef]) -> dict[str, tuple[float, list[str]]]:
    """Each model's share of the traffic and its replicas' names, in order of first appearance."""
    models: dict[str, tuple[float, list[str]]] = {}
    for r in replicas:
        weight, names = models.setdefault(r.model, (r.weight, []))
        if r.weight != weight:
            raise ConfigError(
                f"model {r.model}'s replicas disagree on its weight ({weight:g} and {r.weight:g})"
            )
        names.append(r.name)
    zero = [m for m, (w, _) in models.items() if not w > 0]
    if zero:
        raise ConfigError(
            f"model {', '.join(zero)} has weight 0: the benchmark would offer it no load; "
            "give it a positive weight or leave it out"
        )
    total = sum(w for w, _ in models.values())
    return {m: (w / total, names) for m, (w, names) in models.items()}


def _apportion(total: int, shares: dict[str, float], least: dict[str, int]) -> dict[str, int]:
    """``total`` split in proportion to ``shares`` (largest remainder), each model at least
    ``least[m]``; the sum exceeds ``total`` only where those floors demand it."""
    exact = {m: total * s for m, s in shares.items()}
    out = {m: max(least[m], math.floor(x)) for m, x in exact.items()}
    spare = total - sum(out.values())
    # Whole users left over go to the models furthest below their exact share.
    for m in sorted(exact, key=lambda m: out[m] - exact[m])[: max(0, spare)]:
        out[m] += 1
    return out


def _even(total: int, names: list[str]) -> dict[str, int]:
    """``total`` over ``names`` as evenly as whole numbers allow, the first ones getting more."""
    base, extra = divmod(total, len(names))
    return {n: base + (1 if i < extra else 0) for i, n in enumerate(names)}


def offered_load(
    replicas: Sequence[ReplicaRef],
    pattern: LoadPattern,
    *,
    concurrency: int,
    rate: float,
    scale: int,
) -> dict[str, Offered]:
    """Each replica's load, by name, for the mix ``replicas`` measured at ``scale``."""
    if not replicas:
        raise ValueError("no replicas to offer load to")
    if pattern is LoadPattern.SEQUENTIAL:
        return {r.name: Offered(users=1, rate=None) for r in replicas}
    shares = _shares(replicas)
    if pattern is LoadPattern.POISSON:
        total = rate * scale
        return {
            name: Offered(users=1, rate=total * share / len(names))
            for share, names in shares.values()
            for name in names
        }
    users = _apportion(
        concurrency * scale,
        {m: share for m, (share, _) in shares.items()},
        {m: len(names) for m, (_, names) in shares.items()},  # every replica gets a user
    )
    out: dict[str, Offered] = {}
    for model, (_, names) in shares.items():
        for name, count in _even(users[model], names).items():
            out[name] = Offered(users=count, rate=None)
    return out

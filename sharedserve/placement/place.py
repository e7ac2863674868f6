"""Replicas onto GPUs: memory, time, measured density and spread, by policy. Pure.

The one placement routine, for ``size`` (GPUs of one size opened as needed over a fleet's
nodes: ``OpenEnded``) and ``pack`` (the GPUs of one host, of any sizes: ``Host``). Each replica
goes on a GPU where all of these hold:

- **memory**: the replicas' memory plus a context reserve each, within the GPU's;
- **time**: the replicas' busy shares within the utilisation target;
- **density**: no more replicas on a GPU than the least densely measured model on it was
  measured at (packing never extrapolates a profile);
- **spread**: a model's first ``spread`` replicas (its ``min_replicas``) go on different GPUs,
  so that losing a GPU never takes a whole model down; further replicas are spread where a GPU
  fits them anyway (a new GPU is opened for the first ``spread`` only).
- **nodes**: ``OpenEnded`` GPUs are dealt to nodes after packing, GPU ``i`` to node
  ``i mod nodes``. A model's replicas are placed one after another, onto GPUs filling at the
  same time, so they lie near each other in GPU order: dealt out, they land on different nodes,
  where numbering nodes in blocks put half a 500-model fleet's pairs on one node. The placement
  lists the models whose replicas still share a node although it has nodes enough.

Replicas are placed largest first (by the largest of their shares of a GPU's memory, of its time
and of its replica limit: best fit decreasing); each goes to the GPU the policy prefers among the
open ones that hold it (``Packer.choose``), a new GPU only when none does. ``bundle`` opens GPUs
one at a time, as it needs them: on a fleet a new one, on a host the healthy GPU it fits best
(the smallest that holds it), so both fill a GPU before the next. ``spread`` opens every healthy
GPU of a host at once, so replicas go to the least used. Replicas pinned to a GPU (``Replicas.gpu``)
go there first, whether they fit or not: the caps computed per GPU afterwards say why not, with
the figures. ``OpenEnded.max_gpus`` caps a fleet's count; a host's replicas that no GPU holds
are refused together, with what each needs and what each GPU has left.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from sharedserve.enums import PlacementPolicy
from sharedserve.errors import ConfigError
from sharedserve.gpu.info import GpuInfo
from sharedserve.placement.engine import Packer
from sharedserve.placement.policy import preference
from sharedserve.placement.types import Host, OpenEnded, Placement, Replicas

__all__ = ["place"]

_RETIRE_EVERY = 128  # replicas placed between two sweeps for GPUs nothing fits any more


def place(
    requests: Sequence[Replicas],
    gpus: OpenEnded | Host,
    *,
    reserve_mib: float,
    target: float = 1.0,
    policy: PlacementPolicy = PlacementPolicy.BUNDLE,
) -> Placement:
    """Every replica of ``requests`` on a GPU of ``gpus``; ConfigError, with the figures, when
    one replica fits no GPU at all, when a fleet needs more than ``max_gpus`` or when a host's
    GPUs cannot hold them all. ``target``: the share of a GPU's time its replicas may keep busy."""
    twice = sorted(m for m, n in Counter(r.model for r in requests).items() if n > 1)
    if twice:
        raise ConfigError(f"placement requests name a model twice: {', '.join(twice)}")
    packer = Packer(reserve_mib, target, policy)
    host = gpus.gpus if isinstance(gpus, Host) else None
    healthy = [] if host is None else sorted((g for g in host if g.healthy), key=lambda g: g.index)
    largest = float(gpus.memory_mib if isinstance(gpus, OpenEnded) else _largest(healthy, host))
    for r in requests:
        if r.gpu is None and not packer.fits_alone(r, largest):
            where = "a GPU has" if host is None else "the largest healthy GPU has"
            need = packer.need(r, largest) + reserve_mib
            raise ConfigError(
                f"model {r.model}: one replica needs {need:,.0f} MiB "
                f"(with its reserve) and {r.busy_share:.0%} of a GPU's time; {where} "
                f"{largest:,.0f} MiB and a {target:.0%} target"
            )

    # Largest first, in the three resources a replica takes: memory, time and a slot of the
    # GPU's replica limit (a model measured at most 4 to a GPU takes a quarter of one, as the
    # lower bound counts it). Sorting by density first instead left the busy replicas of dense
    # models last, with nothing to fill round them: ~1.25x the bound on large synthetic fleets,
    # where this gives ~1.1x (benchmarks/sizing_scale.py). Of equal size (many replicas are
    # sized by their slot alone), the most spread first: it needs the widest choice of GPUs.
    # A model's replicas one after another, to spread from their siblings.
    def size(r: Replicas) -> float:
        memory = (packer.need(r, largest) + reserve_mib) / largest
        return max(memory, r.busy_share / target, 1 / r.max_density)

    placed: Counter[str] = Counter()
    closed: list[GpuInfo] = list(healthy)  # a host's healthy GPUs not opened yet
    if host is not None:
        if policy is PlacementPolicy.SPREAD:  # in index order: on a tie, the lowest
            for gpu in closed:
                packer.open_gpu(gpu.index, gpu.memory_mib, gpu)
            closed = []
        _pin(packer, [r for r in requests if r.gpu is not None], host, closed, placed)
    loose = [r for r in requests if r.gpu is None]
    order = sorted(loose, key=lambda r: (-size(r), -r.spread, r.model))
    items = [r for r in order for _ in range(r.replicas)]
    # What the replicas from each one on need at the least, for ``retire``.
    least_memory = np.minimum.accumulate([r.memory_mib for r in reversed(items)])[::-1]
    least_busy = np.minimum.accumulate([r.busy_share for r in reversed(items)])[::-1]
    left: list[Replicas] = []
    for i, r in enumerate(items):
        if i and i % _RETIRE_EVERY == 0:
            packer.retire(float(least_memory[i]), float(least_busy[i]))
        at = packer.choose(r, apart=placed[r.model] < r.spread)
        if at is None and host is None:
            at = packer.open_gpu(len(packer.gpus), largest)
        elif at is None:
            at = _open_host_gpu(packer, r, closed)
            if at is None:
                at = packer.choose(r, apart=False)  # a host has no more GPUs to spread over
        if at is None:
            left.append(r)
            continue
        packer.place(r, at)
        placed[r.model] += 1
    if isinstance(gpus, OpenEnded):
        return _deal(packer, requests, gpus)
    if left:
        raise ConfigError(_refusal(packer, requests, left, host or (), reserve_mib))
    used = sorted((g for g in packer.gpus if g.replicas), key=lambda g: g.index)
    return Placement(used, [])


def _largest(healthy: Sequence[GpuInfo], host: Sequence[GpuInfo] | None) -> int:
    if not healthy:
        raise ConfigError(
            "every GPU on this host is unhealthy" if host else "this host has no GPU to place on"
        )
    return max(g.memory_mib for g in healthy)


def _pin(
    packer: Packer,
    pinned: Sequence[Replicas],
    host: Sequence[GpuInfo],
    closed: list[GpuInfo],
    placed: Counter[str],
) -> None:
    """The pinned replicas on their GPUs, opened for them where they are not yet."""
    for r in pinned:
        gpu = next((g for g in host if g.index == r.gpu), None)
        if gpu is None or not gpu.healthy:
            state = "names no GPU on this host" if gpu is None else "is unhealthy"
            raise ConfigError(f"model {r.model}: GPU {r.gpu} {state}")
        o = packer.open
        at = next((a for a in range(o.size) if packer.gpus[o.slot[a]].index == gpu.index), None)
        if at is None:
            closed.remove(gpu)
            at = packer.open_gpu(gpu.index, gpu.memory_mib, gpu)
        for _ in range(r.replicas):
            packer.place(r, at)
            placed[r.model] += 1


def _open_host_gpu(packer: Packer, r: Replicas, closed: list[GpuInfo]) -> int | None:
    """Open the healthy GPU not open yet that ``r`` fits best (the policy's preference over
    empty GPUs: ``bundle`` the smallest that holds it), or None where none holds it."""
    fits = [g for g in closed if packer.fits_alone(r, g.memory_mib)]
    if not fits:
        return None

    def rank(g: GpuInfo) -> tuple[float, float, int]:
        room = (g.memory_mib - packer.need(r, g.memory_mib) - packer.reserve) / g.memory_mib
        first, second = preference(packer.policy, room=room, used=0.0)  # all empty
        return first, second, g.index

    gpu = min(fits, key=rank)
    closed.remove(gpu)
    return packer.open_gpu(gpu.index, gpu.memory_mib, gpu)


def _deal(packer: Packer, requests: Sequence[Replicas], gpus: OpenEnded) -> Placement:
    """A fleet's GPUs dealt to nodes (see the module's docstring), and its spread checked."""
    if gpus.max_gpus is not None and len(packer.gpus) > gpus.max_gpus:
        raise ConfigError(
            f"the fleet needs {len(packer.gpus)} GPUs and gpu.max_gpus allows {gpus.max_gpus}"
        )
    nodes = -(-len(packer.gpus) // gpus.gpus_per_node)
    for gpu in packer.gpus:  # dealt out: at most gpus_per_node each
        gpu.node = gpu.index % nodes
    unspread = sorted(
        r.model
        for r in requests
        if len({g % nodes for g in packer.held.get(r.model, [])}) < min(r.spread, nodes)
    )
    return Placement(packer.gpus, unspread)


def _refusal(
    packer: Packer,
    requests: Sequence[Replicas],
    left: Sequence[Replicas],
    host: Sequence[GpuInfo],
    reserve_mib: float,
) -> str:
    """Why a host's GPUs do not hold the replicas ``left``: what they need, what each GPU has."""
    short = Counter(r.model for r in left)
    by_model = {r.model: r for r in left}
    total = sum(r.replicas for r in requests)
    parts = [
        f"{n} of {m} ({by_model[m].memory_mib:,.0f} MiB + {reserve_mib:,.0f} MiB reserve each)"
        for m, n in short.items()
    ]
    held = {g.index: g for g in packer.gpus}
    rooms = []
    for g in sorted(host, key=lambda g: g.index):
        if not g.healthy:
            rooms.append(f"GPU {g.index} unhealthy")
            continue
        used = held[g.index].memory_mib if g.index in held else 0.0
        count = len(held[g.index].replicas) if g.index in held else 0
        rooms.append(
            f"GPU {g.index} {g.memory_mib - used:,.0f} of {g.memory_mib:,} MiB free "
            f"({count} replicas)"
        )
    return (
        f"{len(left)} of {total} replicas fit no GPU on this host: {', '.join(parts)}; "
        f"{'; '.join(rooms)}. Pack fewer replicas, smaller caps or a smaller "
        "--context-reserve-mib, or pin entries to GPUs with `gpu`"
    )

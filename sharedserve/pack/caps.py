"""How replicas share GPUs: which GPU each goes on, what cap each gets, whether they fit. Pure.

Every replica is a separate process, and each process pays for its own CUDA context (and the
cuBLAS/cuDNN handles and workspaces the framework creates) *outside* the framework allocator that
the memory cap governs: ``torch.cuda.set_per_process_memory_fraction`` and TensorFlow's
logical-device ``memory_limit`` both limit the allocator only. That is a few hundred MiB
per process (676 to 686 MiB per torch process on an H200, as the GPU kit's ``context`` stage
measured it: ``benchmarks/results/gpu_h200_context.md``), so N replicas capped at exactly 1/N
of the card each would run out of memory together. The default split therefore keeps
``context_reserve_mib`` (``CONTEXT_RESERVE_MIB``, 704 MiB, unless told otherwise) per replica
outside the caps:

    cap per replica = floor((GPU memory - N x reserve) / N)

and a requested cap is refused when ``N x (cap + reserve)`` exceeds the GPU's memory.

A mix of models (``pack --spec``) generalises this per GPU: what is left after the explicit caps
and every replica's reserve is split among the entries without a cap in proportion to each
model's footprint (its weights on disk, or a profile's measured peak), so a model twice the size
gets twice the cap; with one model that is exactly the even split above.

Placement (which GPU each replica of an entry without ``gpu`` goes on, when the host has several)
is the one placement routine's (``sharedserve.placement``), over the host's healthy GPUs whatever
their sizes: each replica takes its cap, or its weights where the cap is the split, plus the
reserve. ``bundle`` fills a GPU before the next, ``spread`` puts each replica on the least used
GPU; the caps are then computed GPU by GPU as above.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from sharedserve.config import CapSource, GpuCapRequest
from sharedserve.contract import GpuShare, fraction_of, mib_of
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import ConfigError
from sharedserve.gpu.info import GpuInfo
from sharedserve.placement import Host, Replicas, place

__all__ = [
    "EntryOnGpu",
    "ReplicaShare",
    "caps_on_gpu",
    "choose_gpu",
    "place_entries",
]


@dataclass(frozen=True)
class ReplicaShare:
    """What pack gives one replica: its share of a GPU (the env contract's) and how it came."""

    share: GpuShare
    """The cap: a fraction and MiB of ``gpu``; neither when no cap applies."""
    gpu: GpuInfo | None
    """The GPU packed onto; None on a host without one (caps are then recorded, not enforced)."""
    default_split: bool
    """True when the cap is the split computed here rather than one the user asked for."""

    @property
    def mib(self) -> int | None:
        """The cap in MiB: ``share.mib``."""
        return self.share.mib

    @property
    def fraction(self) -> float | None:
        """The cap as a share of the GPU's memory: ``share.fraction``."""
        return self.share.fraction


def choose_gpu(gpus: list[GpuInfo], selector: str | None) -> GpuInfo | None:
    """The GPU named by ``selector`` (NVML index or UUID prefix), else the lowest index.

    None only when the host has no GPU and none was asked for.
    """
    if selector is None:
        gpu = min(gpus, key=lambda g: g.index) if gpus else None
    elif selector.isascii() and selector.isdigit():
        gpu = next((g for g in gpus if g.index == int(selector)), None)
    else:
        matches = [g for g in gpus if g.uuid.startswith(selector)]
        if len(matches) > 1:
            raise ConfigError(f"--gpu {selector!r} matches {len(matches)} GPUs; give more of it")
        gpu = matches[0] if matches else None
    if selector is not None and gpu is None:
        seen = ", ".join(f"{g.index} ({g.uuid})" for g in gpus) or "none"
        raise ConfigError(f"--gpu {selector!r} names no GPU on this host; GPUs: {seen}")
    if gpu is not None and not gpu.healthy:
        raise ConfigError(f"GPU {gpu.index} ({gpu.uuid}) is unhealthy; choose another with --gpu")
    return gpu


@dataclass(frozen=True)
class EntryOnGpu:
    """One entry's replicas on one GPU, as the caps are worked out."""

    name: str
    """The entry's name, for refusals."""
    replicas: int
    """How many of the entry's replicas are on this GPU."""
    cap: GpuCapRequest
    """The cap each asked for; CapSource.NONE: a share in proportion to the footprint."""
    footprint_mib: float = 0.0
    """The model's weights as stored on disk, in MiB: a lower bound of what a replica needs."""
    measured_peak_mib: float | None = None
    """A profile's measured peak GPU memory of one replica, in MiB; used instead of
    ``footprint_mib`` when given (no caller passes one yet)."""

    @property
    def need_mib(self) -> float:
        """The least GPU memory one replica needs, in MiB: the measured peak, else the weights."""
        return self.footprint_mib if self.measured_peak_mib is None else self.measured_peak_mib


def caps_on_gpu(
    gpu: GpuInfo | None, items: Sequence[EntryOnGpu], *, context_reserve_mib: int
) -> list[ReplicaShare]:
    """The cap of each item's replicas on ``gpu`` (in ``items``' order), or ConfigError.

    Free memory = GPU memory - the explicit caps - every replica's context reserve; the items
    without a cap share it in proportion to ``need_mib`` x replicas. Refused, with a table of
    what each replica would get, when the GPU is over or a cap is below a model's weights.
    """
    for item in items:
        if item.replicas < 1:
            raise ConfigError(f"--replicas must be at least 1, got {item.replicas}")
    if gpu is None:
        return _without_gpu(items)
    reserve = context_reserve_mib
    explicit = [_explicit_mib(item.cap, gpu) for item in items]
    count = sum(item.replicas for item in items)
    free = gpu.memory_mib - count * reserve
    free -= sum(item.replicas * m for item, m in zip(items, explicit, strict=True) if m is not None)
    # Exact arithmetic: equal footprints give exactly (free // N), today's even split.
    weights = [Fraction(max(item.need_mib, 1.0)) for item in items]
    shared = sum(
        item.replicas * w for item, w, m in zip(items, weights, explicit, strict=True) if m is None
    )
    caps = [
        (max(0, math.floor(free * w / shared)) if free > 0 else 0) if m is None else m
        for w, m in zip(weights, explicit, strict=True)
    ]
    _refuse_unless_fits(gpu, items, caps, explicit, reserve)
    shares = []
    for i, (item, mib) in enumerate(zip(items, caps, strict=True)):
        try:
            # A share that would read 0 is refused now, not through a replica that crashes
            # on start again and again.
            share = GpuShare(gpu.uuid, fraction_of(mib, gpu.memory_mib), mib)
        except ConfigError as e:
            raise ConfigError(f"{item.name} on GPU {gpu.index}: {e.message}") from e
        shares.append(ReplicaShare(share, gpu, default_split=explicit[i] is None))
    return shares


def _explicit_mib(request: GpuCapRequest, gpu: GpuInfo) -> int | None:
    if request.source is CapSource.NONE:
        return None
    if request.share.mib is not None:
        return request.share.mib
    assert request.share.fraction is not None
    return mib_of(request.share.fraction, gpu.memory_mib)


def _without_gpu(items: Sequence[EntryOnGpu]) -> list[ReplicaShare]:
    # No GPU to size against: only the fractions' sum can be checked.
    asked = [
        (item, item.cap.share.fraction) for item in items if item.cap.source is not CapSource.NONE
    ]
    total = sum(item.replicas * f for item, f in asked if f is not None)
    if total > 1 + 1e-9:
        parts = " + ".join(f"{item.replicas} x {f:g}" for item, f in asked if f is not None)
        raise ConfigError(f"{parts} of the GPU is {total:.3g} GPUs; the caps must sum to at most 1")
    return [
        ReplicaShare(GpuShare(None), None, default_split=True)
        if item.cap.source is CapSource.NONE
        else ReplicaShare(item.cap.share, None, default_split=False)
        for item in items
    ]


def _refuse_unless_fits(
    gpu: GpuInfo,
    items: Sequence[EntryOnGpu],
    caps: list[int],
    explicit: list[int | None],
    reserve: int,
) -> None:
    count = sum(item.replicas for item in items)
    # The least this GPU must hold: explicit caps, the weights of the rest, every reserve.
    least = sum(
        item.replicas * (reserve + (m if (m := explicit[i]) is not None else _ceil(item.need_mib)))
        for i, item in enumerate(items)
    )
    short = [
        (item, caps[i])
        for i, item in enumerate(items)
        if caps[i] < max(item.need_mib, 1.0 if explicit[i] is None else 0.0)
    ]
    if least <= gpu.memory_mib and not short:
        return
    lines = []
    if least > gpu.memory_mib:
        lines.append(
            f"{count} replicas do not fit: {least} MiB exceeds GPU {gpu.index}'s "
            f"{gpu.memory_mib} MiB ({gpu.name}) by {least - gpu.memory_mib} MiB"
        )
    for item, cap in short:
        if cap >= item.need_mib:
            continue  # no room left at all: said above
        lines.append(
            f"{item.name}: the model's weights alone take {item.need_mib:.0f} MiB, more than "
            f"the {cap} MiB cap each of its {item.replicas} replicas would get"
        )
    lines.append(_table(items, caps, reserve))
    if len(items) == 1 and explicit[0] is not None:
        fits = gpu.memory_mib // (caps[0] + reserve)
        lines.append(
            f"at most {fits} fit at this cap (omit the cap for an even split, or lower "
            "--context-reserve-mib if you measured less)"
        )
    else:
        lines.append(
            f"each replica also keeps {reserve} MiB for its CUDA context "
            "(--context-reserve-mib); pack fewer replicas, lower the caps or use another GPU"
        )
    raise ConfigError("\n".join(lines))


def _ceil(mib: float) -> int:
    return max(1, math.ceil(mib))


def _table(items: Sequence[EntryOnGpu], caps: list[int], reserve: int) -> str:
    header = ("entry", "replicas", "weights MiB", "cap each MiB", "reserve each MiB", "total MiB")
    rows: list[tuple[str, ...]] = [header]
    for item, cap in zip(items, caps, strict=True):
        total = item.replicas * (cap + reserve)
        cells = (item.name, item.replicas, f"{item.need_mib:.1f}", cap, reserve, total)
        rows.append(tuple(str(c) for c in cells))
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    return "\n".join(
        "  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def place_entries(
    gpus: Sequence[GpuInfo],
    entries: Sequence[tuple[str | None, EntryOnGpu]],
    *,
    policy: PlacementPolicy,
    context_reserve_mib: int,
) -> list[list[GpuInfo | None]]:
    """The GPU of each replica of each ``(gpu selector, item)`` entry, in order.

    An entry with a selector goes where it says. The rest: on a host with one GPU, that one
    (or none without a GPU; ``caps_on_gpu`` then says whether they fit); with several, where the
    placement routine puts them over the healthy GPUs, each replica taking its explicit cap or
    its weights, and its reserve. ConfigError, with the figures, when they do not fit.
    """
    pinned = [
        None if selector is None else choose_gpu(list(gpus), selector) for selector, _ in entries
    ]
    if len(gpus) <= 1:
        only = choose_gpu(list(gpus), None) if any(p is None for p in pinned) else None
        return [[p or only] * item.replicas for p, (_, item) in zip(pinned, entries, strict=True)]
    requests = []
    for gpu, (_, item) in zip(pinned, entries, strict=True):
        mib, fraction = _least_mib(item)
        index = None if gpu is None else gpu.index
        requests.append(
            Replicas(item.name, item.replicas, mib, memory_fraction=fraction, gpu=index)
        )
    placement = place(requests, Host(gpus), reserve_mib=context_reserve_mib, policy=policy)
    by_index = {g.index: g for g in gpus}
    return [[by_index[i] for i in placement.gpus_of(item.name)] for _, item in entries]


def _least_mib(item: EntryOnGpu) -> tuple[float, float]:
    """What one replica of ``item`` takes on any GPU, before its reserve: MiB, and a share of
    the GPU's memory (a cap given as a fraction)."""
    if item.cap.source is CapSource.NONE:
        return _ceil(item.need_mib), 0.0
    if item.cap.share.mib is not None:
        return item.cap.share.mib, 0.0
    assert item.cap.share.fraction is not None
    return 0.0, item.cap.share.fraction

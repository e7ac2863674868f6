"""THE env contract between whoever grants a GPU share and the model server. Pure.

Every writer (the device plugin's ``Allocate``, the DRA driver's CDI specs, the packer) builds a
``Grant`` and calls ``to_env()`` over an environment cleared of ``VARIABLES``; the one reader,
``sharedserve serve``, calls ``from_env()``.
Why one module: writers that each formatted numbers their own way once produced a contract the
server refused. Numbers are written one way here (``repr`` for fractions, the shortest text that
reads back as the same float, so 1/3 is never rounded up past the share granted; integers for
MiB) and read back by the same module.

A grant names one GPU or several. With several, each per-GPU variable holds one value per GPU,
comma-separated, in the order of ``NVIDIA_VISIBLE_DEVICES`` (NVML index order):
``SHAREDSERVE_GPU_MEMORY_FRACTION=0.25,0.5`` is a quarter of the first GPU and half of the
second. ``sharedserve serve`` uses one GPU: given several it serves on the first (CUDA's device
0 inside the container) with that GPU's cap, and says that the others go unused
(``limits.gpu.parse_cap_request``).

A share's two figures, and the one conversion between them (``fraction_of`` / ``mib_of``; no
other module divides MiB by a GPU's size or multiplies a share by it):

- MiB to fraction: rounded *down* to ``FRACTION_DIGITS`` (6) decimal places in integer
  arithmetic, and one step further down where the float that text reads as, times the GPU's
  MiB, would come out above the cap (0.28 x 25 is 7.000000000000001). So a framework capped by
  the fraction (torch) never gets more than the MiB cap: ``fraction * total <= mib``, as floats
  compute it. 1e-6 of an 80 GiB GPU is 0.08 MiB; a cap finer than one step is refused
  (ConfigError) rather than written as a share of 0, which every server refuses.
- Fraction to MiB: the share is the decimal it is written as (``0.29`` is 29/100, not the
  binary float just under it), times the GPU's MiB, rounded *down* in exact arithmetic: never
  above the share, and 0.29 of 100 MiB is 29 MiB, not 28. Under 1 MiB is refused.
- The pair is not an identity: ``mib_of(fraction_of(m, t), t)`` may be ``m - 1`` (a sixth
  decimal cannot name every MiB of a large GPU). That is why a writer that knows the MiB writes
  both figures and the MiB wins when both are set.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from sharedserve.errors import ConfigError

__all__ = [
    "CUDA_DEVICE_ORDER",
    "CUDA_VISIBLE_DEVICES",
    "DRA_COMPUTE",
    "DRA_COMPUTE_UNITS",
    "DRA_DRIVER",
    "DRA_MEMORY",
    "FRACTION_DIGITS",
    "GPU_MEMORY_FRACTION",
    "GPU_MEMORY_MIB",
    "MPS_ACTIVE_THREAD_PERCENTAGE",
    "MPS_PINNED_DEVICE_MEM_LIMIT",
    "MPS_PIPE_DIRECTORY",
    "NVIDIA_VISIBLE_DEVICES",
    "VARIABLES",
    "VGPU_IDS",
    "VGPU_RESOURCE",
    "VGPU_SEPARATOR",
    "GpuShare",
    "Grant",
    "MpsLimits",
    "fraction_of",
    "mib_of",
    "parse_fraction",
    "parse_mib",
    "vgpu_id",
    "without_grant",
]

VGPU_RESOURCE = "sharedserve.io/vgpu"
"""The extended resource a pod requests: one vGPU is one share of one physical GPU."""

DRA_DRIVER = "gpu.sharedserve.io"
"""The DRA driver's name: its ResourceSlices, its DeviceClass and the CDI kind of its specs."""
DRA_MEMORY = "memory"
"""The consumable capacity a claim asks for (``capacity: {requests: {memory: 6Gi}}``)."""
DRA_COMPUTE = "compute"
"""The consumable capacity of a GPU's time beside its memory, in percent of the GPU
(``capacity: {requests: {compute: "40"}}``): the scheduler counts it as it counts memory. A
whole number, because a capacity's range is checked in whole units unless the cluster enables
fractional ranges."""
DRA_COMPUTE_UNITS = 100
"""The compute capacity of one GPU: percent."""

NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
"""The physical GPUs by UUID; the NVIDIA container runtime exposes only these."""
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
"""What CUDA itself reads on a bare host, where no container runtime applies the above."""
CUDA_DEVICE_ORDER = "CUDA_DEVICE_ORDER"
VGPU_IDS = "SHAREDSERVE_VGPU_IDS"
GPU_MEMORY_FRACTION = "SHAREDSERVE_GPU_MEMORY_FRACTION"
GPU_MEMORY_MIB = "SHAREDSERVE_GPU_MEMORY_MIB"
MPS_PIPE_DIRECTORY = "CUDA_MPS_PIPE_DIRECTORY"
MPS_ACTIVE_THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_PINNED_DEVICE_MEM_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"

VARIABLES = frozenset(
    {
        NVIDIA_VISIBLE_DEVICES,
        CUDA_VISIBLE_DEVICES,
        CUDA_DEVICE_ORDER,
        VGPU_IDS,
        GPU_MEMORY_FRACTION,
        GPU_MEMORY_MIB,
        MPS_PIPE_DIRECTORY,
        MPS_ACTIVE_THREAD_PERCENTAGE,
        MPS_PINNED_DEVICE_MEM_LIMIT,
    }
)
"""Every variable the contract reads or writes. A writer that hands a process a grant starts
from an environment without any of them (``without_grant``): a variable left in the user's shell
(``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` from an MPS experiment, say) would otherwise reach every
replica beside the grant and change what it may use."""

_PCI_BUS_ID = "PCI_BUS_ID"
T = TypeVar("T")
VGPU_SEPARATOR = "::"
"""Between a GPU's UUID and a vGPU's slot; a UUID holding it cannot name vGPUs."""


FRACTION_DIGITS = 6
"""Decimal places of a share written from a MiB cap: 1e-6 of an 80 GiB GPU is 0.08 MiB."""


def fraction_of(mib: int, total_mib: int) -> float:
    """``mib`` of a GPU of ``total_mib`` as a share: the one MiB-to-fraction conversion.

    Rounded down (the module's docstring says how) so that ``fraction * total_mib <= mib``.
    ConfigError for a cap that is not positive, is above the GPU, or is finer than a share can
    carry.
    """
    if mib <= 0 or total_mib <= 0:
        raise ConfigError(f"a GPU memory cap needs positive MiB, got {mib} of {total_mib} MiB")
    if mib > total_mib:
        raise ConfigError(f"a GPU memory cap of {mib} MiB exceeds the GPU's {total_mib} MiB")
    scale: int = 10**FRACTION_DIGITS
    steps = mib * scale // total_mib
    # Exact in integers, but the float nearest steps/scale may sit a hair above it; one step
    # down is far below the cap again (by total_mib / scale MiB).
    while steps and steps / scale * total_mib > mib:
        steps -= 1
    if steps == 0:
        least = -(-total_mib // scale)
        raise ConfigError(
            f"a cap of {mib} MiB is under 1e-{FRACTION_DIGITS} of a {total_mib} MiB GPU, finer "
            f"than a share the env contract carries; give at least {least} MiB"
        )
    return steps / scale


def mib_of(fraction: float, total_mib: int) -> int:
    """A share of a GPU of ``total_mib`` in whole MiB: the one fraction-to-MiB conversion.

    The share is taken as the decimal it is written as and rounded down in exact arithmetic
    (the module's docstring says why), so the result is never above the share. ConfigError for
    a share outside (0, 1] or one under 1 MiB of this GPU.
    """
    share = parse_fraction(fraction, "a GPU memory share")
    if total_mib <= 0:
        raise ConfigError(f"a GPU needs positive memory, got {total_mib} MiB")
    mib = math.floor(Fraction(repr(share)) * total_mib)
    if mib == 0:
        raise ConfigError(
            f"a share of {share!r} of a {total_mib} MiB GPU is under 1 MiB; give a larger share"
        )
    return mib


def without_grant(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` less every contract variable: the base a writer adds ``Grant.to_env()`` to."""
    return {k: v for k, v in env.items() if k not in VARIABLES}


def vgpu_id(uuid: str, slot: int) -> str:
    """The ID of vGPU ``slot`` of GPU ``uuid``: ``GPU-8f1c...::3``."""
    return f"{uuid}{VGPU_SEPARATOR}{slot}"


@dataclass(frozen=True)
class GpuShare:
    """How much of one GPU's memory a process may use: one GPU of a grant, a cap as asked for
    (``config.GpuCapRequest``, no GPU named yet) or the cap in force (``limits.gpu.GpuCap``).

    No figure at all is no cap. Built from one figure and the GPU's size, use ``of_mib`` or
    ``of_fraction``, which fill in the other through the one conversion.
    """

    uuid: str | None
    """The GPU's UUID; None where there is no real GPU to name (a packer without one, a cap
    asked for before the GPU is known)."""
    fraction: float | None = None
    """Share of the GPU's memory, in (0, 1]."""
    mib: int | None = None
    """The same cap in MiB; wins over the fraction when both are known."""
    vgpu_ids: tuple[str, ...] = ()

    @classmethod
    def of_mib(
        cls, uuid: str | None, mib: int, total_mib: int, vgpu_ids: Iterable[str] = ()
    ) -> GpuShare:
        """``mib`` MiB of a GPU of ``total_mib``, with the fraction that never stands for more."""
        return cls(uuid, fraction_of(mib, total_mib), mib, tuple(vgpu_ids))

    @classmethod
    def of_fraction(cls, uuid: str | None, fraction: float, total_mib: int) -> GpuShare:
        """``fraction`` of a GPU of ``total_mib``, with the whole MiB it amounts to (rounded
        down): the fraction stays as given, the framework applying it measures the card."""
        return cls(uuid, fraction, mib_of(fraction, total_mib))


@dataclass(frozen=True)
class MpsLimits:
    """CUDA MPS settings of a grant (MPS mode only)."""

    pipe_directory: str
    active_thread_percentage: int
    """Share of the SMs, 1-100; one figure per process whatever its GPUs."""


@dataclass(frozen=True)
class Grant:
    """What a process is given: GPUs in NVML index order, and MPS limits when MPS is on."""

    gpus: tuple[GpuShare, ...]
    mps: MpsLimits | None = None
    bare_host: bool = False
    """Also set ``CUDA_VISIBLE_DEVICES`` and PCI bus order: where no container runtime will
    apply ``NVIDIA_VISIBLE_DEVICES`` (the packer), or may not (the DRA driver's CDI specs reach
    runtimes configured either way; CUDA takes UUIDs there too)."""
    visible_devices: str | None = None
    """``CUDA_VISIBLE_DEVICES`` where it is not the grant's own UUIDs: set by hand on a bare host
    (an index, say; empty hides every GPU). None where unset or where ``bare_host`` implies it."""

    @property
    def cuda_visible_devices(self) -> str | None:
        """What CUDA will read as ``CUDA_VISIBLE_DEVICES``; None where it is unset."""
        if self.visible_devices is not None:
            return self.visible_devices
        if self.bare_host:
            return ",".join(g.uuid for g in self.gpus if g.uuid is not None)
        return None

    def to_env(self) -> dict[str, str]:
        """The variables, formatted the one way ``from_env`` reads them back. A per-GPU variable
        is written only when every GPU of the grant has a value for it."""
        env: dict[str, str] = {}
        uuids = _every(g.uuid for g in self.gpus)
        if uuids:
            env[NVIDIA_VISIBLE_DEVICES] = ",".join(uuids)
            if self.bare_host:
                env[CUDA_VISIBLE_DEVICES] = env[NVIDIA_VISIBLE_DEVICES]
        if self.visible_devices is not None:
            env[CUDA_VISIBLE_DEVICES] = self.visible_devices
        ids = [i for g in self.gpus for i in g.vgpu_ids]
        if ids:
            env[VGPU_IDS] = ",".join(ids)
        fractions = _every(g.fraction for g in self.gpus)
        if fractions:
            env[GPU_MEMORY_FRACTION] = ",".join(repr(float(f)) for f in fractions)
        mibs = _every(g.mib for g in self.gpus)
        if mibs:
            env[GPU_MEMORY_MIB] = ",".join(str(m) for m in mibs)
        if self.mps is not None:
            env[MPS_PIPE_DIRECTORY] = self.mps.pipe_directory
            env[MPS_ACTIVE_THREAD_PERCENTAGE] = str(self.mps.active_thread_percentage)
            if mibs:
                # Device numbers are the client's CUDA ordinals: inside the container only the
                # granted GPUs exist, numbered from 0 in PCI bus order (CUDA_DEVICE_ORDER below).
                limits = (f"{ordinal}={mib}M" for ordinal, mib in enumerate(mibs))
                env[MPS_PINNED_DEVICE_MEM_LIMIT] = ",".join(limits)
        if self.mps is not None or self.bare_host:
            env[CUDA_DEVICE_ORDER] = _PCI_BUS_ID
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Grant:
        """Read a grant; blank variables count as unset. ConfigError names the variable at
        fault. No variable at all is a grant of no GPU (``gpus == ()``)."""
        uuids = _list(env, NVIDIA_VISIBLE_DEVICES)
        if [u.lower() for u in uuids] in (["all"], ["none"], ["void"]):
            uuids = []  # the container runtime's keywords (an image's default), not a grant
        fractions = [
            parse_fraction(v, GPU_MEMORY_FRACTION) for v in _list(env, GPU_MEMORY_FRACTION)
        ]
        mibs = [parse_mib(v, GPU_MEMORY_MIB) for v in _list(env, GPU_MEMORY_MIB)]
        named = {
            name: len(values)
            for name, values in (
                (NVIDIA_VISIBLE_DEVICES, uuids),
                (GPU_MEMORY_FRACTION, fractions),
                (GPU_MEMORY_MIB, mibs),
            )
            if values
        }
        if len(set(named.values())) > 1:
            counts = ", ".join(f"{name} has {n}" for name, n in named.items())
            raise ConfigError(f"the env contract's per-GPU lists differ in length: {counts}")
        count = max(named.values(), default=0)
        ids = _list(env, VGPU_IDS)
        gpus = tuple(
            GpuShare(
                uuid=uuids[i] if uuids else None,
                fraction=fractions[i] if fractions else None,
                mib=mibs[i] if mibs else None,
                vgpu_ids=_ids_of(ids, uuids[i] if uuids else None, count),
            )
            for i in range(count)
        )
        mps = None
        pipe = env.get(MPS_PIPE_DIRECTORY, "").strip()
        if pipe:
            mps = MpsLimits(pipe, _percentage(env.get(MPS_ACTIVE_THREAD_PERCENTAGE, "")))
        raw = env.get(CUDA_VISIBLE_DEVICES)
        visible = None if raw is None else raw.strip()  # set but empty: every GPU hidden
        bare = bool(uuids) and visible == ",".join(uuids)
        return cls(gpus, mps, bare_host=bare, visible_devices=None if bare else visible)


def _every(values: Iterable[T | None]) -> list[T]:
    """The values when every one is known, else none of them."""
    found = list(values)
    return [] if None in found else [v for v in found if v is not None]


def _list(env: Mapping[str, str], name: str) -> list[str]:
    text = env.get(name, "").strip()
    if not text:
        return []
    values = [v.strip() for v in text.split(",")]
    if not all(values):
        raise ConfigError(f"{name} has an empty entry: {text!r}")
    return values


def _ids_of(ids: list[str], uuid: str | None, count: int) -> tuple[str, ...]:
    """The vGPU IDs of one GPU of the grant: all of them when it has one GPU."""
    if count == 1:
        return tuple(ids)
    return tuple(v for v in ids if uuid is not None and v.startswith(uuid + VGPU_SEPARATOR))


def parse_fraction(value: object, what: str) -> float:
    """A share of a GPU in (0, 1]; ConfigError names ``what`` (a flag or a variable)."""
    try:
        fraction = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a number in (0, 1], got {value!r}") from None
    if math.isnan(fraction) or not 0.0 < fraction <= 1.0:
        raise ConfigError(f"{what} must be in (0, 1], got {value!r}")
    return fraction


def parse_mib(value: object, what: str) -> int:
    """A positive whole number of MiB; ConfigError names ``what``."""
    try:
        mib = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{what} must be a whole number of MiB, got {value!r}") from None
    if mib <= 0:
        raise ConfigError(f"{what} must be positive, got {value!r}")
    return mib


def _percentage(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= 100:
        raise ConfigError(f"{MPS_ACTIVE_THREAD_PERCENTAGE} must be 1..100, got {text!r}")
    return value

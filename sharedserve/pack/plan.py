"""How N replicas share one GPU: which GPU, what cap each gets, and whether they fit. Pure.

Every replica is a separate process, and each process pays for its own CUDA context (and the
cuBLAS/cuDNN handles and workspaces the framework creates) *outside* the framework allocator that
the memory cap governs: ``torch.cuda.set_per_process_memory_fraction`` and TensorFlow's
logical-device ``memory_limit`` both limit the allocator only. That is a few hundred MiB
per process (not yet measured by this project; less with CUDA lazy module loading), so N
replicas capped at exactly 1/N of the card each would run out of memory together. The default
split therefore keeps ``context_reserve_mib`` (512 MiB unless told otherwise) per replica
outside the caps:

    cap per replica = floor((GPU memory - N x reserve) / N)

and a requested cap is refused when ``N x (cap + reserve)`` exceeds the GPU's memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sharedserve.config import CapSource, GpuCapRequest
from sharedserve.errors import ConfigError
from sharedserve.gpu.info import GpuInfo

__all__ = ["GpuShare", "choose_gpu", "plan_gpu_share"]


@dataclass(frozen=True)
class GpuShare:
    """What each replica is given on the chosen GPU."""

    gpu: GpuInfo | None
    """The GPU packed onto; None on a host without one (caps are then recorded, not enforced)."""
    fraction: float | None
    """Each replica's share of the GPU's memory, in (0, 1]; None when no cap applies."""
    mib: int | None
    """The same cap in MiB; None when the GPU's size is unknown and no MiB cap was asked for."""
    default_split: bool
    """True when the cap is the even split computed here rather than one the user asked for."""


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


def plan_gpu_share(
    replicas: int,
    request: GpuCapRequest,
    gpu: GpuInfo | None,
    *,
    context_reserve_mib: int,
    footprint_mib: float = 0.0,
) -> GpuShare:
    """Each replica's cap, or ConfigError when ``replicas`` of them cannot fit.

    ``footprint_mib`` is the model's weights as stored on disk, a lower bound of the GPU memory
    one replica needs: a cap below it can never hold the model.
    """
    if replicas < 1:
        raise ConfigError(f"--replicas must be at least 1, got {replicas}")
    if request.source is CapSource.NONE:
        share = _default_split(replicas, gpu, context_reserve_mib)
    else:
        share = _requested(replicas, request, gpu, context_reserve_mib)
    if share.mib is not None and footprint_mib > share.mib:
        raise ConfigError(
            f"the model's weights alone take {footprint_mib:.0f} MiB, more than the "
            f"{share.mib} MiB cap each of {replicas} replicas would get; pack fewer replicas"
        )
    return share


def _default_split(replicas: int, gpu: GpuInfo | None, reserve: int) -> GpuShare:
    if gpu is None:
        return GpuShare(None, None, None, default_split=True)
    mib = (gpu.memory_mib - replicas * reserve) // replicas
    if mib <= 0:
        raise ConfigError(
            f"{replicas} replicas do not fit on GPU {gpu.index} ({gpu.memory_mib} MiB): each "
            f"needs {reserve} MiB for its CUDA context before any model memory "
            "(--context-reserve-mib)"
        )
    return GpuShare(gpu, _fraction(mib, gpu.memory_mib), mib, default_split=True)


def _requested(
    replicas: int, request: GpuCapRequest, gpu: GpuInfo | None, reserve: int
) -> GpuShare:
    if gpu is None:
        # No GPU to size against: only the fractions' sum can be checked.
        if request.fraction is not None and replicas * request.fraction > 1 + 1e-9:
            raise ConfigError(
                f"{replicas} replicas x {request.fraction:g} of the GPU is "
                f"{replicas * request.fraction:.3g} GPUs; the caps must sum to at most 1"
            )
        return GpuShare(None, request.fraction, request.mib, default_split=False)
    if request.mib is not None:
        mib = request.mib
    else:
        assert request.fraction is not None
        mib = math.floor(request.fraction * gpu.memory_mib)
    needed = replicas * (mib + reserve)
    if needed > gpu.memory_mib:
        fits = gpu.memory_mib // (mib + reserve)
        raise ConfigError(
            f"{replicas} replicas x ({mib} MiB cap + {reserve} MiB CUDA context) = {needed} MiB "
            f"exceeds GPU {gpu.index}'s {gpu.memory_mib} MiB; at most {fits} fit at this cap "
            "(omit the cap for an even split, or lower --context-reserve-mib if you measured less)"
        )
    return GpuShare(gpu, _fraction(mib, gpu.memory_mib), mib, default_split=False)


def _fraction(mib: int, total_mib: int) -> float:
    # Rounded down so that fraction x total never exceeds the MiB cap it stands for.
    return math.floor(mib / total_mib * 10_000) / 10_000

"""One GPU cut into vGPUs as the allocator cuts it, for the manifests that ask for them. Pure.

``k8s render --spec`` and ``size``'s ``k8s.yaml`` both size pods in vGPUs, so both need the
allocator's cut of a GPU of the plan's size: made here once, by the allocator's own inventory
arithmetic (``sharedserve.vgpu_sizing``), with the same refusals whichever of them was given the
cut.
"""

from __future__ import annotations

from sharedserve.errors import ConfigError
from sharedserve.k8s.mix import VgpuSize
from sharedserve.vgpu_sizing import MAX_REPLICAS, Sizing, replicas_for, vgpu_memory_for

__all__ = ["FLAG_NAMES", "vgpu_cut"]

#: How the allocator's flags name the cut (and ``k8s render``'s, which mirror them).
FLAG_NAMES = ("--vgpus-per-gpu", "--vgpu-memory-mib")


def vgpu_cut(
    gpu_memory_mib: int, sizing: Sizing, *, names: tuple[str, str] = FLAG_NAMES
) -> VgpuSize:
    """A GPU of ``gpu_memory_mib`` cut under ``sizing``; ConfigError, naming the setting as the
    user gave it (``names``: vGPUs per GPU, memory per vGPU), when the allocator would advertise
    no vGPU on it or vGPUs of less than 1 MiB. The header names the allocator's flag."""
    per_gpu_name, memory_name = names
    if sizing.vgpu_memory_mib is not None:
        mib = sizing.vgpu_memory_mib
        if mib > gpu_memory_mib:
            raise ConfigError(
                f"{memory_name} {mib} is more than the GPU's {gpu_memory_mib} MiB: the allocator "
                "would advertise no vGPU on it"
            )
        flag = f"--vgpu-memory-mib {mib}"
    else:
        n = sizing.vgpus_per_gpu
        if not 1 <= n <= MAX_REPLICAS:
            raise ConfigError(f"{per_gpu_name} must be in 1..{MAX_REPLICAS}, got {n}")
        if n > gpu_memory_mib:
            raise ConfigError(
                f"{per_gpu_name} {n} cuts a {gpu_memory_mib} MiB GPU into vGPUs of less than 1 MiB"
            )
        flag = f"--vgpus-per-gpu {n}"
    per_gpu = replicas_for(gpu_memory_mib, sizing)
    return VgpuSize(gpu_memory_mib, vgpu_memory_for(gpu_memory_mib, sizing), per_gpu, flag)

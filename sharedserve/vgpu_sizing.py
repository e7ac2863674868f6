"""How GPUs are cut into vGPUs: the arithmetic the allocator advertises by and the manifests that
ask for vGPUs size pods by. Pure.

``--vgpus-per-gpu N`` cuts every GPU into N equal shares; ``--vgpu-memory-mib M`` gives each GPU
as many M MiB shares as its memory holds. The allocator (``allocator/inventory.py``) cuts a node's
GPUs this way; ``k8s render --spec`` and ``size``'s ``k8s.yaml`` (``k8s/vgpus.py``) cut a GPU of
the plan's size the same way, so a pod asks for vGPUs the allocator will advertise. It sits
below both because they are on one layer and neither may import the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from sharedserve.errors import ConfigError

__all__ = ["MAX_REPLICAS", "Sizing", "replicas_for", "vgpu_memory_for"]

#: More vGPUs per GPU than anyone can pack models into; it also bounds ListAndWatch messages
#: (8 GPUs x 1024 vGPUs is ~0.5 MB, an eighth of the kubelet's 4 MiB gRPC message limit).
MAX_REPLICAS = 1024


@dataclass(frozen=True)
class Sizing:
    """How GPUs are cut into vGPUs."""

    vgpus_per_gpu: int = 4
    """vGPUs per GPU (``--vgpus-per-gpu``), the same for every GPU; ignored when
    ``vgpu_memory_mib`` is set."""
    vgpu_memory_mib: int | None = None
    """Memory per vGPU in MiB; each GPU then advertises ``floor(its memory / this)`` vGPUs."""

    def validate(self) -> None:
        if self.vgpu_memory_mib is not None:
            if self.vgpu_memory_mib <= 0:
                raise ConfigError(f"--vgpu-memory-mib must be positive, got {self.vgpu_memory_mib}")
        elif not 1 <= self.vgpus_per_gpu <= MAX_REPLICAS:
            raise ConfigError(
                f"--vgpus-per-gpu must be in 1..{MAX_REPLICAS}, got {self.vgpus_per_gpu}"
            )


def replicas_for(memory_mib: int, sizing: Sizing) -> int:
    """vGPUs a GPU with ``memory_mib`` advertises (capped at MAX_REPLICAS)."""
    if sizing.vgpu_memory_mib is None:
        return sizing.vgpus_per_gpu
    return min(memory_mib // sizing.vgpu_memory_mib, MAX_REPLICAS)


def vgpu_memory_for(memory_mib: int, sizing: Sizing) -> int:
    """MiB per vGPU on a GPU with ``memory_mib``: the size given, else an equal cut."""
    return sizing.vgpu_memory_mib or memory_mib // max(replicas_for(memory_mib, sizing), 1)

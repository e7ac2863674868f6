"""``GpuInfo``: one physical GPU as discovered. Pure, so planning code can use it without NVML."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GpuInfo"]


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as discovered."""

    uuid: str
    """Stable identity, e.g. ``GPU-8f1c2d...``; what NVIDIA_VISIBLE_DEVICES names."""
    index: int
    """NVML index (the order ``nvidia-smi`` lists)."""
    name: str
    """Product name, e.g. ``Tesla K80``."""
    memory_mib: int
    """Total framebuffer memory in MiB."""
    numa_node: int | None = None
    """NUMA node of the GPU's PCI bus, or None where unknown."""
    healthy: bool = True

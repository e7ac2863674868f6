"""``GpuInfo``: one physical GPU as discovered, and the XID events the driver reports of it.
Pure, so planning code can use it without NVML, and each backend without the others."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["GpuInfo", "XidEvent", "XidWatch"]


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


@dataclass(frozen=True)
class XidEvent:
    """A critical XID error the driver reported."""

    gpu_uuid: str | None
    """The GPU it happened on; None when the driver could not say which."""
    xid: int
    """The XID code (NVIDIA's XID error catalogue)."""


class XidWatch(Protocol):
    """A subscription to the critical XID events of some GPUs."""

    def wait(self, timeout_s: float) -> XidEvent | None:
        """The next event, or None when ``timeout_s`` passes first. Raises GpuError."""
        ...

    def close(self) -> None: ...

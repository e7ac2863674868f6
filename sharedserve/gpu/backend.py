"""The GpuBackend protocol and how a process picks one.

Two implementations: ``NvmlBackend`` (the real driver, through nvidia-ml-py) and
``FakeGpuBackend`` (a JSON inventory, for tests and development on machines without a GPU).
Callers never learn which one they hold except through ``simulated``, which every report must
honour: simulated GPUs are never presented as measured.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from sharedserve.errors import NvmlUnavailable
from sharedserve.gpu.info import GpuInfo, XidEvent, XidWatch

__all__ = ["GpuBackend", "GpuInfo", "XidEvent", "XidWatch", "open_gpu_backend"]

log = logging.getLogger(__name__)


class GpuBackend(Protocol):
    """What sharedserve needs from a GPU driver."""

    @property
    def simulated(self) -> bool:
        """True when the GPUs come from a fake inventory, not a driver."""
        ...

    def list_gpus(self) -> list[GpuInfo]:
        """Every GPU this process can see. Raises GpuError subclasses on driver failure."""
        ...

    def process_memory_mib(self, gpu_uuid: str, pid: int) -> int | None:
        """GPU memory ``pid`` holds on that GPU in MiB; None where not known or simulated."""
        ...

    def probe(self, gpu_uuid: str) -> str | None:
        """Check one GPU cheaply: None when it answers and needs no reset, else why not.

        Raises GpuError when the driver itself cannot be asked (callers count that as a failure
        of the GPU too).
        """
        ...

    def open_xid_watch(self, gpu_uuids: Sequence[str]) -> XidWatch | None:
        """Subscribe to critical XID events of these GPUs; None where the backend has none
        (simulated GPUs). Raises GpuError."""
        ...

    def utilization_percent(self, gpu_uuid: str) -> int | None:
        """Share of the last sample period a kernel ran on the GPU, 0-100; None if unknown."""
        ...

    def memory_used_mib(self, gpu_uuid: str) -> int | None:
        """GPU memory in use by all processes, in MiB; None if unknown or simulated."""
        ...

    def driver_version(self) -> str | None:
        """The NVIDIA driver's version, e.g. ``580.159.04``; None when simulated."""
        ...

    def cuda_driver_version(self) -> str | None:
        """The newest CUDA version the driver supports, e.g. ``13.0``; None when simulated."""
        ...

    def close(self) -> None: ...


def open_gpu_backend(fake_gpus: Path | None = None) -> GpuBackend | None:
    """The fake inventory when one is given, else NVML, else None when no driver is present.

    A machine without an NVIDIA driver is normal (CPU-only nodes, CI): that is None, not an error.
    """
    if fake_gpus is not None:
        from sharedserve.gpu.fake import FakeGpuBackend

        return FakeGpuBackend(fake_gpus)
    from sharedserve.gpu.nvml import NvmlBackend

    try:
        return NvmlBackend()
    except NvmlUnavailable as e:
        log.info("no NVIDIA GPU driver: %s", e)
        return None

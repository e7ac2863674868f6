"""NvmlBackend: real GPUs through NVML (nvidia-ml-py, import name ``pynvml``).

Every NVML failure is wrapped in our own ``GpuError`` tree here, at the boundary, so no caller
ever has to know pynvml's exception type.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pynvml

from sharedserve.errors import GpuError, NvmlUnavailable
from sharedserve.gpu.backend import GpuInfo

__all__ = ["NvmlBackend"]

_MIB = 1024 * 1024

# nvmlInit/nvmlShutdown are reference counted by the library but not thread-safe to interleave.
_init_lock = threading.Lock()


def _text(value: Any) -> str:
    # Older nvidia-ml-py versions return bytes, newer ones str.
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlBackend:
    """The GPUs the NVIDIA driver reports to this process."""

    def __init__(self) -> None:
        with _init_lock:
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as e:
                raise NvmlUnavailable(f"NVML failed to initialise: {e}") from e
            except OSError as e:  # libnvidia-ml.so not found
                raise NvmlUnavailable(f"NVML library not found: {e}") from e
        self._open = True

    @property
    def simulated(self) -> bool:
        return False

    def list_gpus(self) -> list[GpuInfo]:
        try:
            count = pynvml.nvmlDeviceGetCount()
            return [self._info(i) for i in range(count)]
        except pynvml.NVMLError as e:
            raise GpuError(f"NVML query failed: {e}") from e

    @staticmethod
    def _info(index: int) -> GpuInfo:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        numa: int | None
        try:
            numa = int(pynvml.nvmlDeviceGetNumaNodeId(handle))
        except (pynvml.NVMLError, AttributeError):
            # Not every driver or GPU reports a NUMA node; unknown is a valid answer.
            numa = None
        return GpuInfo(
            uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
            index=index,
            name=_text(pynvml.nvmlDeviceGetName(handle)),
            memory_mib=int(memory.total) // _MIB,
            numa_node=numa,
        )

    def process_memory_mib(self, gpu_uuid: str, pid: int) -> int | None:
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
            processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except pynvml.NVMLError as e:
            raise GpuError(f"NVML process query on {gpu_uuid} failed: {e}") from e
        for process in processes:
            # usedGpuMemory is None where the driver does not account per process (some vGPU/MIG).
            if process.pid == pid and process.usedGpuMemory is not None:
                return int(process.usedGpuMemory) // _MIB
        return None

    def close(self) -> None:
        if self._open:
            self._open = False
            with _init_lock, contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()

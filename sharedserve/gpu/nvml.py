"""NvmlBackend: real GPUs through NVML (nvidia-ml-py, import name ``pynvml``).

Every NVML failure is wrapped in our own ``GpuError`` tree here, at the boundary, so no caller
ever has to know pynvml's exception type.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

import pynvml

from sharedserve.errors import GpuError, NvmlUnavailable
from sharedserve.gpu.info import GpuInfo, XidEvent

__all__ = ["NvmlBackend"]

log = logging.getLogger(__name__)

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

    def probe(self, gpu_uuid: str) -> str | None:
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
            # Cheap, and fails (GPU_IS_LOST, UNKNOWN) on a GPU that fell off the bus or hung.
            pynvml.nvmlDeviceGetMemoryInfo(handle)
        except pynvml.NVMLError as e:
            raise GpuError(f"NVML cannot query GPU {gpu_uuid}: {e}") from e
        return _reset_pending(handle)

    def open_xid_watch(self, gpu_uuids: Sequence[str]) -> _NvmlXidWatch:
        return _NvmlXidWatch(gpu_uuids)

    def utilization_percent(self, gpu_uuid: str) -> int | None:
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
            return int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except pynvml.NVMLError_NotSupported:
            return None
        except pynvml.NVMLError as e:
            raise GpuError(f"NVML utilization query on {gpu_uuid} failed: {e}") from e

    def memory_used_mib(self, gpu_uuid: str) -> int | None:
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used) // _MIB
        except pynvml.NVMLError_NotSupported:
            return None
        except pynvml.NVMLError as e:
            raise GpuError(f"NVML memory query on {gpu_uuid} failed: {e}") from e

    def driver_version(self) -> str | None:
        try:
            return _text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError as e:
            raise GpuError(f"NVML driver version query failed: {e}") from e

    def cuda_driver_version(self) -> str | None:
        try:
            version = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        except pynvml.NVMLError as e:
            raise GpuError(f"NVML CUDA version query failed: {e}") from e
        # NVML encodes 13.0 as 13000 (1000 x major + 10 x minor), as cudaDriverGetVersion does.
        return f"{version // 1000}.{version % 1000 // 10}"

    def close(self) -> None:
        if self._open:
            self._open = False
            with _init_lock, contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()


def _reset_pending(handle: Any) -> str | None:
    """Why the GPU needs a reset before it may be trusted again, or None.

    Memory pages (before Ampere) or rows (Ampere on) that failed are retired or remapped only at
    the next reset; until then the bad memory is still handed out. Either query answers
    NOT_SUPPORTED on the generation that uses the other mechanism, which is no finding.
    """
    with contextlib.suppress(pynvml.NVMLError):
        if pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == pynvml.NVML_FEATURE_ENABLED:
            return "memory pages are pending retirement; the GPU needs a reset"
    try:
        _, _, pending, failed = pynvml.nvmlDeviceGetRemappedRows(handle)
    except pynvml.NVMLError:
        return None
    if failed:
        return "a memory row remapping failed; the GPU needs service"
    if pending:
        return "memory rows are pending remapping; the GPU needs a reset"
    return None


class _NvmlXidWatch:
    """``nvmlEventSet`` with every GPU registered for critical XID events."""

    def __init__(self, gpu_uuids: Sequence[str]) -> None:
        try:
            self._set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as e:
            raise GpuError(f"NVML cannot create an event set: {e}") from e
        for uuid in gpu_uuids:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
                mask = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
                mask &= pynvml.nvmlEventTypeXidCriticalError
                if mask:
                    pynvml.nvmlDeviceRegisterEvents(handle, mask, self._set)
                    continue
                reason = "it reports no XID events"
            except pynvml.NVMLError as e:
                reason = str(e)
            # Not fatal: the periodic probe still watches this GPU.
            log.warning("not watching XID events of GPU %s: %s", uuid, reason)

    def wait(self, timeout_s: float) -> XidEvent | None:
        try:
            data = pynvml.nvmlEventSetWait(self._set, max(1, int(timeout_s * 1000)))
        except pynvml.NVMLError_Timeout:
            return None
        except pynvml.NVMLError as e:
            raise GpuError(f"NVML event wait failed: {e}") from e
        if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
            return None
        uuid: str | None
        try:
            uuid = _text(pynvml.nvmlDeviceGetUUID(data.device))
        except pynvml.NVMLError:
            uuid = None  # the caller then suspects every GPU, as NVIDIA's plugin does
        return XidEvent(uuid, int(data.eventData))

    def close(self) -> None:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlEventSetFree(self._set)

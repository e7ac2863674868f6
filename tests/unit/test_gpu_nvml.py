"""NvmlBackend's health, XID and metrics queries against a scripted NVML (no GPU here).

The NVML library is replaced function by function (``pynvml.nvml*``), so everything above it
is the real code: the point is that every pynvml error comes out as our own GpuError, and
that "not supported" answers are not mistaken for failures.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from sharedserve.errors import GpuError, NvmlUnavailable
from sharedserve.gpu.backend import XidEvent
from sharedserve.gpu.nvml import NvmlBackend

UUID = "GPU-8f1c2d3e-0000-4000-8000-000000000000"


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def raises(code: int) -> Any:
    def call(*args: Any) -> Any:
        raise nvml_error(code)

    return call


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A healthy one-GPU driver; tests override single calls."""
    calls = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetHandleByUUID": lambda uuid: ("handle", uuid),
        "nvmlDeviceGetUUID": lambda handle: handle[1].encode(),  # old versions answer bytes
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(total=16 << 30, used=3 << 30),
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=42, memory=7),
        "nvmlDeviceGetRetiredPagesPendingStatus": lambda h: pynvml.NVML_FEATURE_DISABLED,
        "nvmlDeviceGetRemappedRows": lambda h: (0, 0, 0, 0),
        "nvmlEventSetCreate": lambda: "event-set",
        "nvmlDeviceGetSupportedEventTypes": lambda h: pynvml.nvmlEventTypeAll,
        "nvmlDeviceRegisterEvents": lambda h, mask, s: None,
        "nvmlEventSetFree": lambda s: None,
        "nvmlSystemGetDriverVersion": lambda: b"580.159.04",
        "nvmlSystemGetCudaDriverVersion_v2": lambda: 13000,
    }
    for name, fake in calls.items():
        monkeypatch.setattr(pynvml, name, fake)
    return monkeypatch


def test_init_failure_is_nvml_unavailable(nvml: pytest.MonkeyPatch) -> None:
    nvml.setattr(pynvml, "nvmlInit", raises(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded"):
        NvmlBackend()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param({}, None, id="healthy"),
        pytest.param(
            {
                "nvmlDeviceGetRetiredPagesPendingStatus": raises(pynvml.NVML_ERROR_NOT_SUPPORTED),
                "nvmlDeviceGetRemappedRows": raises(pynvml.NVML_ERROR_NOT_SUPPORTED),
            },
            None,
            id="neither-memory-query-supported",
        ),
        pytest.param(
            {"nvmlDeviceGetRetiredPagesPendingStatus": lambda h: pynvml.NVML_FEATURE_ENABLED},
            "pending retirement",
            id="retired-pages-pending",
        ),
        pytest.param(
            {"nvmlDeviceGetRemappedRows": lambda h: (0, 1, 1, 0)},
            "pending remapping",
            id="rows-pending",
        ),
        pytest.param(
            {"nvmlDeviceGetRemappedRows": lambda h: (0, 1, 0, 1)},
            "remapping failed",
            id="row-remap-failed",
        ),
    ],
)
def test_probe(nvml: pytest.MonkeyPatch, overrides: dict[str, Any], expected: str | None) -> None:
    for name, fake in overrides.items():
        nvml.setattr(pynvml, name, fake)
    reason = NvmlBackend().probe(UUID)
    assert reason is None if expected is None else expected in (reason or "")


@pytest.mark.parametrize(
    "call", ["nvmlDeviceGetHandleByUUID", "nvmlDeviceGetMemoryInfo"], ids=["handle", "query"]
)
def test_probe_wraps_lost_gpu(nvml: pytest.MonkeyPatch, call: str) -> None:
    nvml.setattr(pynvml, call, raises(pynvml.NVML_ERROR_GPU_IS_LOST))
    with pytest.raises(GpuError, match="GPU is lost") as info:
        NvmlBackend().probe(UUID)
    assert isinstance(info.value.__cause__, pynvml.NVMLError)


def test_metrics_readings(nvml: pytest.MonkeyPatch) -> None:
    backend = NvmlBackend()
    assert backend.utilization_percent(UUID) == 42
    assert backend.memory_used_mib(UUID) == 3 * 1024
    nvml.setattr(pynvml, "nvmlDeviceGetUtilizationRates", raises(pynvml.NVML_ERROR_NOT_SUPPORTED))
    assert backend.utilization_percent(UUID) is None
    nvml.setattr(pynvml, "nvmlDeviceGetMemoryInfo", raises(pynvml.NVML_ERROR_UNKNOWN))
    with pytest.raises(GpuError, match="memory query"):
        backend.memory_used_mib(UUID)


def event(event_type: int, data: int) -> SimpleNamespace:
    return SimpleNamespace(device=("handle", UUID), eventType=event_type, eventData=data)


def test_driver_and_cuda_versions(nvml: pytest.MonkeyPatch) -> None:
    backend = NvmlBackend()
    assert backend.driver_version() == "580.159.04"
    assert backend.cuda_driver_version() == "13.0"
    nvml.setattr(pynvml, "nvmlSystemGetCudaDriverVersion_v2", lambda: 12080)
    assert backend.cuda_driver_version() == "12.8"
    nvml.setattr(pynvml, "nvmlSystemGetDriverVersion", raises(pynvml.NVML_ERROR_UNKNOWN))
    with pytest.raises(GpuError, match="driver version"):
        backend.driver_version()


def test_xid_watch(nvml: pytest.MonkeyPatch) -> None:
    registered: list[int] = []
    nvml.setattr(pynvml, "nvmlDeviceRegisterEvents", lambda h, mask, s: registered.append(mask))
    waits: list[Any] = [
        raises(pynvml.NVML_ERROR_TIMEOUT),
        lambda s, ms: event(pynvml.nvmlEventTypeXidCriticalError, 79),
        lambda s, ms: event(pynvml.nvmlEventTypePState, 0),
        raises(pynvml.NVML_ERROR_UNKNOWN),
    ]
    answers = iter(waits)

    def wait(event_set: Any, timeout_ms: int) -> Any:
        return next(answers)(event_set, timeout_ms)

    nvml.setattr(pynvml, "nvmlEventSetWait", wait)
    watch = NvmlBackend().open_xid_watch([UUID])
    assert registered == [pynvml.nvmlEventTypeXidCriticalError]  # only what we asked for
    assert watch.wait(0.5) is None  # timeout
    assert watch.wait(0.5) == XidEvent(UUID, 79)
    assert watch.wait(0.5) is None  # not an XID
    with pytest.raises(GpuError, match="event wait failed"):
        watch.wait(0.5)
    watch.close()


def test_xid_watch_skips_gpus_without_events(nvml: pytest.MonkeyPatch) -> None:
    registered: list[Any] = []
    nvml.setattr(pynvml, "nvmlDeviceGetSupportedEventTypes", lambda h: 0)
    nvml.setattr(pynvml, "nvmlDeviceRegisterEvents", lambda h, m, s: registered.append(h))
    NvmlBackend().open_xid_watch([UUID]).close()
    assert registered == []


def test_xid_event_from_unknown_device(nvml: pytest.MonkeyPatch) -> None:
    nvml.setattr(
        pynvml, "nvmlEventSetWait", lambda s, ms: event(pynvml.nvmlEventTypeXidCriticalError, 48)
    )
    nvml.setattr(pynvml, "nvmlDeviceGetUUID", raises(pynvml.NVML_ERROR_GPU_IS_LOST))
    assert NvmlBackend().open_xid_watch([UUID]).wait(0.1) == XidEvent(None, 48)


def test_event_set_creation_failure(nvml: pytest.MonkeyPatch) -> None:
    nvml.setattr(pynvml, "nvmlEventSetCreate", raises(pynvml.NVML_ERROR_UNINITIALIZED))
    with pytest.raises(GpuError, match="event set"):
        NvmlBackend().open_xid_watch([UUID])

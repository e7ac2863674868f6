"""The ONNX backend's choice of provider: onnxruntime's CUDA provider, with ``gpu_mem_limit``,
only where it is installed and a GPU cap is in force; its CPU provider otherwise, as before.

No GPU here: where the CUDA provider is needed, onnxruntime's list of providers is the one thing
stood in for (the GPU's part, as the tests' rule allows). A session then asked for the CUDA
provider falls back to the CPU, which the backend must refuse in one line rather than serve
while ``/sharedserve/v1/limits`` says the cap holds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sharedserve.errors import ModelLoadError
from sharedserve.gpu.backend import GpuInfo
from sharedserve.limits.gpu import CapSource, GpuCapRequest, resolve_cap
from sharedserve.server.version.backends import onnx as onnx_backend
from sharedserve.server.version.backends.base import RuntimeConfig
from sharedserve.server.version.backends.onnx import OnnxBackend

pytestmark = [pytest.mark.torch, pytest.mark.onnx]

GPU = GpuInfo(
    uuid="GPU-00000000-0000-0000-0000-0000000000a1", index=0, name="H100", memory_mib=81559
)
CAP = resolve_cap(GpuCapRequest.of(CapSource.FLAG, mib=2048), GPU)


@pytest.fixture
def restored(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The backend's process-wide settings as they were, after the test."""
    monkeypatch.setitem(onnx_backend._gpu, "limit", onnx_backend._gpu["limit"])
    monkeypatch.setitem(onnx_backend._threads, "intra", onnx_backend._threads["intra"])
    monkeypatch.setitem(onnx_backend._threads, "inter", onnx_backend._threads["inter"])
    return monkeypatch


def test_without_the_cuda_provider_a_cap_is_recorded_and_sessions_run_on_the_cpu(
    onnx_models_dir: Path, restored: pytest.MonkeyPatch
) -> None:
    version = onnx_models_dir / "tiny" / "1"
    applied = OnnxBackend(version).configure(RuntimeConfig(CAP, 1, 1))
    assert applied.gpu_cap.enforced is False and applied.gpu_cap.share == CAP.share
    backend = OnnxBackend(version)
    backend.load()
    assert backend._session.get_providers() == ["CPUExecutionProvider"]
    signature = backend.signatures()["serving_default"]
    rows = np.zeros((2, 8), dtype=np.float32)
    assert backend.predict(signature, {"x": rows})["probabilities"].shape == (2, 4)


@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider'")
def test_with_the_cuda_provider_a_cap_is_enforced_and_a_provider_that_does_not_load_fails(
    onnx_models_dir: Path, restored: pytest.MonkeyPatch
) -> None:
    real = onnx_backend.ort.get_available_providers()
    restored.setattr(
        onnx_backend.ort, "get_available_providers", lambda: ["CUDAExecutionProvider", *real]
    )
    preloaded: list[bool] = []
    restored.setattr(onnx_backend.ort, "preload_dlls", lambda: preloaded.append(True))
    version = onnx_models_dir / "tiny" / "1"
    applied = OnnxBackend(version).configure(RuntimeConfig(CAP, 1, 1))
    assert applied.gpu_cap.enforced is True and applied.gpu_cap.share.mib == 2048
    assert onnx_backend._gpu["limit"] == 2048 << 20 and preloaded == [True]
    # The provider is listed but nothing here can run it: onnxruntime falls back to its CPU,
    # and the backend refuses the model rather than claim the cap holds.
    backend = OnnxBackend(version)
    backend.cap_memory(64 << 20)
    with pytest.raises(ModelLoadError, match=r"CUDA provider did not load .*not served"):
        backend.load()
    # No cap: the CPU provider, whatever onnxruntime lists.
    none = resolve_cap(GpuCapRequest.of(CapSource.NONE), GPU)
    assert OnnxBackend(version).configure(RuntimeConfig(none, 1, 1)).gpu_cap.enforced is False
    assert onnx_backend._gpu["limit"] is None
    backend = OnnxBackend(version)
    backend.load()
    assert backend._session.get_providers() == ["CPUExecutionProvider"]

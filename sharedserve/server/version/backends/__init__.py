"""One module per framework; ``make_backend`` picks by what the model directory holds.

Frameworks are imported only when a backend is made, so importing this package is free.
"""

from __future__ import annotations

from collections.abc import Callable

from sharedserve.enums import Framework
from sharedserve.errors import SharedServeError
from sharedserve.framework_output import framework_needed, framework_startup
from sharedserve.server.version.backends.base import (
    AppliedRuntime,
    Backend,
    DeviceMemory,
    RuntimeConfig,
    warm_up,
)
from sharedserve.server.version.source import ModelSource

__all__ = [
    "AppliedRuntime",
    "Backend",
    "BackendFactory",
    "DeviceMemory",
    "Frameworks",
    "RuntimeConfig",
    "make_backend",
    "warm_up",
]

BackendFactory = Callable[[ModelSource], Backend]


def make_backend(source: ModelSource) -> Backend:
    """The backend for this model version (not yet configured or loaded)."""
    if source.framework is Framework.TENSORFLOW:
        from sharedserve.server.version.backends.tensorflow import TensorFlowBackend

        return TensorFlowBackend(source.path)
    if source.framework is Framework.TORCH:
        with framework_needed("torch"), framework_startup():  # imports torch
            from sharedserve.server.version.backends.torch import TorchBackend

        return TorchBackend(source.path)
    if source.framework is Framework.ONNX:
        with framework_needed("onnx"), framework_startup():  # imports onnxruntime
            from sharedserve.server.version.backends.onnx import OnnxBackend

        return OnnxBackend(source.path)
    if source.framework is Framework.EXPORT:
        with framework_needed("export"), framework_startup():  # imports torch
            from sharedserve.server.version.backends import torch_export

        if torch_export.is_aoti_package(source.path / torch_export.EXPORT_FILE):
            return torch_export.AotiBackend(source.path)
        return torch_export.ExportBackend(source.path)
    raise SharedServeError(f"no backend for {source.framework}")


class Frameworks:
    """The process's frameworks, each configured once (thread pools, GPU cap), before its first
    model loads: they can be set only before its runtime starts. Every backend is made here,
    at start-up and while serving alike."""

    def __init__(self, runtime: RuntimeConfig, make: BackendFactory = make_backend) -> None:
        self.runtime, self._make = runtime, make
        self.applied: dict[Framework, AppliedRuntime] = {}

    def backend(self, source: ModelSource) -> Backend:
        """The backend for ``source`` (not loaded), its framework configured first."""
        backend = self._make(source)
        if source.framework not in self.applied:
            self.applied[source.framework] = backend.configure(self.runtime)
        return backend

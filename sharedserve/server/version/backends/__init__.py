"""One module per framework; ``make_backend`` picks by what the model directory holds.

Frameworks are imported only when a backend is made, so importing this package is free.
"""

from __future__ import annotations

from sharedserve.enums import Framework
from sharedserve.errors import SharedServeError
from sharedserve.framework_output import framework_needed, framework_startup
from sharedserve.server.version.backends.base import Backend
from sharedserve.server.version.source import ModelSource

__all__ = ["make_backend"]


def make_backend(source: ModelSource) -> Backend:
    """The backend for this model version (not yet configured or loaded)."""
    if source.framework is Framework.TENSORFLOW:
        from sharedserve.server.version.backends.tensorflow import TensorFlowBackend

        return TensorFlowBackend(source.path)
    if source.framework is Framework.TORCH:
        with framework_needed("torch"), framework_startup():  # imports torch
            from sharedserve.server.version.backends.torch import TorchBackend

        return TorchBackend(source.path)
    raise SharedServeError(f"no backend for {source.framework}")

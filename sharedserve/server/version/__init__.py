"""One model version: its source on disk, its model's settings, its backend (a framework's),
what it holds in memory, and its one state (``model_version.py``)."""

from sharedserve.server.version.backends import (
    AppliedRuntime,
    Backend,
    BackendFactory,
    DeviceMemory,
    Frameworks,
    RuntimeConfig,
    make_backend,
    warm_up,
)
from sharedserve.server.version.footprint import MIB, Footprint, mib, shown
from sharedserve.server.version.model_version import (
    DEFAULT_SIGNATURE,
    LOCK,
    MEMORY_STATES,
    MOVES,
    SERVING,
    ModelVersion,
    VersionState,
    collect,
    freeze_process,
    parse_version,
    unfrozen,
)
from sharedserve.server.version.settings import ModelSettings
from sharedserve.server.version.signature import DTYPE_TO_NUMPY, Signature, TensorSpec
from sharedserve.server.version.source import ModelSource, find_model, find_version_sources

__all__ = [
    "DEFAULT_SIGNATURE",
    "DTYPE_TO_NUMPY",
    "LOCK",
    "MEMORY_STATES",
    "MIB",
    "MOVES",
    "SERVING",
    "AppliedRuntime",
    "Backend",
    "BackendFactory",
    "DeviceMemory",
    "Footprint",
    "Frameworks",
    "ModelSettings",
    "ModelSource",
    "ModelVersion",
    "RuntimeConfig",
    "Signature",
    "TensorSpec",
    "VersionState",
    "collect",
    "find_model",
    "find_version_sources",
    "freeze_process",
    "make_backend",
    "mib",
    "parse_version",
    "shown",
    "unfrozen",
    "warm_up",
]

"""What a benchmark ran on: CPU, GPU and driver (or null), package versions, the command."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
from pathlib import Path
from typing import Any

from sharedserve.errors import GpuError
from sharedserve.gpu.backend import GpuBackend

__all__ = ["describe_environment"]

_PACKAGES = ("sharedserve", "locust", "numpy", "grpcio", "tensorflow", "torch", "nvidia-ml-py")


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe_environment(backend: GpuBackend | None, command: tuple[str, ...]) -> dict[str, Any]:
    """The report's ``environment``; GPU fields are null without a real GPU."""
    gpus: list[dict[str, Any]] = []
    driver = cuda = None
    simulated = backend is not None and backend.simulated
    if backend is not None and not simulated:
        try:
            gpus = [
                {"index": g.index, "name": g.name, "uuid": g.uuid, "memory_mib": g.memory_mib}
                for g in backend.list_gpus()
            ]
            driver, cuda = backend.driver_version(), backend.cuda_driver_version()
        except GpuError:
            gpus = []
    return {
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus or None,
        "gpu_driver": driver,
        "cuda_driver": cuda,
        "gpus_simulated": simulated,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {p: _version(p) for p in _PACKAGES},
        "command": shlex.join(command) if command else None,
    }

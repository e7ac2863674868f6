"""Settings, one frozen dataclass per component, each field documented with its unit.

The CLI builds these from flags and the environment (the only layer that reads environment
variables); everything below takes a settings object instead of a long parameter list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sharedserve.limits.gpu import CapSource, GpuCapRequest

__all__ = ["DEFAULT_MAX_BODY_BYTES", "GpuSettings", "RestSettings", "ServerSettings"]

#: 64 MiB: a batch of 12 Inception v3 images in TF Serving's row JSON format (~5 MB each) fits.
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RestSettings:
    host: str = "0.0.0.0"
    """Address to bind; 0.0.0.0 as TF Serving does, so a container's port is reachable."""
    port: int = 8501
    """TCP port for the REST API (TF Serving's default 8501); 0 picks a free one."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest request body accepted, in bytes; larger ones get 413."""


@dataclass(frozen=True)
class GpuSettings:
    cap: GpuCapRequest = field(default_factory=lambda: GpuCapRequest(None, None, CapSource.NONE))
    """The memory cap asked for (flags or env contract)."""
    visible_devices: str | None = None
    """``CUDA_VISIBLE_DEVICES`` as the process sees it; picks which GPU the cap is sized against."""
    fake_gpus: Path | None = None
    """JSON GPU inventory used instead of NVML (tests and development; reported as simulated)."""


@dataclass(frozen=True)
class ServerSettings:
    model_dir: Path
    """A model base path (``DIR/NAME`` with version subdirectories) or a bare SavedModel dir."""
    model_name: str | None = None
    """Name in URLs; defaults to the base path's directory name."""
    rest: RestSettings = field(default_factory=RestSettings)
    gpu: GpuSettings = field(default_factory=GpuSettings)
    cpu_limit_cores: float | None = None
    """CPU limit in cores (0.5 = half a core); None reads it from the process's cgroup."""

"""Settings, one frozen dataclass per component, each field documented with its unit.

The CLI builds these from flags and the environment (the only layer that reads environment
variables); everything below takes a settings object instead of a long parameter list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from sharedserve.errors import ConfigError

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "BatchingSettings",
    "CapSource",
    "GpuCapRequest",
    "GpuSettings",
    "GrpcSettings",
    "RestSettings",
    "ServerSettings",
]

#: 64 MiB: a batch of 12 Inception v3 images in TF Serving's row JSON format (~5 MB each) fits.
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024


class CapSource(str, Enum):
    """Where a GPU memory cap came from."""

    FLAG = "flag"
    ENV = "env"
    NONE = "none"


@dataclass(frozen=True)
class GpuCapRequest:
    """A GPU memory cap as asked for, before the GPU's size is known."""

    fraction: float | None
    """Share of the GPU's memory, in (0, 1]."""
    mib: int | None
    """Absolute cap in MiB; wins over ``fraction`` when both are set."""
    source: CapSource


@dataclass(frozen=True)
class BatchingSettings:
    """Dynamic batching knobs, named as in TF Serving's ``BatchingParameters``.

    Defaults are TF Serving's own (``SharedBatchScheduler::QueueOptions``), except
    ``num_batch_threads``: TF Serving uses one thread per CPU the machine has, which in a pod with
    a CPU limit of a few cores overruns the CFS quota; the CLI sizes it instead.
    """

    max_batch_size: int = 1000
    """Most rows (dim 0, summed over the merged requests) one batch may hold. TF Serving: 1000."""
    batch_timeout_micros: int = 0
    """Microseconds the first request of a batch waits for company. 0 (TF Serving's default):
    run as soon as a batch thread is free, with whatever has queued up by then."""
    max_enqueued_batches: int = 10
    """Batches that may wait for a thread (the one still filling included); a request that needs
    one more is refused at once with RESOURCE_EXHAUSTED. TF Serving: 10."""
    num_batch_threads: int = 1
    """Batches that run at the same time (threads calling the framework)."""

    def validate(self) -> None:
        """Raise ConfigError naming every field that cannot work."""
        problems = []
        for name, value in vars(self).items():
            low = 0 if name == "batch_timeout_micros" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                problems.append(f"{name} must be an integer >= {low}, got {value!r}")
        if problems:
            raise ConfigError("invalid batching settings: " + "; ".join(problems))


@dataclass(frozen=True)
class RestSettings:
    host: str = "0.0.0.0"
    """Address to bind; 0.0.0.0 as TF Serving does, so a container's port is reachable."""
    port: int = 8501
    """TCP port for the REST API (TF Serving's default 8501); 0 picks a free one."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest request body accepted, in bytes; larger ones get 413."""


@dataclass(frozen=True)
class GrpcSettings:
    port: int = 8500
    """TCP port for the gRPC API (TF Serving's default 8500); 0 picks a free one."""
    max_message_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest gRPC message accepted or sent, in bytes; larger gets RESOURCE_EXHAUSTED."""


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
    grpc: GrpcSettings = field(default_factory=GrpcSettings)
    batching: BatchingSettings | None = None
    """None: batching off (TF Serving's default); each request is one model call."""
    gpu: GpuSettings = field(default_factory=GpuSettings)
    cpu_limit_cores: float | None = None
    """CPU limit in cores (0.5 = half a core); None reads it from the process's cgroup."""

"""Settings, one frozen dataclass per component, each field documented with its unit.

The CLI builds these from flags and the environment (the only layer that reads environment
variables); everything below takes a settings object instead of a long parameter list.
"""

from __future__ import annotations

import math
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
    "PackSettings",
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
class PackSettings:
    """``sharedserve pack``: N capped model servers on one host, supervised."""

    model_dir: Path
    """Model base path handed to every replica's ``sharedserve serve --model``."""
    replicas: int
    """Number of server processes to run."""
    model_name: str | None = None
    """Model name in URLs; replicas are named ``NAME-0``, ``NAME-1``... [default: dir name]."""
    gpu: str | None = None
    """GPU to pack onto, by NVML index or UUID (prefix); None: the lowest index."""
    cap: GpuCapRequest = field(default_factory=lambda: GpuCapRequest(None, None, CapSource.NONE))
    """GPU memory cap per replica; CapSource.NONE means an even split with context headroom."""
    context_reserve_mib: int = 512
    """GPU memory in MiB kept outside each replica's cap for its CUDA context and libraries
    (cuBLAS/cuDNN workspaces), which no framework allocator accounts for."""
    cpu_limit_cores: float | None = None
    """CPU quota per replica in cores, enforced by a cgroup where one can be written."""
    host: str = "127.0.0.1"
    """Address the replicas listen on and the targets file names."""
    base_port: int | None = None
    """First port: replica i gets REST ``base+2i`` and gRPC ``base+2i+1``; None picks free ones."""
    targets_out: Path | None = None
    """Where the targets file is written; None: ``targets.json`` in the log directory."""
    log_dir: Path | None = None
    """Directory for each replica's log (``NAME-i.log``); None: a new temporary directory."""
    server_args: tuple[str, ...] = ()
    """Extra ``sharedserve serve`` options passed to every replica (batching, body limit)."""
    fake_gpus: Path | None = None
    """Simulated GPU inventory (JSON) instead of NVML; reported as simulated."""
    environment: dict[str, str] = field(default_factory=dict)
    """Base environment of every replica, before the env contract is added (the CLI passes its
    own, minus any variables of the contract)."""
    start_timeout_s: float = 300.0
    """Seconds a replica may take from spawn to AVAILABLE before it counts as failed."""
    stop_grace_s: float = 10.0
    """Seconds between SIGTERM and SIGKILL when stopping replicas."""
    max_restarts: int = 5
    """Restarts in a row (without a stable minute between) after which a replica is given up."""

    def validate(self) -> None:
        """Raise ConfigError naming the first setting that cannot work."""
        if self.replicas < 1:
            raise ConfigError(f"--replicas must be at least 1, got {self.replicas}")
        if self.context_reserve_mib < 0:
            raise ConfigError(f"--context-reserve-mib must be >= 0, got {self.context_reserve_mib}")
        if self.base_port is not None and not 1 <= self.base_port <= 65535 - 2 * self.replicas:
            raise ConfigError(
                f"--base-port must leave room for {2 * self.replicas} ports below 65536, "
                f"got {self.base_port}"
            )
        cores = self.cpu_limit_cores
        if cores is not None and not (math.isfinite(cores) and cores > 0):
            raise ConfigError(f"--cpu-limit must be a positive number of cores, got {cores!r}")
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts must be >= 0, got {self.max_restarts}")
        for what, value in (
            ("--start-timeout", self.start_timeout_s),
            ("--stop-grace", self.stop_grace_s),
        ):
            if not value > 0:
                raise ConfigError(f"{what} must be positive, got {value}")


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

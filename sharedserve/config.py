"""Settings, one frozen dataclass per component, each field documented with its unit.

The CLI builds these from flags and the environment (the only layer that reads environment
variables); everything below takes a settings object instead of a long parameter list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from sharedserve.contract import GpuShare
from sharedserve.enums import PlacementPolicy, Protocol
from sharedserve.errors import ConfigError

__all__ = [
    "CONTEXT_RESERVE_MIB",
    "DEFAULT_MAX_BODY_BYTES",
    "NO_CAP",
    "REPLICA_SERVE_OPTIONS",
    "BatchingSettings",
    "BenchSettings",
    "CapSource",
    "GpuCapRequest",
    "GpuSettings",
    "LoadPattern",
    "PackEntry",
    "PackSettings",
    "SharedServerModel",
]

#: 64 MiB: a batch of 12 Inception v3 images in TF Serving's row JSON format (~5 MB each) fits.
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024


#: GPU memory a serve process holds outside its framework's cap (CUDA context, kernels,
#: cuBLAS/cuDNN workspaces): 676 to 686 MiB per torch process measured on an H200 with
#: PyTorch 2.11 on CUDA 13 (benchmarks/results/gpu_h200_context.md), rounded up to 64 MiB.
CONTEXT_RESERVE_MIB = 704


#: The bench's wire formats: TF Serving's REST and gRPC APIs, and the Open Inference Protocol's.
PROTOCOLS = tuple(p.value for p in Protocol)


class CapSource(str, Enum):
    """Where a GPU memory cap came from."""

    FLAG = "flag"
    ENV = "env"
    NONE = "none"


@dataclass(frozen=True)
class GpuCapRequest:
    """A GPU memory cap as asked for, before the GPU's size is known, and where it came from.

    The cap is the env contract's ``GpuShare`` naming no GPU yet, with the one figure asked for
    (a flag, a pack spec entry or the contract's variables): a fraction or MiB, the MiB winning
    where the contract carries both. ``limits.gpu.resolve_cap`` sizes it against the GPU.
    """

    share: GpuShare
    """What was asked; neither figure with ``CapSource.NONE``."""
    source: CapSource

    @classmethod
    def of(
        cls, source: CapSource, *, fraction: float | None = None, mib: int | None = None
    ) -> GpuCapRequest:
        """A request naming no GPU: ``GpuCapRequest.of(CapSource.FLAG, mib=6000)``."""
        return cls(GpuShare(None, fraction, mib), source)


NO_CAP = GpuCapRequest(GpuShare(None), CapSource.NONE)
"""No cap asked for."""


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
class GpuSettings:
    cap: GpuCapRequest = NO_CAP
    """The memory cap asked for (flags or env contract)."""
    visible_devices: str | None = None
    """``CUDA_VISIBLE_DEVICES`` as the process sees it; picks which GPU the cap is sized against."""
    fake_gpus: Path | None = None
    """JSON GPU inventory used instead of NVML (tests and development; reported as simulated)."""


class LoadPattern(str, Enum):
    """How the bench offers load to each model."""

    SEQUENTIAL = "sequential"
    """One request in flight per model, the next sent as soon as the last returns."""
    PARALLEL = "parallel"
    """``concurrency`` requests in flight per model (closed loop)."""
    POISSON = "poisson"
    """Open loop: ``rate`` requests/s per model, Poisson-timed and exact in count a block of
    a few seconds at a time, blocks lined up with the measurement windows
    (``bench.loadgen.schedule``)."""


@dataclass(frozen=True)
class BenchSettings:
    """``sharedserve bench``: a sweep of scales (``pack`` per scale) or given targets."""

    out_dir: Path
    """Where the report files go."""
    scales: tuple[int, ...] = (1, 2, 4, 8)
    """Multiples of every pack entry's replicas to measure, in order (ignored with
    ``targets_file``). A density sweep of one model is one entry of one replica: scale = density."""
    pack: PackSettings | None = None
    """The mix at scale 1 (each scale multiplies its entries' replicas); None with
    ``targets_file``."""
    spec_file: Path | None = None
    """The pack spec ``pack`` came from, recorded in the report; None for ``--model``."""
    targets_file: Path | None = None
    """Measure these running endpoints (pack's targets format) as one row instead of a sweep."""
    pattern: LoadPattern = LoadPattern.SEQUENTIAL
    concurrency: int = 10
    """Parallel: users of the whole mix at scale 1, split by model weight, at least one per
    replica; scale s runs s times as many (``bench.offered``)."""
    rate: float = 10.0
    """Poisson: requests per second of the whole mix at scale 1, split by model weight, then
    evenly over each model's replicas; scale s offers s times as much (``bench.offered``)."""
    max_in_flight: int = 100
    """Poisson only: requests in flight per replica beyond which new ones are dropped (counted)."""
    protocol: Protocol = Protocol.REST
    """One of ``PROTOCOLS``: TF Serving's REST (JSON) or gRPC API, or the Open Inference
    Protocol's REST (binary tensor extension) or gRPC (raw contents) API."""
    duration_s: float = 30.0
    """Seconds of the measured window per density: the row's figures cover this long, split into
    ``stability_windows`` windows of equal length."""
    stability_windows: int = 3
    """Windows of ``duration_s / stability_windows`` seconds each that must agree (within 10% on
    QPS and P99) for a row to be stable; more windows of the same length are measured until the
    last this many agree or ``max_duration_s`` is reached. 1 turns the check off."""
    max_duration_s: float | None = None
    """Most seconds measured per density while waiting for the windows to agree; a row still not
    stable then is flagged unstable. None: three times ``duration_s``."""
    warmup_s: float = 5.0
    """Seconds of load before the window opens (not recorded)."""
    repeat: int = 1
    """Measurements of each scale (or of the targets) in a row on the same started servers, a
    row each, each with its own warm-up: whether a measurement repeats (``size --verify
    --repeat``)."""
    slo_p99_ms: float | None = None
    """P99 latency objective in milliseconds of every model whose spec entry (or target) gives
    none; None: only those models' own objectives are judged."""
    loadgen_workers: int | None = None
    """Local Locust worker processes; 0 runs users in the master; None sizes to the load."""
    external_workers: int = 0
    """Remote Locust workers to wait for (Kubernetes); the master listens on ``master_bind``."""
    master_bind_port: int = 5557
    """Port the Locust master listens on for workers."""
    seed: int = 0
    """Seed of the request data and the Poisson arrivals."""
    server_cpus: tuple[int, ...] | None = None
    """The CPUs the servers bench starts may run on; None: not pinned (``limits.affinity``)."""
    loadgen_cpus: tuple[int, ...] | None = None
    """The CPUs the load generator's processes may run on; None: not pinned."""
    cpu_pinning: str = "not pinned"
    """How the two were decided, in words, for the report."""
    command: tuple[str, ...] = ()
    """The command line, recorded in the report."""

    @property
    def max_measured_s(self) -> float:
        """``max_duration_s`` with its default applied, in seconds."""
        return 3 * self.duration_s if self.max_duration_s is None else self.max_duration_s

    def validate(self) -> None:
        """Raise ConfigError naming the first setting that cannot work."""
        if (self.pack is None) == (self.targets_file is None):
            raise ConfigError(
                "give --model (a density sweep), --spec (a mix) or --targets (running endpoints)"
            )
        if not self.scales or any(d < 1 for d in self.scales):
            raise ConfigError(f"--scales must be positive integers, got {list(self.scales)}")
        if len(set(self.scales)) != len(self.scales):
            raise ConfigError(f"--scales repeats a value: {list(self.scales)}")
        if self.protocol not in PROTOCOLS:
            raise ConfigError(
                f"--protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}"
            )
        checks = [
            ("--duration", self.duration_s > 0 and math.isfinite(self.duration_s)),
            ("--stability-windows", self.stability_windows >= 1),
            (
                "--max-duration (at least --duration)",
                math.isfinite(self.max_measured_s) and self.max_measured_s >= self.duration_s,
            ),
            ("--warmup", self.warmup_s >= 0),
            ("--repeat", self.repeat >= 1),
            ("--concurrency", self.concurrency >= 1),
            ("--rate", self.rate > 0 and math.isfinite(self.rate)),
            ("--max-in-flight", self.max_in_flight >= 1),
            ("--slo-p99-ms", self.slo_p99_ms is None or self.slo_p99_ms > 0),
            ("--loadgen-workers", self.loadgen_workers is None or self.loadgen_workers >= 0),
            ("--expect-workers", self.external_workers >= 0),
        ]
        bad = [flag for flag, ok in checks if not ok]
        if bad:
            raise ConfigError(f"invalid value for {', '.join(bad)}")


REPLICA_SERVE_OPTIONS = frozenset(
    {
        *("--model", "--name", "--host", "--rest-port", "--grpc-port"),
        *("--gpu-memory-fraction", "--gpu-memory-mib", "--cpu-limit", "--fake-gpus"),
    }
)
"""Options of ``sharedserve serve`` that whoever runs a replica (``pack``, a rendered pod) sets
itself, so extra ``serve`` arguments must not carry them: the model and its name, where it
listens, and its limits, which come from the env contract and the CPU cgroup (a flag would
override the share it was granted); fake GPUs are for tests."""


@dataclass(frozen=True)
class SharedServerModel:
    """One model of a shared server: what its ``sharedserve.yaml`` in the shared server's model
    repository says (``server.model_repository.ModelFile``), and what bench holds it to."""

    model_dir: Path
    """The model's base path; the shared server's repository links to its files."""
    name: str | None = None
    """Its name in URLs and the repository; None: the directory's name."""
    slo_p99_ms: float | None = None
    """Its P99 objective in ms, for ``bench``; None: none given."""
    weight: float = 1.0
    """Its share of the mix's traffic (``bench``), and of the server's model-call threads."""
    gpu_memory_mib: int | None = None
    """Its memory budget inside the shared server's cap, in MiB; None: its measured peak."""
    pinned: bool = False
    """Never paged out (the shared server's ``paging: lru``)."""
    max_inflight: int | None = None
    """Its requests queued or running at most in each process of the shared server."""
    origin: str | None = field(default=None, compare=False)
    """Where a spec file gives it (``pack.yaml: servers[0] (shared): models[1]``), for errors;
    not part of what it is."""


@dataclass(frozen=True)
class PackEntry:
    """One model of a pack: its replicas and what each of them gets (an entry of a pack spec).
    With ``models``, a shared server: each replica is one process serving all of them."""

    model_dir: Path
    """Model base path handed to each replica's ``sharedserve serve --model``."""
    replicas: int = 1
    """Number of server processes of this model."""
    name: str | None = None
    """Model name in URLs; replicas are ``NAME-0``, ``NAME-1``... [default: dir name]."""
    gpu: str | None = None
    """GPU for every replica, by NVML index or UUID (prefix); None: placed by the pack's policy."""
    cap: GpuCapRequest = NO_CAP
    """GPU memory cap per replica; CapSource.NONE: a share of what the explicit caps leave,
    in proportion to the model's footprint."""
    cpu_limit_cores: float | None = None
    """CPU quota per replica in cores, enforced by a cgroup where one can be written."""
    server_args: tuple[str, ...] = ()
    """Extra ``sharedserve serve`` options for this entry's replicas (batching, body limit)."""
    slo_p99_ms: float | None = None
    """Latency objective of the model, P99 in milliseconds; for ``bench``. None: none given."""
    weight: float = 1.0
    """The model's relative share of traffic (split across its replicas); for ``bench``."""
    models: tuple[SharedServerModel, ...] = ()
    """A shared server's models (``servers:`` in a pack spec), served by each replica from one
    model repository; then ``name`` is the shared server's, ``cap`` and ``cpu_limit_cores`` each
    process's, and ``model_dir`` its first model's. Empty: the entry is one model."""
    paging: bool = False
    """A shared server's processes page models out by LRU under the cap (``serve --paging lru``)."""
    origin: str | None = field(default=None, compare=False)
    """Where a spec file gives the entry (``pack.yaml: models[1] (tiny-b)``), for errors that
    must name it; None for one given by flags. Not part of what the entry is."""

    @property
    def is_shared_server(self) -> bool:
        """Whether this is a shared server (a process per replica holding several models)."""
        return bool(self.models)


@dataclass(frozen=True)
class PackSettings:
    """``sharedserve pack``: capped model servers on one host, supervised. ``pack --model``
    is a spec of one entry; ``bench``'s density sweep varies that entry's replicas."""

    entries: tuple[PackEntry, ...]
    """The models to run (a pack spec), at least one."""
    placement_policy: PlacementPolicy = PlacementPolicy.BUNDLE
    """How replicas of entries without a ``gpu`` are placed on a host with several GPUs: the
    allocator's ``bundle`` (fill a GPU before the next) or ``spread`` (least used first)."""
    context_reserve_mib: int = CONTEXT_RESERVE_MIB
    """GPU memory in MiB kept outside each replica's cap for its CUDA context and libraries
    (cuBLAS/cuDNN workspaces), which no framework allocator accounts for."""
    host: str = "127.0.0.1"
    """Address the replicas listen on and the targets file names."""
    base_port: int | None = None
    """First port: replica i gets REST ``base+2i`` and gRPC ``base+2i+1``; None picks free ones."""
    targets_out: Path | None = None
    """Where the targets file is written; None: ``targets.json`` in the log directory."""
    log_dir: Path | None = None
    """Directory for each replica's log (``NAME-i.log``); None: a new temporary directory, which
    a clean stop removes unless ``keep_logs``."""
    keep_logs: bool = False
    """Keep the temporary log directory after a clean stop (one given as ``log_dir`` is always
    kept, and so is the temporary one after a failure)."""
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
    cpus: tuple[int, ...] | None = None
    """The CPUs every replica may run on (its affinity, ``limits.affinity``); None: not pinned.
    Bench sets it so that its load generator has CPUs of its own."""

    @property
    def total_replicas(self) -> int:
        return sum(e.replicas for e in self.entries)

    def validate(self) -> None:
        """Raise ConfigError naming the first setting that cannot work."""
        if not self.entries:
            raise ConfigError("nothing to pack: give a model (--model) or a spec (--spec)")
        for entry in self.entries:
            if entry.replicas < 1:
                raise ConfigError(f"--replicas must be at least 1, got {entry.replicas}")
            cores = entry.cpu_limit_cores
            if cores is not None and not (math.isfinite(cores) and cores > 0):
                raise ConfigError(f"--cpu-limit must be a positive number of cores, got {cores!r}")
        if self.placement_policy not in ("bundle", "spread"):
            raise ConfigError(f"--policy must be bundle or spread, got {self.placement_policy!r}")
        if self.context_reserve_mib < 0:
            raise ConfigError(f"--context-reserve-mib must be >= 0, got {self.context_reserve_mib}")
        ports = 2 * self.total_replicas
        if self.base_port is not None and not 1 <= self.base_port <= 65535 - ports:
            raise ConfigError(
                f"--base-port must leave room for {ports} ports below 65536, got {self.base_port}"
            )
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts must be >= 0, got {self.max_restarts}")
        for what, value in (
            ("--start-timeout", self.start_timeout_s),
            ("--stop-grace", self.stop_grace_s),
        ):
            if not value > 0:
                raise ConfigError(f"{what} must be positive, got {value}")

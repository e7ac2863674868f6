"""``sharedserve bench``'s flags as ``BenchSettings``: which source (--model, --spec or
--targets), which scales, what each scale packs; every refusal of flags that clash, or of a spec,
model or targets file that cannot be read, before the sweep says or writes anything."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from sharedserve.cli._app import cpu_settings
from sharedserve.cli._replicas import check_server_args, replica_environment, spec_entries
from sharedserve.config import BenchSettings, LoadPattern, PackEntry, PackSettings
from sharedserve.enums import PlacementPolicy, Protocol
from sharedserve.errors import ConfigError

__all__ = ["MIX_SCALES", "bench_settings"]

# A mix's sweep: every entry's replicas at 1, 2 and 4 times the spec's. A density sweep of one
# model takes BenchSettings.scales (1, 2, 4, 8 replicas).
MIX_SCALES = (1, 2, 4)
_PER_REPLICA_FLAGS = ("--gpu", "--gpu-memory-fraction", "--gpu-memory-mib", "--cpu-limit")


def _scales(
    densities: str | None, scales: str | None, *, spec: bool, targets: bool
) -> tuple[int, ...]:
    """The sweep's scales: ``--scales``, or ``--densities`` for one model (the same numbers)."""
    from sharedserve.bench.run import parse_scales

    if targets:
        given = [f for f, v in (("--densities", densities), ("--scales", scales)) if v is not None]
        if given:
            raise ConfigError(
                f"{' and '.join(given)} with --targets: the running endpoints are measured once, "
                "as they are"
            )
        return (1,)
    if densities is not None and scales is not None:
        raise ConfigError("give --densities or --scales, not both")
    if densities is not None:
        if spec:
            raise ConfigError(
                "--densities counts replicas of one model; with --spec give --scales "
                "(multiples of every entry's replicas)"
            )
        return parse_scales("--densities", densities)
    if scales is not None:
        return parse_scales("--scales", scales)
    return MIX_SCALES if spec else BenchSettings.scales


def _pack(
    extra: list[str],
    model: Path | None,
    spec: Path | None,
    policy: PlacementPolicy,
    gpu: str | None,
    gpu_memory_fraction: float | None,
    gpu_memory_mib: int | None,
    cpu_limit: float | None,
    fake_gpus: Path | None,
) -> PackSettings | None:
    """What each scale packs: the spec's entries, or one replica of --model; None for
    --targets, which takes no `serve` options."""
    from sharedserve.bench.run import model_pack
    from sharedserve.limits.gpu import parse_cap_request

    if spec is not None:
        per_replica = (gpu, gpu_memory_fraction, gpu_memory_mib, cpu_limit)
        return PackSettings(
            entries=spec_entries(
                spec,
                dict(zip(_PER_REPLICA_FLAGS, per_replica, strict=True)),
                check_server_args(extra),
            ),
            placement_policy=policy,
            fake_gpus=fake_gpus,
            environment=replica_environment(),
        )
    if model is not None:
        entry = PackEntry(
            model_dir=model,
            gpu=gpu,
            cap=parse_cap_request(gpu_memory_fraction, gpu_memory_mib),
            cpu_limit_cores=cpu_limit,
            server_args=check_server_args(extra),
        )
        return model_pack(entry, policy, fake_gpus, replica_environment())
    if extra:
        raise ConfigError(f"unexpected arguments with --targets: {' '.join(extra)}")
    return None


def bench_settings(
    *,
    extra: list[str],
    out: Path,
    model: Path | None,
    spec: Path | None,
    targets: Path | None,
    densities: str | None,
    scales: str | None,
    policy: PlacementPolicy,
    gpu: str | None,
    gpu_memory_fraction: float | None,
    gpu_memory_mib: int | None,
    cpu_limit: float | None,
    fake_gpus: Path | None,
    pattern: LoadPattern,
    concurrency: int,
    rate: float,
    max_in_flight: int,
    duration: float,
    stability_windows: int,
    max_duration: float | None,
    warmup: float,
    slo_p99_ms: float | None,
    protocol: Protocol,
    loadgen_workers: int | None,
    expect_workers: int,
    master_bind_port: int,
    seed: int,
    server_cpus: str,
    loadgen_cpus: str,
) -> BenchSettings:
    """The flags as settings, checked as the sweep will need them (``check_sweep``);
    ConfigError for flags that clash, a spec, model or targets file that cannot be read."""
    from sharedserve.bench.run import check_sweep

    sources = [f for f, v in (("--model", model), ("--spec", spec), ("--targets", targets)) if v]
    if len(sources) != 1:
        what = "give one of"
        if sources:
            together = "not both" if len(sources) == 2 else "only one"
            what = f"{', '.join(sources)}: {together}; give one of"
        raise ConfigError(
            f"{what} --model (a density sweep), --spec (a mix) or --targets (running endpoints)"
        )
    sweep = _scales(densities, scales, spec=spec is not None, targets=targets is not None)
    pack = _pack(
        extra, model, spec, policy, gpu, gpu_memory_fraction, gpu_memory_mib, cpu_limit, fake_gpus
    )
    settings = BenchSettings(
        out_dir=out,
        scales=sweep,
        pack=pack,
        spec_file=spec,
        targets_file=targets,
        pattern=pattern,
        concurrency=concurrency,
        rate=rate,
        max_in_flight=max_in_flight,
        protocol=protocol,
        duration_s=duration,
        stability_windows=stability_windows,
        max_duration_s=max_duration,
        warmup_s=warmup,
        slo_p99_ms=slo_p99_ms,
        loadgen_workers=loadgen_workers,
        external_workers=expect_workers,
        master_bind_port=master_bind_port,
        seed=seed,
        # Without the executable's path: the report may be shared.
        command=("sharedserve", *sys.argv[1:]),
    )
    # Every refusal before anything is said (the CPU split's log line included) or written: a
    # model not found would otherwise surface as the first step starts, after the estimate, and
    # leave an empty --out behind.
    check_sweep(settings)
    return replace(
        settings, **cpu_settings(server_cpus, loadgen_cpus, servers_started=targets is None)
    )

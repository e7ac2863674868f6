"""The sweep: for each scale, pack the mix (or that many replicas of one model), drive load,
sample, report.

Locust never runs in this process (it monkey-patches with gevent on import): each measurement
starts ``python -m sharedserve.bench.loadgen master`` (plus local workers when one process
cannot offer the load; ``bench.launch``) and reads the result file it writes. This process packs,
supervises, samples and reports. The report is rewritten after every scale, so an interrupted
sweep keeps what it measured. Scale ``s`` runs ``s`` times every pack entry's replicas; a density
sweep of one model is one entry of one replica, so its scales are its densities. With ``repeat``
above 1 each scale's servers, once started, are measured that many times in a row, a row each:
how far the rows differ is how far a measurement repeats, with the servers held fixed.

Stopping is asked for, not forced: ``should_stop`` is polled wherever the sweep waits (replicas
starting, load running), and the sweep then stops the load generator and the replicas in order
and writes the partial report. A signal that raised in the middle of that cleanup could leave
replicas running, which is why the CLI's signal handlers only set a flag.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from sharedserve.bench.environment import describe_environment
from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.launch import Loadgen
from sharedserve.bench.limits import group_limits, read_limits, replica_limits
from sharedserve.bench.offered import Offered, ReplicaRef, offered_load
from sharedserve.bench.report import write_report
from sharedserve.bench.sampler import (
    Sampler,
    cpu_throttling,
    gpu_figures,
    process_gpu_peak,
    summarize,
)
from sharedserve.bench.summary import TargetResult, build_row, finalize_rows
from sharedserve.bench.verdict import recommend
from sharedserve.config import BenchSettings, LoadPattern
from sharedserve.errors import GpuError, SharedServeError
from sharedserve.gpu.backend import GpuBackend, open_gpu_backend
from sharedserve.limits.affinity import format_cpus
from sharedserve.pack import Pack, PackInterrupted, Target, client_tls, read_targets

__all__ = ["BenchInterrupted", "run_bench"]


class BenchInterrupted(SharedServeError):
    """Stop was asked for (``should_stop``); the rows measured so far are in a partial report."""


def replica_load(settings: BenchSettings, targets: list[Target], scale: int) -> dict[str, Offered]:
    """Each target's share of the load the settings offer at ``scale`` (``bench.offered``)."""
    return offered_load(
        [ReplicaRef(t.name, t.model, t.weight) for t in targets],
        settings.pattern,
        concurrency=settings.concurrency,
        rate=settings.rate,
        scale=scale,
    )


class _Run:
    """What one ``run_bench`` call shares between scales."""

    def __init__(self, settings: BenchSettings, should_stop: Callable[[], bool]) -> None:
        self.settings = settings
        self.should_stop = should_stop
        fake = None if settings.pack is None else settings.pack.fake_gpus
        self.backend = open_gpu_backend(fake)
        self.simulated_gpus = self.backend is not None and self.backend.simulated
        if settings.targets_file is not None:
            self.simulated_gpus |= _targets_simulated(settings.targets_file)
        self.gpu_names = _gpu_names(self.backend)
        self.rows: list[dict[str, Any]] = []
        self.limits: list[dict[str, Any]] = []

    def check(self) -> None:
        if self.should_stop():
            raise BenchInterrupted("stopped on request")

    def record_limits(self, targets: list[Target]) -> None:
        """Ask every server for the limits it runs under (before any load)."""
        simulated = self.simulated_gpus
        by_name = {
            t.name: replica_limits(read_limits(t.rest, tls=_tls(t)), simulated_gpus=simulated)
            for t in targets
        }
        self.limits += group_limits(len(targets), by_name)


def _tls(target: Target) -> ssl.SSLContext | None:
    """How an https target is verified (and, with mutual TLS, what it is shown)."""
    if not target.tls:
        return None
    return client_tls(target.tls_ca_file, target.tls_cert_file, target.tls_key_file)


def _targets_simulated(path: Path) -> bool:
    """Whether the pack that wrote a targets file ran on simulated GPUs (its own flag)."""
    try:
        return json.loads(path.read_text()).get("simulated_gpus") is True
    except (OSError, ValueError, AttributeError):
        return False


def _gpu_names(backend: GpuBackend | None) -> dict[str, str]:
    """Name by UUID of every real GPU: a row names the GPU its GPU figures come from."""
    if backend is None or backend.simulated:
        return {}
    try:
        return {g.uuid: g.name for g in backend.list_gpus()}
    except GpuError:
        return {}


def _cgroups(targets: list[Target]) -> dict[str, str]:
    """Each replica's CPU cgroup, by name, where it has one (pack with a quota; a targets file
    from such a pack names them too, a Kubernetes one does not)."""
    return {t.name: t.cgroup for t in targets if t.cgroup is not None}


def _pids(targets: list[Target]) -> dict[int, str | None]:
    """Each local server process and its GPU, for the sampler."""
    return {t.pid: t.gpu for t in targets if t.pid is not None}


def _gpu_name(run: _Run, targets: list[Target]) -> str | None:
    """The name of the real GPU(s) the replicas ran on (several names joined by ", ")."""
    names = dict.fromkeys(run.gpu_names[t.gpu] for t in targets if t.gpu in run.gpu_names)
    return ", ".join(names) or None


def _tag(scale: int, pack: Pack | None, repeat: int) -> str:
    """The load generator's files' name of a measurement; a repeat's (``repeat`` from 1) ends
    ``-run-N`` from the second on, so the first keeps the name it had before repeats."""
    tag = f"scale-{scale}" if pack is not None else "targets"
    return tag if repeat == 1 else f"{tag}-run-{repeat}"


def _measure_repeats(
    run: _Run,
    targets: list[Target],
    scale: int,
    pack: Pack | None,
    on_row: Callable[[dict[str, Any]], None],
) -> None:
    """Measure the started servers ``settings.repeat`` times in a row, a row each."""
    for repeat in range(1, run.settings.repeat + 1):
        run.check()
        # The pids now: a replica the packer restarted since the last run is sampled anew.
        now = targets if pack is None else pack.targets()
        sampler = Sampler(run.backend, _pids(now), cgroups=_cgroups(now))
        run.rows.append(_measure(run, targets, scale, pack, sampler, tag=_tag(scale, pack, repeat)))
        on_row(run.rows[-1])


def _measure(
    run: _Run, targets: list[Target], scale: int, pack: Pack | None, sampler: Sampler, *, tag: str
) -> dict[str, Any]:
    settings = run.settings
    loadgen = Loadgen(settings, targets, replica_load(settings, targets, scale), tag)
    deadline = time.monotonic() + settings.warmup_s + settings.max_measured_s + 300
    sampler.start()
    try:
        while loadgen.master.poll() is None:
            run.check()
            if time.monotonic() > deadline:
                raise SharedServeError(f"the load generator did not finish; see {loadgen.log_path}")
            if pack is not None:
                pack.poll()
                sampler.set_pids(_pids(pack.targets()))
            time.sleep(0.2)
    finally:
        samples = sampler.stop()
        loadgen.stop()
    run.check()  # a load generator stopped by the same signal is no failure to report
    result = loadgen.result()
    start, end = result["window"]["start"], result["window"]["end"]
    throttling = cpu_throttling(samples, start, end)
    peaks = process_gpu_peak(samples, start, end)
    # The pid now: a replica the packer restarted is sampled under its new one.
    now = {t.name: t for t in (pack.targets() if pack else targets)}
    by_name = {t.name: t for t in targets}
    per_target = []
    for name, part in result["targets"].items():
        target, pid = by_name[name], now[name].pid
        per_target.append(
            TargetResult(
                name=name,
                requests=part["requests"],
                errors=part["errors"],
                dropped=part["dropped"],
                histogram=LatencyHistogram.from_dict(part["histogram"]),
                late=part["late"],
                cpu_throttled_share=throttling[name][0] if name in throttling else None,
                cpu_throttled_ms=throttling[name][1] if name in throttling else None,
                model=target.model,
                weight=target.weight,
                slo_p99_ms=target.slo_p99_ms,
                gpu_memory_fraction=None if run.simulated_gpus else target.gpu_memory_fraction,
                cpu_limit=target.cpu_limit,
                gpu_mem_mib=None if pid is None else peaks.get(pid),
            )
        )
    return build_row(
        # Server processes: a shared server's process is one target per model it holds.
        density=len({t.rest for t in targets}),
        scale=scale,
        pattern=settings.pattern,
        window_s=end - start,
        targets=per_target,
        samples=summarize(samples, start, end),
        loadgen_cpu_util=result["loadgen_cpu_util"],
        slo_p99_ms=settings.slo_p99_ms,
        gpu_name=_gpu_name(run, targets),
        stable=result["stable"],
        windows=result["windows"],
        gpus=gpu_figures(samples, start, end, run.gpu_names),
    )


def _report(run: _Run, environment: dict[str, Any], partial: bool) -> dict[str, Any]:
    settings, rows = run.settings, run.rows
    finalize_rows(rows)
    scale_one = sum(e.replicas for e in settings.pack.entries) if settings.pack else None
    return {
        "rows": rows,
        "recommendation": recommend(rows, settings.slo_p99_ms),
        "environment": environment,
        "partial": partial,
        "slo_p99_ms": settings.slo_p99_ms,
        "settings": {
            "pattern": settings.pattern.value,
            "protocol": settings.protocol,
            "concurrency": settings.concurrency
            if settings.pattern is LoadPattern.PARALLEL
            else None,
            "rate": settings.rate if settings.pattern is LoadPattern.POISSON else None,
            "duration_s": settings.duration_s,
            "stability_windows": settings.stability_windows,
            "max_duration_s": settings.max_measured_s,
            "warmup_s": settings.warmup_s,
            "repeat": settings.repeat,
            "scales": list(settings.scales),
            "densities": [] if scale_one is None else [s * scale_one for s in settings.scales],
            "spec": None if settings.spec_file is None else str(settings.spec_file),
            "targets_file": None if settings.targets_file is None else str(settings.targets_file),
            # Where each side ran: a load generator on the servers' CPUs delays what it sends.
            "server_cpus": format_cpus(settings.server_cpus),
            "loadgen_cpus": format_cpus(settings.loadgen_cpus),
            "cpu_pinning": settings.cpu_pinning,
            # What each server reported it got, which the flags alone do not say (limits.py).
            "replica_limits": run.limits,
        },
        "latency_resolution": LatencyHistogram.RESOLUTION,
    }


def _measure_scale(run: _Run, scale: int, on_row: Callable[[dict[str, Any]], None]) -> None:
    settings = run.settings
    assert settings.pack is not None
    pack_settings = replace(
        settings.pack,
        entries=tuple(replace(e, replicas=e.replicas * scale) for e in settings.pack.entries),
        targets_out=settings.out_dir / f"targets-scale-{scale}.json",
        log_dir=settings.out_dir / "logs" / f"scale-{scale}",
        cpus=settings.server_cpus,
    )
    pack = Pack(pack_settings)
    try:
        try:
            targets = pack.start(should_stop=run.should_stop)
        except PackInterrupted as e:
            raise BenchInterrupted(e.message) from e
        run.record_limits(targets)
        _measure_repeats(run, targets, scale, pack, on_row)
    finally:
        pack.stop()


def run_bench(
    settings: BenchSettings,
    *,
    on_scale: Callable[[int, int], None] = lambda scale, replicas: None,
    on_row: Callable[[dict[str, Any]], None] = lambda r: None,
    should_stop: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """Measure every scale (or the given targets, as scale 1); write and return the report.

    ``on_scale(scale, replicas)`` is called as each scale starts. Once ``should_stop`` returns
    True (it is polled a few times a second), or on KeyboardInterrupt, the running scale is
    stopped, the rows so far are written marked partial, and BenchInterrupted (or the
    KeyboardInterrupt) propagates.
    """
    settings.validate()
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    run = _Run(settings, should_stop)
    backend = run.backend
    environment = describe_environment(backend, settings.command)
    try:
        if settings.targets_file is not None:
            targets = read_targets(settings.targets_file)
            on_scale(1, len({t.rest for t in targets}))  # processes, as the row's density
            run.record_limits(targets)
            _measure_repeats(run, targets, 1, None, on_row)
        else:
            assert settings.pack is not None
            for scale in settings.scales:
                run.check()
                on_scale(scale, scale * sum(e.replicas for e in settings.pack.entries))
                _measure_scale(run, scale, on_row)
                write_report(settings.out_dir, _report(run, environment, partial=True))
    except (BenchInterrupted, KeyboardInterrupt):
        write_report(settings.out_dir, _report(run, environment, partial=True))
        raise
    finally:
        if backend is not None:
            backend.close()
    report = _report(run, environment, partial=False)
    write_report(settings.out_dir, report)
    return report

"""``sharedserve bench`` and ``bench-worker``: the sweep (one model's densities, or a mix's
scales) and its remote load generators."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from sharedserve.cli._app import app
from sharedserve.cli.pack import check_server_args, replica_environment, spec_entries
from sharedserve.config import BenchSettings, LoadPattern, PackEntry, PackSettings
from sharedserve.errors import ConfigError

__all__ = ["model_pack", "parse_scales", "run_stoppable"]

log = logging.getLogger(__name__)


def model_pack(entry: PackEntry, policy: str, fake_gpus: Path | None) -> PackSettings:
    """A density sweep's pack: the one entry at one replica, which each scale multiplies."""
    return PackSettings(
        entries=(replace(entry, replicas=1),),
        placement_policy=policy,
        fake_gpus=fake_gpus,
        environment=replica_environment(),
    )


def parse_scales(flag: str, text: str) -> tuple[int, ...]:
    """Comma-separated positive integers (``--densities``, ``--scales``); ConfigError names
    ``flag``."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ConfigError(f"{flag} must be positive integers, got {text!r}")
    return values


def _scales(
    densities: str | None, scales: str | None, *, spec: bool, targets: bool
) -> tuple[int, ...]:
    """The sweep's scales: ``--scales``, or ``--densities`` for one model (the same numbers)."""
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
    return (1, 2, 4) if spec else (1, 2, 4, 8)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="Directory for report.json/.csv/.md/.html and plots.")],
    model: Annotated[
        Path | None,
        typer.Option(
            help="Sweep density with `pack` replicas of this model.",
            show_default="none: give --model, --spec or --targets",
        ),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option(
            help="Sweep a mix of models: a `pack --spec` file (weights and slo_p99_ms per model).",
            show_default="none: give --model, --spec or --targets",
        ),
    ] = None,
    targets: Annotated[
        Path | None,
        typer.Option(
            help="Measure running endpoints (pack's targets file) instead.",
            show_default="none: give --model, --spec or --targets",
        ),
    ] = None,
    densities: Annotated[
        str | None,
        typer.Option(
            help="--model: replica counts to sweep, e.g. 1,2,4,8.", show_default="1,2,4,8"
        ),
    ] = None,
    scales: Annotated[
        str | None,
        typer.Option(
            help="--spec: multiples of every entry's replicas to sweep, e.g. 1,2,4 (scale 2 runs "
            "twice each entry's replicas).",
            show_default="1,2,4",
        ),
    ] = None,
    policy: Annotated[
        str,
        typer.Option(
            help="Placement of replicas without a `gpu` on several GPUs: bundle or spread, as "
            "`pack --policy`."
        ),
    ] = "bundle",
    pattern: Annotated[
        LoadPattern,
        typer.Option(
            help="sequential: 1 in flight per replica; parallel: --concurrency users; poisson: "
            "open loop at --rate."
        ),
    ] = LoadPattern.SEQUENTIAL,
    concurrency: Annotated[
        int,
        typer.Option(
            help="Parallel: users of the whole mix at scale 1, split by model weight, at least "
            "one per replica; scale s runs s times as many. With --model: users per replica."
        ),
    ] = 10,
    rate: Annotated[
        float,
        typer.Option(
            help="Poisson: requests/s of the whole mix at scale 1, split by model weight, then "
            "over each model's replicas; scale s offers s times as much. With --model: per "
            "replica."
        ),
    ] = 10.0,
    max_in_flight: Annotated[
        int,
        typer.Option(
            help="Poisson: requests in flight per replica past which new ones are dropped."
        ),
    ] = 100,
    duration: Annotated[
        float,
        typer.Option(
            help="Seconds measured per density: the row's figures cover this long, measured in "
            "--stability-windows windows of equal length."
        ),
    ] = 30.0,
    stability_windows: Annotated[
        int,
        typer.Option(
            help="Windows (each --duration / N seconds) whose QPS and p99 must each be within "
            "10% of their mean for a row to be stable. Until the last N agree, more windows of "
            "the same length are measured, up to --max-duration; a row still not stable is "
            "flagged unstable and never recommended. 1 turns the check off."
        ),
    ] = 3,
    max_duration: Annotated[
        float | None,
        typer.Option(
            help="Most seconds measured per density while waiting for the windows to agree.",
            show_default="3 x --duration",
        ),
    ] = None,
    warmup: Annotated[float, typer.Option(help="Seconds of load before measuring.")] = 5.0,
    slo_p99_ms: Annotated[
        float | None,
        typer.Option(
            help="P99 objective in ms of every model without its own (a spec's slo_p99_ms); "
            "enables the recommendation.",
            show_default="none: only the spec's objectives",
        ),
    ] = None,
    protocol: Annotated[
        str,
        typer.Option(
            help="rest or grpc (TF Serving's APIs), oip-rest (Open Inference Protocol, binary "
            "tensors) or oip-grpc."
        ),
    ] = "rest",
    gpu: Annotated[
        str | None,
        typer.Option(help="GPU to pack onto: index or UUID.", show_default="lowest index"),
    ] = None,
    gpu_memory_fraction: Annotated[
        float | None, typer.Option(help="Cap per replica.", show_default="pack's even split")
    ] = None,
    gpu_memory_mib: Annotated[
        int | None, typer.Option(help="Cap per replica in MiB.", show_default="none: the fraction")
    ] = None,
    cpu_limit: Annotated[
        float | None,
        typer.Option(help="CPU quota per replica in cores.", show_default="none: no quota"),
    ] = None,
    fake_gpus: Annotated[
        Path | None,
        typer.Option(
            help="Simulated GPU inventory (JSON), for tests.",
            show_default="none: real GPUs through NVML",
        ),
    ] = None,
    loadgen_workers: Annotated[
        int | None,
        typer.Option(
            help="Local Locust workers.", show_default="sized to the load; 0 = master only"
        ),
    ] = None,
    expect_workers: Annotated[
        int, typer.Option(help="Remote `bench-worker` processes to wait for (Kubernetes).")
    ] = 0,
    master_bind_port: Annotated[
        int, typer.Option(help="Port the Locust master listens on for remote workers.")
    ] = 5557,
    seed: Annotated[int, typer.Option(help="Seed of request data and Poisson arrivals.")] = 0,
) -> None:
    """Measure P99, QPS and GPU/CPU use per packing density; recommend the densest within SLO.

    With --model, each density in --densities gets that many `pack` replicas (GPU cap, CPU
    cgroup, env contract as `pack` gives them), load from Locust for --warmup then --duration
    seconds, sampling aligned to the measured window, then the replicas are stopped. With
    --spec, a mix of models is packed as `pack --spec` does, at each of --scales (scale 2:
    twice every entry's replicas); each model gets its weight's share of the load and is judged
    against its own slo_p99_ms (else --slo-p99-ms), and the recommendation is the largest scale at
    which every model met its objective, naming the model that missed first above it. With
    --targets, the endpoints already running (a `pack` targets file, or a Kubernetes deployment
    written in that format) are measured as one row, load split by their weights.

    Latencies are recorded per request from Locust's request event into an HDR-style histogram
    at microsecond resolution. GPU columns are null unless a real GPU was sampled. A row whose
    load generator ran above 80% CPU is flagged: the load generator, not the models, may have
    been the limit. Ctrl-C keeps the rows measured so far in a report marked partial.

    Options after the known ones are passed to every `serve` replica, e.g. --enable-batching.
    """
    from sharedserve.bench.display import print_summary
    from sharedserve.limits.gpu import parse_cap_request

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
    pack_settings = None
    if spec is not None:
        given = {
            "--gpu": gpu,
            "--gpu-memory-fraction": gpu_memory_fraction,
            "--gpu-memory-mib": gpu_memory_mib,
            "--cpu-limit": cpu_limit,
        }
        pack_settings = PackSettings(
            entries=spec_entries(spec, given, check_server_args(list(ctx.args))),
            placement_policy=policy,
            fake_gpus=fake_gpus,
            environment=replica_environment(),
        )
    elif model is not None:
        entry = PackEntry(
            model_dir=model,
            gpu=gpu,
            cap=parse_cap_request(gpu_memory_fraction, gpu_memory_mib),
            cpu_limit_cores=cpu_limit,
            server_args=check_server_args(list(ctx.args)),
        )
        pack_settings = model_pack(entry, policy, fake_gpus)
    elif ctx.args:
        raise ConfigError(f"unexpected arguments with --targets: {' '.join(ctx.args)}")
    settings = BenchSettings(
        out_dir=out,
        scales=sweep,
        pack=pack_settings,
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
    settings.validate()
    console = Console(stderr=True)
    steps = len(settings.scales)
    noun = "scale" if spec is not None else "density"
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task(noun, total=steps)

        def label(scale: int, replicas: int) -> str:
            return f"scale {scale} ({replicas} replicas)" if spec else f"density {replicas}"

        def on_scale(scale: int, replicas: int) -> None:
            progress.update(task, description=label(scale, replicas))

        def on_row(row: dict[str, Any]) -> None:
            progress.advance(task)
            console.log(
                f"{label(row['scale'], row['density'])}: {row['qps']:.1f} qps, "
                f"p99 {row['p99_ms']} ms"
            )

        report = run_stoppable(settings, console, on_scale=on_scale, on_row=on_row)
    print_summary(Console(), report, out)


def run_stoppable(
    settings: BenchSettings,
    console: Console,
    on_scale: Callable[[int, int], None] = lambda scale, replicas: None,
    on_row: Callable[[dict[str, Any]], None] = lambda row: None,
) -> dict[str, Any]:
    """``run_bench``, stopped in order by SIGINT or SIGTERM: the rows so far kept as a partial
    report, exit 128 + the signal. Every command that runs a bench goes through here: one that
    did not (``profile``) left its replicas' cgroups behind when killed."""
    from sharedserve.bench.sweep import BenchInterrupted, run_bench

    received: list[int] = []

    def on_signal(signum: int, _: FrameType | None) -> None:
        # As `pack` does: both signals stop the run, through a flag the sweep polls, so the
        # replicas and load generators are stopped in order, never half-way. Installed over an
        # inherited SIG_IGN too (`sharedserve bench ... &` from a script).
        log.info("%s received; stopping (rows so far are kept)", signal.Signals(signum).name)
        received.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return run_bench(
            settings, on_scale=on_scale, on_row=on_row, should_stop=lambda: bool(received)
        )
    except (BenchInterrupted, KeyboardInterrupt):
        console.print(
            f"interrupted: the rows measured so far are in {settings.out_dir} (marked partial)"
        )
        raise typer.Exit(128 + (received[0] if received else signal.SIGINT)) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@app.command("bench-worker")
def bench_worker(
    master: Annotated[
        str, typer.Option(help="HOST:PORT of the `sharedserve bench` Locust master.")
    ],
) -> None:
    """A remote Locust worker for `sharedserve bench --expect-workers N` (e.g. a Kubernetes pod).

    It needs no other flags: the master sends it the targets and the load pattern. It exits when
    the master's measurement ends.
    """
    host, _, port = master.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--master must be HOST:PORT, got {master!r}")
    # Become the load generator process: Locust's gevent patching must not touch this CLI.
    args = [sys.executable, "-m", "sharedserve.bench.loadgen", "worker", "--master", master]
    os.execv(sys.executable, args)

"""``sharedserve bench`` and ``bench-worker``: the sweep (one model's densities, or a mix's
scales) and its remote load generators."""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from sharedserve.cli._app import (
    FakeGpus,
    GpusOption,
    LoadgenCpus,
    LoadOption,
    ProtocolOption,
    ServerCpus,
    app,
    exit_when_stopped,
)
from sharedserve.cli._bench_settings import MIX_SCALES, bench_settings
from sharedserve.config import BenchSettings, LoadPattern, PackEntry, PackSettings
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import ConfigError
from sharedserve.limits.affinity import AUTO

__all__: list[str] = []

_SOURCE = "none: give --model, --spec or --targets"
_WorkersOption = partial(typer.Option, rich_help_panel="Locust workers")  # --help's panel


def _listed(scales: tuple[int, ...]) -> str:
    return ",".join(str(s) for s in scales)


_Out = Annotated[Path, typer.Option(help="Directory for report.json/.csv/.md/.html and plots.")]
_Model = Annotated[
    Path | None,
    typer.Option(help="Sweep density with `pack` replicas of this model.", show_default=_SOURCE),
]
_Spec = Annotated[
    Path | None,
    typer.Option(
        help="Sweep a mix of models: a `pack --spec` file (weights and slo_p99_ms per model).",
        show_default=_SOURCE,
    ),
]
_Targets = Annotated[
    Path | None,
    typer.Option(
        help="Measure running endpoints (pack's targets file) instead.", show_default=_SOURCE
    ),
]
_Densities = Annotated[
    str | None,
    typer.Option(
        help="--model: replica counts to sweep, e.g. 1,2,4,8.",
        show_default=_listed(BenchSettings.scales),
    ),
]
_Scales = Annotated[
    str | None,
    typer.Option(
        help="--spec: multiples of every entry's replicas to sweep, e.g. 1,2,4 (scale 2 runs "
        "twice each entry's replicas).",
        show_default=_listed(MIX_SCALES),
    ),
]
_Policy = Annotated[
    PlacementPolicy,
    typer.Option(
        help="Placement of replicas without a `gpu` on several GPUs: bundle or spread, as "
        "`pack --policy`.",
        case_sensitive=False,
    ),
]
_Pattern = Annotated[
    LoadPattern,
    LoadOption(
        help="sequential: 1 in flight per replica; parallel: --concurrency users; poisson: open "
        "loop at --rate."
    ),
]
_Concurrency = Annotated[
    int,
    LoadOption(
        help="Parallel: users of the whole mix at scale 1, split by model weight, at least one "
        "per replica; scale s runs s times as many. With --model: users per replica."
    ),
]
_Rate = Annotated[
    float,
    LoadOption(
        help="Poisson: requests/s of the whole mix at scale 1, split by model weight, then over "
        "each model's replicas; scale s offers s times as much. With --model: per replica."
    ),
]
_MaxInFlight = Annotated[
    int,
    LoadOption(help="Poisson: requests in flight per replica past which new ones are dropped."),
]
_Duration = Annotated[
    float,
    LoadOption(
        help="Seconds measured per density: the row's figures cover this long, measured in "
        "--stability-windows windows of equal length."
    ),
]
_StabilityWindows = Annotated[
    int,
    LoadOption(
        help="Windows (each --duration / N seconds) whose QPS and p99 must each be within 10% "
        "of their mean for a row to be stable. Until the last N agree, more windows of the same "
        "length are measured, up to --max-duration; a row still not stable is flagged unstable "
        "and never recommended. 1 turns the check off."
    ),
]
_MaxDuration = Annotated[
    float | None,
    LoadOption(
        help="Most seconds measured per density while waiting for the windows to agree.",
        show_default="3 x --duration",
    ),
]
_Warmup = Annotated[float, LoadOption(help="Seconds of load before measuring.")]
_SloP99Ms = Annotated[
    float | None,
    typer.Option(
        help="P99 objective in ms of every model without its own (a spec's slo_p99_ms); enables "
        "the recommendation.",
        show_default="none: only the spec's objectives",
    ),
]
_Gpu = Annotated[
    str | None, GpusOption(help="GPU to pack onto: index or UUID.", show_default="lowest index")
]
_GpuMemoryFraction = Annotated[
    float | None, GpusOption(help="Cap per replica.", show_default="pack's even split")
]
_GpuMemoryMib = Annotated[
    int | None, GpusOption(help="Cap per replica in MiB.", show_default="none: the fraction")
]
_CpuLimit = Annotated[
    float | None,
    GpusOption(help="CPU quota per replica in cores.", show_default="none: no quota"),
]
_LoadgenWorkers = Annotated[
    int | None,
    _WorkersOption(help="Local Locust workers.", show_default="sized to the load; 0 = master only"),
]
_ExpectWorkers = Annotated[
    int, _WorkersOption(help="Remote `bench-worker` processes to wait for (Kubernetes).")
]
_MasterBindPort = Annotated[
    int, _WorkersOption(help="Port the Locust master listens on for remote workers.")
]
_Seed = Annotated[int, LoadOption(help="Seed of request data and Poisson arrivals.")]


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(
    ctx: typer.Context,
    out: _Out,
    model: _Model = None,
    spec: _Spec = BenchSettings.spec_file,
    targets: _Targets = BenchSettings.targets_file,
    densities: _Densities = None,
    scales: _Scales = None,
    policy: _Policy = PackSettings.placement_policy,
    pattern: _Pattern = BenchSettings.pattern,
    concurrency: _Concurrency = BenchSettings.concurrency,
    rate: _Rate = BenchSettings.rate,
    max_in_flight: _MaxInFlight = BenchSettings.max_in_flight,
    duration: _Duration = BenchSettings.duration_s,
    stability_windows: _StabilityWindows = BenchSettings.stability_windows,
    max_duration: _MaxDuration = BenchSettings.max_duration_s,
    warmup: _Warmup = BenchSettings.warmup_s,
    slo_p99_ms: _SloP99Ms = BenchSettings.slo_p99_ms,
    protocol: ProtocolOption = BenchSettings.protocol,
    gpu: _Gpu = PackEntry.gpu,
    gpu_memory_fraction: _GpuMemoryFraction = None,
    gpu_memory_mib: _GpuMemoryMib = None,
    cpu_limit: _CpuLimit = PackEntry.cpu_limit_cores,
    fake_gpus: FakeGpus = PackSettings.fake_gpus,
    loadgen_workers: _LoadgenWorkers = BenchSettings.loadgen_workers,
    expect_workers: _ExpectWorkers = BenchSettings.external_workers,
    master_bind_port: _MasterBindPort = BenchSettings.master_bind_port,
    seed: _Seed = BenchSettings.seed,
    server_cpus: ServerCpus = AUTO,
    loadgen_cpus: LoadgenCpus = AUTO,
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
    load generator ran above 80% CPU, or (open loop) sent over 5% of its requests more than 1 ms
    late, is not trustworthy and never recommended: its own delay is in the latencies. The load
    generator runs on CPUs of its own (--loadgen-cpus), the servers on the rest (--server-cpus);
    the report records both. Ctrl-C keeps the rows measured so far in a report marked partial.

    Options after the known ones are passed to every `serve` replica, e.g. --enable-batching.
    """
    flags = {name: value for name, value in locals().items() if name != "ctx"}
    settings = bench_settings(extra=list(ctx.args), **flags)
    from rich.console import Console

    from sharedserve.bench.display import print_summary
    from sharedserve.bench.estimate import estimate
    from sharedserve.bench.run import describe_targets, run_with_progress
    from sharedserve.pack import read_targets

    n = len(settings.scales)
    noun = ("density", "densities") if model else ("scale", "scales")
    what = describe_targets(read_targets(targets)) if targets else f"{n} {noun[n != 1]}"
    # Up front, on stderr with the progress: a long sweep is no surprise, and stdout stays the
    # results.
    progress = Console(stderr=True)
    progress.print(estimate(settings).describe(what), highlight=False, soft_wrap=True)
    with exit_when_stopped():
        report = run_with_progress(settings, mix=spec is not None, console=progress)
    hint = "give slo_p99_ms in the spec, or --slo-p99-ms, to judge the scales" if spec else None
    print_summary(Console(), report, out, objective_hint=hint)


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

"""``sharedserve profile``: a bench preset that measures one model the way sizing reads it."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from sharedserve.cli._app import (
    FakeGpus,
    GpusOption,
    LoadgenCpus,
    LoadOption,
    ProtocolOption,
    ServerCpus,
    app,
    cpu_settings,
    exit_when_stopped,
)
from sharedserve.cli._replicas import replica_environment
from sharedserve.config import BenchSettings, LoadPattern, PackEntry, PackSettings
from sharedserve.errors import ConfigError
from sharedserve.limits.affinity import AUTO

__all__ = ["Beside", "OpenLoopRow", "beside_settings", "neighbours", "open_loop_row"]

# The preset: fewer users and a shorter window than bench's defaults, since a profile measures
# two sweeps of up to 8 replicas each.
_USERS_PER_REPLICA = 4
# The open-loop row measures what arriving on a schedule at an idle-ish server costs a request,
# not a queue: a tenth of one replica's sequential throughput, where queueing adds little. At a
# tenth a slow model gets too few requests in --duration for size to trust the row (mobilenet_v2
# got 27 in 12 s, resnet50 21 in 30 s; size.profile.MIN_REQUESTS is 100), so the rate rises
# until the row expects _OPEN_LOOP_TARGET requests (a margin over 100 for a Poisson count's
# spread), but never past a quarter of the sequential throughput: at half, mobilenet_v2's row
# on two CPU cores (the replica busy half the time, beside the load generator) held 19 ms a
# request beyond its call and its M/G/1 wait, and size --verify then predicted its p99 at +111%
# (a verify run of the mixes in benchmarks/results/sizing_verify_cpu.md). A fast model keeps
# its tenth, however many requests that makes: capped at 300 requests, tiny's row in a 20 s
# window ran at 15/s, a server idler than the 5-200 requests/s a process of the verify mixes
# takes (what arriving costs grows with the gap: benchmarks/results/idle_gap_cpu.md, 2.2-2.6 ms
# a request at 10 ms gaps, 1.2-1.4 at 2 ms, 1.0 back to back), and its p99 stood on three
# requests.
_OPEN_LOOP_SHARE = 0.1
_OPEN_LOOP_MAX_SHARE = 0.25
_OPEN_LOOP_TARGET = 150
_DURATION_S = 20.0
_DENSITIES = ",".join(str(s) for s in BenchSettings.scales)
_JUDGED_BY_SIZE = "size judges each density against the fleet file's slo_p99_ms"

_BesideOption = partial(typer.Option, rich_help_panel="Beside a neighbour")  # --help's panel
_Model = Annotated[Path, typer.Option(help="Model base path, as for `serve --model`.")]
_Out = Annotated[
    Path, typer.Option(help="Directory of the profile: a fleet file's `profile:` may name it.")
]
_Densities = Annotated[str, typer.Option(help="Replicas on the GPU to measure.")]
_Concurrency = Annotated[int, LoadOption(help="Users per replica in the parallel sweep.")]
_Duration = Annotated[float, LoadOption(help="Seconds measured per density.")]
_Warmup = Annotated[float, LoadOption(help="Seconds of load before measuring.")]
_StabilityWindows = Annotated[
    int,
    LoadOption(
        help="As for bench: windows that must agree for a density to count (size uses only "
        "those that did); 1 turns the check off."
    ),
]
_CpuLimit = Annotated[
    float | None,
    GpusOption(
        help="CPU quota per replica in cores, as it will run.", show_default="none: no quota"
    ),
]
_Gpu = Annotated[
    str | None,
    GpusOption(help="GPU to measure on: index or UUID.", show_default="lowest index"),
]
_Beside = Annotated[
    list[Path] | None,
    _BesideOption(
        help="A neighbour's model base path. After the open-loop row, the profiled model is "
        "measured once more at that row's rate beside the neighbour, each in a process of its "
        "own (the neighbour under the same --cpu-limit, on the same GPU, sent its "
        "--beside-rate), written to OUT's folder beside-NAME, which size reads as the "
        "model's measured interference beside NAME. Repeat for several neighbours, or one at "
        "several rates (its folders then beside-NAME-RATEqps): a row each, one neighbour at a "
        "time.",
        show_default="none: measured beside copies of itself only (the sequential sweep)",
        metavar="<path>",
    ),
]
_BesideRate = Annotated[
    list[float] | None,
    _BesideOption(
        help="Requests/s sent open loop to the --beside neighbour in the same position (the "
        "first rate to the first --beside): what it would carry on the model's GPU. One per "
        "--beside.",
        show_default="none",
        metavar="<float>",
    ),
]


@app.command()
def profile(
    model: _Model,
    out: _Out,
    densities: _Densities = _DENSITIES,
    concurrency: _Concurrency = _USERS_PER_REPLICA,
    duration: _Duration = _DURATION_S,
    warmup: _Warmup = BenchSettings.warmup_s,
    stability_windows: _StabilityWindows = BenchSettings.stability_windows,
    cpu_limit: _CpuLimit = PackEntry.cpu_limit_cores,
    gpu: _Gpu = PackEntry.gpu,
    protocol: ProtocolOption = BenchSettings.protocol,
    fake_gpus: FakeGpus = PackSettings.fake_gpus,
    server_cpus: ServerCpus = AUTO,
    loadgen_cpus: LoadgenCpus = AUTO,
    beside: _Beside = None,
    beside_rate: _BesideRate = None,
) -> None:
    """Profile one model for `size`: a sequential and a parallel density sweep with `bench`,
    then an open-loop row of one replica.

    Writes OUT/sequential/, OUT/parallel/ and OUT/poisson/, each a full bench report; `size`
    reads every report.json under OUT as one profile (the highest QPS per replica that met a
    model's objective, at the densities measured, with its GPU memory and utilisation from NVML
    on a GPU). Sequential shows the latency of one request at a time; parallel (--concurrency
    users per replica) the throughput a replica sustains; poisson, one replica at a low open-loop
    rate, each request's time measured as `size --verify` measures it: `size` adds what it costs
    beyond a call to each simulated request. Its rate: a tenth of the first sequential row's QPS
    per replica (an idle-ish server, not a queue), raised until the row expects 150 requests in
    --duration (size trusts a row of 100 or more) but never past a quarter of that QPS; a line
    says when even a quarter gives under 100, and what --duration would do. With --beside, one
    more open-loop row per neighbour (OUT/beside-NAME/): the model at that rate beside the
    neighbour's own process at its --beside-rate, so that size predicts the model beside that
    neighbour from a measurement, not from copies of itself. The load generator runs on CPUs of
    its own, as in `bench` (--server-cpus, --loadgen-cpus). For other patterns or settings, run
    `bench` and point the fleet file at its report.json.
    """
    from rich.console import Console

    from sharedserve.bench.display import print_summary
    from sharedserve.bench.estimate import estimate
    from sharedserve.bench.run import model_pack, parse_scales, run_with_progress
    from sharedserve.server import find_model

    scales = parse_scales("--densities", densities)
    # Named as their reports will name them, before anything runs: a bad --beside costs nothing.
    others = (
        neighbours(
            find_model(model).name,
            [(path, find_model(path).name) for path in beside or []],
            beside_rate or [],
        )
        if beside or beside_rate
        else []
    )
    entry = PackEntry(model_dir=model, gpu=gpu, cpu_limit_cores=cpu_limit)
    pack = model_pack(entry, PackSettings.placement_policy, fake_gpus, replica_environment())
    console = Console()
    progress = Console(stderr=True)
    patterns = (LoadPattern.SEQUENTIAL, LoadPattern.PARALLEL)
    cpus = cpu_settings(server_cpus, loadgen_cpus)
    sweeps = [
        BenchSettings(
            out_dir=out / pattern.value,
            scales=scales,
            pack=pack,
            pattern=pattern,
            concurrency=concurrency,
            protocol=protocol,
            duration_s=duration,
            stability_windows=stability_windows,
            warmup_s=warmup,
            command=("sharedserve", *sys.argv[1:]),
            **cpus,
        )
        for pattern in patterns
    ]
    for settings in sweeps:
        settings.validate()
    # One estimate for every sweep, said before any starts; the time left counts it down. The
    # open-loop sweep is one row (density 1), and each neighbour's another (two processes).
    swept = len(sweeps) * len(scales)
    plan = estimate(sweeps[0], sweeps=len(sweeps), then=(1, *[2] * len(others)))
    rows = f"{len(scales)} densit{'y' if len(scales) == 1 else 'ies'}"
    what = f"{len(sweeps)} sweeps of {rows} and an open-loop row"
    if others:
        what += f", and {len(others)} beside {'a neighbour' if len(others) == 1 else 'neighbours'}"
    progress.print(f"profile {model.name}: {plan.describe(what)}", highlight=False, soft_wrap=True)

    def measure(
        settings: BenchSettings, done: int, label: str, prefix: str | None = None
    ) -> dict[str, Any]:
        console.print(f"profile {model.name}: {label}", highlight=False)
        with exit_when_stopped():
            report = run_with_progress(
                settings,
                mix=False,
                console=progress,
                plan=plan,
                done=done,
                prefix=prefix or f"{settings.pattern.value} ",
            )
        # Unjudged on purpose: the objectives are the fleet file's, which size reads.
        print_summary(console, report, settings.out_dir, objective_hint=_JUDGED_BY_SIZE)
        return report

    reports = [
        measure(settings, i * len(scales), f"{settings.pattern.value} sweep of {densities}")
        for i, settings in enumerate(sweeps)
    ]
    row = open_loop_row(reports[0], duration)
    if row is None:
        console.print(
            f"profile {model.name}: no open-loop row: the sequential sweep served nothing to "
            "set its rate from; size takes service times from the sequential row"
            + (", and nothing is measured beside --beside" if others else ""),
            highlight=False,
        )
    else:
        warning = row.too_few(model.name)
        if warning is not None:
            console.print(warning, highlight=False)
        # Stability is not asked of it: a window of a hundred requests has its p99 in its
        # slowest one or two, and the row's rate is the schedule's, not a measure of the model.
        poisson = replace(
            sweeps[0],
            out_dir=out / LoadPattern.POISSON.value,
            scales=(1,),
            pattern=LoadPattern.POISSON,
            rate=row.rate,
            stability_windows=1,
        )
        poisson.validate()
        label = f"open-loop row at {row.rate:.3g} requests/s (~{row.requests:.0f} requests)"
        measure(poisson, swept, label)
        for i, other in enumerate(others):
            label = (
                f"open-loop row at {row.rate:.3g} requests/s beside {other.name} at "
                f"{other.rate:g} requests/s"
            )
            measure(beside_settings(poisson, other, out), swept + 1 + i, label, f"{other.folder} ")
    console.print(f"profile in {out} (a fleet file's `profile:` may name it)", highlight=False)


@dataclass(frozen=True)
class OpenLoopRow:
    """The open-loop row's schedule, chosen from the sequential sweep's first row."""

    rate: float
    """Requests per second the row sends."""
    requests: float
    """Requests it expects in --duration."""
    duration_s: float
    """The --duration at which it would expect ``_OPEN_LOOP_TARGET`` requests at the highest
    rate it allows (a quarter of the sequential QPS): what to pass when ``requests`` is too few."""

    def too_few(self, model: str) -> str | None:
        """The line to print when the row will hold fewer requests than size trusts; else None."""
        from sharedserve.size.profile import MIN_REQUESTS

        if self.requests >= MIN_REQUESTS:
            return None
        return (
            f"profile {model}: the open-loop row will hold {self.requests:.0f} requests, under "
            f"the {MIN_REQUESTS} size trusts: pass --duration >= {math.ceil(self.duration_s)}"
        )


def open_loop_row(sequential: dict[str, Any], duration_s: float) -> OpenLoopRow | None:
    """The open-loop row for one replica of the sequential sweep's first row (the rule is
    ``_OPEN_LOOP_SHARE``'s comment); None when that row served nothing."""
    rows = sequential.get("rows") or []
    if not rows or not rows[0].get("qps"):
        return None
    per_replica = float(rows[0]["qps"]) / max(1, int(rows[0]["density"]))
    highest = _OPEN_LOOP_MAX_SHARE * per_replica
    wanted = max(_OPEN_LOOP_SHARE * per_replica, _OPEN_LOOP_TARGET / duration_s)
    rate = min(wanted, highest)
    return OpenLoopRow(rate, rate * duration_s, _OPEN_LOOP_TARGET / highest)


@dataclass(frozen=True)
class Beside:
    """A neighbour the model is measured beside (``--beside``, ``--beside-rate``)."""

    model_dir: Path
    name: str
    """Its model's name, as its report names it: what size matches a planned neighbour by."""
    rate: float
    """Requests/s it is sent."""
    folder: str
    """OUT's folder of its row: ``beside-NAME``, or ``beside-NAME-RATEqps`` where NAME is
    measured at several rates."""


def neighbours(
    model: str, given: Sequence[tuple[Path, str]], rates: Sequence[float]
) -> list[Beside]:
    """The ``--beside`` neighbours (each a path and its model's name) at their ``--beside-rate``,
    paired in order; ConfigError names the flag at fault."""
    from sharedserve.size.neighbourhood import BESIDE

    if len(given) != len(rates):
        raise ConfigError(
            f"--beside and --beside-rate pair up in order: got {len(given)} --beside and "
            f"{len(rates)} --beside-rate"
        )
    bad = [r for r in rates if not (r > 0 and math.isfinite(r))]
    if bad:
        raise ConfigError(f"--beside-rate must be positive requests/s, got {bad[0]:g}")
    names = [name for _, name in given]
    out = []
    for (path, name), rate in zip(given, rates, strict=True):
        if name == model:
            raise ConfigError(
                f"--beside {path}: its model is named {name}, as the profiled one is; the "
                "sequential sweep measures it beside copies of itself already"
            )
        several = names.count(name) > 1
        out.append(Beside(path, name, rate, f"{BESIDE}{name}-{rate:g}qps" if several else
                          f"{BESIDE}{name}"))  # fmt: skip
    folders = [b.folder for b in out]
    repeated = sorted({f for f in folders if folders.count(f) > 1})
    if repeated:
        raise ConfigError(f"--beside measures {', '.join(repeated)} twice: give each once")
    return out


def beside_settings(poisson: BenchSettings, neighbour: Beside, out: Path) -> BenchSettings:
    """The open-loop row ``poisson`` again, its model beside ``neighbour``'s process: a bench of
    two entries, each weighted by its requests/s (``bench.offered`` splits the rate by weight,
    as ``size --verify`` gives each model its planned rate), the neighbour under the model's CPU
    limit and GPU."""
    assert poisson.pack is not None
    (own,) = poisson.pack.entries
    other = PackEntry(model_dir=neighbour.model_dir, gpu=own.gpu,
                      cpu_limit_cores=own.cpu_limit_cores, weight=neighbour.rate)  # fmt: skip
    entries = (replace(own, weight=poisson.rate), other)
    return replace(
        poisson,
        out_dir=out / neighbour.folder,
        pack=replace(poisson.pack, entries=entries),
        rate=poisson.rate + neighbour.rate,
    )

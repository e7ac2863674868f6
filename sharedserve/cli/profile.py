"""``sharedserve profile``: a bench preset that measures one model the way sizing reads it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sharedserve.cli._app import app
from sharedserve.cli.bench import model_pack
from sharedserve.config import BenchSettings, LoadPattern, PackEntry

__all__: list[str] = []


@app.command()
def profile(
    model: Annotated[Path, typer.Option(help="Model base path, as for `serve --model`.")],
    out: Annotated[
        Path,
        typer.Option(help="Directory of the profile: a fleet file's `profile:` may name it."),
    ],
    densities: Annotated[str, typer.Option(help="Replicas on the GPU to measure.")] = "1,2,4,8",
    concurrency: Annotated[int, typer.Option(help="Users per replica in the parallel sweep.")] = 4,
    duration: Annotated[float, typer.Option(help="Seconds measured per density.")] = 20.0,
    warmup: Annotated[float, typer.Option(help="Seconds of load before measuring.")] = 5.0,
    stability_windows: Annotated[
        int,
        typer.Option(
            help="As for bench: windows that must agree for a density to count (size uses only "
            "those that did); 1 turns the check off."
        ),
    ] = 3,
    cpu_limit: Annotated[
        float | None,
        typer.Option(
            help="CPU quota per replica in cores, as it will run.", show_default="none: no quota"
        ),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(help="GPU to measure on: index or UUID.", show_default="lowest index"),
    ] = None,
    protocol: Annotated[
        str,
        typer.Option(
            help="rest or grpc (TF Serving's APIs), oip-rest (Open Inference Protocol, binary "
            "tensors) or oip-grpc."
        ),
    ] = "rest",
    fake_gpus: Annotated[
        Path | None,
        typer.Option(
            help="Simulated GPU inventory (JSON), for tests.",
            show_default="none: real GPUs through NVML",
        ),
    ] = None,
) -> None:
    """Profile one model for `size`: a sequential and a parallel density sweep with `bench`.

    Writes OUT/sequential/ and OUT/parallel/, each a full bench report; `size` reads every
    report.json under OUT as one profile (the highest QPS per replica that met a model's
    objective, at the densities measured, with its GPU memory and utilisation from NVML on a
    GPU). Sequential shows the latency of one request at a time; parallel (--concurrency users
    per replica) the throughput a replica sustains. For other patterns or settings, run `bench`
    and point the fleet file at its report.json.
    """
    from rich.console import Console

    from sharedserve.bench.display import print_summary
    from sharedserve.cli.bench import parse_scales, run_stoppable

    scales = parse_scales("--densities", densities)
    pack = model_pack(PackEntry(model_dir=model, gpu=gpu, cpu_limit_cores=cpu_limit), "bundle",
                      fake_gpus)  # fmt: skip
    console = Console()
    for pattern in (LoadPattern.SEQUENTIAL, LoadPattern.PARALLEL):
        where = out / pattern.value
        settings = BenchSettings(
            out_dir=where,
            scales=scales,
            pack=pack,
            pattern=pattern,
            concurrency=concurrency,
            protocol=protocol,
            duration_s=duration,
            stability_windows=stability_windows,
            warmup_s=warmup,
            command=("sharedserve", *sys.argv[1:]),
        )
        settings.validate()
        console.print(
            f"profile {model.name}: {pattern.value} sweep of {densities}", highlight=False
        )
        print_summary(console, run_stoppable(settings, console), where)
    console.print(f"profile in {out} (a fleet file's `profile:` may name it)", highlight=False)

"""``sharedserve size``: a fleet plan from bench reports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sharedserve.cli._app import app

__all__: list[str] = []


@app.command()
def size(
    fleet: Annotated[
        Path, typer.Option(help="Fleet file (YAML or JSON): the GPU, nodes and models to serve.")
    ],
    out: Annotated[Path, typer.Option(help="Directory for plan.json, plan.md and pack specs.")],
) -> None:
    """Plan how many GPUs a fleet of models needs, which models share which GPU, and what it
    costs against one model replica per GPU.

    Each model's profile is a `bench` report.json (a density sweep or a mix): its replicas are
    enough that each carries at most the utilisation target of the highest QPS per replica at
    which the profile met the model's P99 objective (at least min_replicas); each replica's GPU
    memory is the profile's NVML peak, else its cap, else the model's files. Replicas are packed
    best fit under three limits per GPU: memory with a context reserve each, busy share within
    the utilisation target, and no more replicas than any of its models was measured at. A
    model's min_replicas go on different GPUs. The lower bound on GPUs and how far the plan is
    above it are reported.

    Writes plan.json, plan.md and, when every model gives its files (model:), gpu-NNN.yaml:
    each GPU's share as a pack spec (`sharedserve pack --spec OUT/gpu-000.yaml`).
    """
    from rich.console import Console

    from sharedserve.size.run import plan_fleet

    plan = plan_fleet(fleet, out)
    console = Console()
    console.print(
        f"{plan['gpu_count']} GPUs ({plan['lower_bound_gpus']} at the least, "
        f"{plan['above_bound']}x), {plan['cost_per_month']:,.0f} a month; one replica per GPU: "
        f"{plan['baseline_gpu_count']} GPUs, {plan['baseline_cost_per_month']:,.0f} a month "
        f"(saving factor {plan['saving_factor']}x)",
        highlight=False,
    )
    for warning in plan["warnings"]:
        console.print(f"warning: {warning}", highlight=False)
    console.print(f"plan in {out}/plan.md", highlight=False)

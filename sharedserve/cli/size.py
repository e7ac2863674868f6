"""``sharedserve size``: a fleet plan from bench reports, and the check of one GPU's share."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sharedserve.cli._app import app, cpu_settings, exit_when_stopped, refuse_flags
from sharedserve.config import BenchSettings
from sharedserve.errors import ConfigError
from sharedserve.limits.affinity import AUTO

if TYPE_CHECKING:  # the plan's module loads pydantic's types: only once a plan is made
    from rich.table import Table

    from sharedserve.size.plan import Plan

__all__: list[str] = []


def _print_plan(plan: Plan, out: Path) -> None:
    from rich.console import Console

    console = Console()
    console.print(
        f"{plan.gpu_count} GPUs ({plan.lower_bound_gpus} at the least, "
        f"{plan.above_bound}x), {plan.cost_per_month:,.0f} a month; one replica per GPU: "
        f"{plan.baseline_gpu_count} GPUs, {plan.baseline_cost_per_month:,.0f} a month "
        f"(saving factor {plan.saving_factor}x)",
        highlight=False,
    )
    for warning in plan.warnings:
        console.print(f"warning: {warning}", highlight=False)
    console.print(f"plan in {out}/plan.md", highlight=False)


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _share(error: float | None) -> str:
    return "-" if error is None else f"{error:+.0%}"


def _runs_table(result: dict[str, Any]) -> Table:
    """Each model's runs on the same servers (``--repeat``), and how far they moved."""
    from rich.table import Table

    table = Table(title=f"{result['repeat']} runs on the same servers (the first is above)")
    for head in ("model", "p50 each run", "p50 spread", "p99 each run", "p99 spread"):
        table.add_column(head, justify="left" if head == "model" else "right")
    for m in result["models"]:
        table.add_row(
            m["model"],
            ", ".join(_figure(r["measured_p50_ms"]) for r in m["runs"]),
            _spread(m["spread_p50"]),
            ", ".join(_figure(r["measured_p99_ms"]) for r in m["runs"]),
            _spread(m["spread_p99"]),
        )
    return table


def _spread(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _print_verify(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"size --verify {result['spec']} ({result['protocol']})")
    heads = ("model", "QPS plan", "QPS meas", "err", "p50 pred", "p50 meas", "err",
             "p99 pred", "p99 meas", "err", "SLO", "held")  # fmt: skip
    for head in heads:
        table.add_column(head, justify="left" if head == "model" else "right")
    for m in result["models"]:
        table.add_row(
            m["model"], _figure(m["planned_qps"]), _figure(m["measured_qps"]),
            _share(m["qps_error"]), _figure(m["predicted_p50_ms"]),
            _figure(m["measured_p50_ms"]), _share(m["p50_error"]),
            _figure(m["predicted_p99_ms"]), _figure(m["measured_p99_ms"]),
            _share(m["p99_error"]), _figure(m["slo_p99_ms"]), "yes" if m["slo_met"] else "NO",
        )  # fmt: skip
    console = Console(width=max(120, Console().width))
    console.print(table)
    if result.get("repeat", 1) > 1:
        console.print(_runs_table(result))

    def say(text: str) -> None:
        console.print(text, highlight=False)

    say(f"Latencies in ms. {result['meaning']}")
    say(f"Protocol: {result['protocol']}, {result['protocol_source']}.")
    c = result["conditions"]
    stable = {True: "stable", False: "NOT stable", None: "stability not judged"}[c["stable"]]
    late = "-" if c["late_share"] is None else f"{c['late_share']:.1%}"
    say(
        f"Measurement: {stable}; sent late {late}; load average {_figure(c['load_before'])} "
        f"before, {_figure(c['load_after'])} after, on {c['cores']} cores."
    )
    say(_repeats(result))
    for flag in result["flags"]:
        say(f"(!) {flag}")
    held = "every objective held" if result["held"] else "an objective did NOT hold"
    say(f"{held}; {result['verdict']}; the bench report is {result['report']}")
    for step in result["next_steps"]:
        say(f"next: {step}")


def _repeats(result: dict[str, Any]) -> str:
    """Whether the measurement repeats, in a line: the runs, the spreads against their limits."""
    runs = result.get("repeat", 1)
    if runs == 1:
        return "Repeats: one run (--repeat N measures N times on the same servers)."
    spread, limit = result["repeat_spread"], result["repeat_targets"]
    said = {True: "it repeats", False: "it does NOT repeat", None: "not judged"}[result["repeats"]]
    return (
        f"Repeats: {runs} runs on the same servers (the errors above are the first's); the "
        f"most a model moved from the first: p50 "
        f"{_spread(spread['p50'])}, p99 {_spread(spread['p99'])} (within {limit['p50']:.0%} "
        f"and {limit['p99']:.0%} to repeat): {said}."
    )


_Fleet = Annotated[
    Path | None,
    typer.Option(
        help="Fleet file (YAML or JSON): the GPU, nodes and models to serve.",
        show_default="none: give --fleet or --verify",
    ),
]
_Out = Annotated[
    Path | None,
    typer.Option(
        help="Directory for the plan (plan.json, plan.md, plan.html, k8s.yaml, pack specs), or "
        "for --verify's report.",
        show_default="required with --fleet; with --verify, verify-NAME beside the spec",
    ),
]
_Verify = Annotated[
    Path | None,
    typer.Option(
        help="A GPU's pack spec from a plan (OUT/gpu-NNN.yaml): run that share here at its "
        "planned rates and compare with the plan.",
        show_default="none",
    ),
]
_Corrections = Annotated[
    list[Path] | None,
    typer.Option(
        help="--fleet: a verify.json of `size --verify` (repeat for several GPUs): multiply each "
        "verified model's predicted p50 and p99 by measured over predicted there (the largest "
        "factor where several GPUs ran it), and re-plan a model whose corrected p99 is over its "
        "objective (out of its shared server, more replicas, fewer processes a GPU). A file "
        "whose run was not trustworthy is refused.",
        show_default="none: predictions as modelled",
        metavar="VERIFY.json",
    ),
]
_Duration = Annotated[
    float | None,
    typer.Option(help="--verify: seconds measured.", show_default=f"{BenchSettings.duration_s:g}"),
]
_Warmup = Annotated[
    float | None,
    typer.Option(
        help="--verify: seconds of load first.", show_default=f"{BenchSettings.warmup_s:g}"
    ),
]
_Repeat = Annotated[
    int | None,
    typer.Option(
        help="--verify: measure the share this many times in a row on the same started "
        "servers (each with its own warm-up), to see whether the measurement repeats: each "
        "model's runs and spread (the most a later run moved from the first) are printed and "
        "in verify.json; errors are of the first run.",
        show_default=f"{BenchSettings.repeat}",
    ),
]
_FakeGpus = Annotated[
    Path | None,
    typer.Option(
        help="--verify: simulated GPUs (a JSON inventory: docs/fake-gpus.md), for tests.",
        show_default="none: real GPUs through NVML",
    ),
]

_ServerCpus = Annotated[
    str | None,
    typer.Option(
        help="--verify: the servers' CPUs, as for bench (auto, all or a list such as 0-2).",
        show_default="auto: all but the load generator's",
    ),
]
_LoadgenCpus = Annotated[
    str | None,
    typer.Option(
        help="--verify: the load generator's CPUs, as for bench (auto, all or a list).",
        show_default="auto: the last quarter, at least one, on 2 or more CPUs",
    ),
]


@app.command()
def size(
    fleet: _Fleet = None,
    out: _Out = None,
    verify: _Verify = None,
    corrections: _Corrections = None,
    duration: _Duration = None,
    warmup: _Warmup = None,
    repeat: _Repeat = None,
    fake_gpus: _FakeGpus = None,
    server_cpus: _ServerCpus = None,
    loadgen_cpus: _LoadgenCpus = None,
) -> None:
    """Plan how many GPUs a fleet of models needs, which models share which GPU, and what it
    costs against one model replica per GPU; or check one GPU's share of a plan by running it.

    Each model's profile is a `bench` report.json (a density sweep or a mix): its replicas are
    enough that each carries at most the utilisation target of the highest QPS per replica at
    which the profile met the model's P99 objective (at least min_replicas); each replica's GPU
    memory is the profile's NVML peak, else its cap, else the model's files. Replicas are packed
    best fit under three limits per GPU: memory with a context reserve each, busy share within
    the utilisation target, and no more replicas than any of its models was measured at. A
    model's min_replicas go on different GPUs, and GPUs are dealt out to nodes so that they land
    on different nodes too. Each replica's p99 is predicted from its profile's sequential row at
    its GPU's replica count. The lower bound on GPUs and how far the plan is above it are
    reported.

    Writes plan.json, plan.md, plan.html, k8s.yaml (a Deployment and Service per dedicated model
    and per shared server, as `k8s render --spec` renders them: each pod asks for its planned
    share of a GPU, the larger of its memory and its busy share over the target, in vGPUs or,
    with kubernetes: {dra: true}, as DRA claims for memory and compute; pods the plan put apart
    carry anti-affinity or a spread over nodes) and, when every model gives its files (model:),
    gpu-NNN.yaml: each GPU's share as a pack spec (`sharedserve pack --spec OUT/gpu-000.yaml`).

    --verify OUT/gpu-NNN.yaml runs that share on this host, shared servers included (`bench
    --spec` at scale 1, open loop, each model at its planned requests/s, over the protocol its
    profile was measured with) and prints planned against measured QPS, p50 and p99 per model,
    each error (predicted - measured) / measured (negative: the plan was optimistic), whether
    each objective held, whether the measurement can be trusted (the run's stability, the load
    generator's lateness and CPU, the host's load average) and, with --repeat N (N runs on the
    same servers), whether it repeats, and what to do next; exit 1 when an objective did not
    hold. It writes OUT/verify.json, then the plan's plan.md and plan.html again with a
    "Predicted against measured" section (a table; in plan.html also a plot of predicted
    against measured p99) from every verify-*/verify.json beside the plan and this one. As in
    `bench`, the load generator runs on CPUs of its own (--loadgen-cpus) and the servers on the
    rest (--server-cpus).

    --corrections OUT/verify-gpu-NNN/verify.json (with --fleet) plans again with each verified
    model's predictions corrected by what that run measured: the loop is size, size --verify,
    size --corrections, size --verify. plan.json's correction and plan.md's Corrections table
    say by how much, from which file, and what was re-planned.
    """
    if (fleet is None) == (verify is None):
        raise ConfigError("give --fleet (plan a fleet) or --verify (check a GPU's share)")
    if verify is not None:
        refuse_flags({"--corrections": corrections or None}, "for --fleet only", beside="--verify")
    if fleet is not None:
        refuse_flags(
            {
                "--duration": duration,
                "--warmup": warmup,
                "--repeat": repeat,
                "--fake-gpus": fake_gpus,
                "--server-cpus": server_cpus,
                "--loadgen-cpus": loadgen_cpus,
            },
            "for --verify only",
            beside="--fleet",
        )
        if out is None:
            raise ConfigError("--fleet needs --out, the plan's directory")
        from sharedserve.size.run import plan_fleet

        _print_plan(plan_fleet(fleet, out, corrections or []), out)
        return
    assert verify is not None
    cpus = cpu_settings(server_cpus or AUTO, loadgen_cpus or AUTO)
    _verify(verify, out, duration, warmup, fake_gpus,
            BenchSettings.repeat if repeat is None else repeat, cpus)  # fmt: skip


def _verify(
    spec: Path,
    out: Path | None,
    duration: float | None,
    warmup: float | None,
    fake_gpus: Path | None,
    repeat: int,
    cpus: dict[str, Any],
) -> None:
    """--verify: run the GPU's share here, print planned against measured, show it in the plan's
    pages; exit 1 when an objective did not hold."""
    from rich.console import Console

    from sharedserve.bench.run import run_stoppable
    from sharedserve.cli._replicas import replica_environment
    from sharedserve.size.plan import show_verified
    from sharedserve.size.verify import verify_gpu

    out_dir = out or spec.parent / f"verify-{spec.stem}"
    with exit_when_stopped():
        result = verify_gpu(
            spec,
            out_dir,
            duration_s=BenchSettings.duration_s if duration is None else duration,
            warmup_s=BenchSettings.warmup_s if warmup is None else warmup,
            fake_gpus=fake_gpus,
            environment=replica_environment(),
            command=("sharedserve", *sys.argv[1:]),
            repeat=repeat,
            run=lambda settings: run_stoppable(settings, Console(stderr=True)),
            cpus=cpus,
        )
    _print_verify(result)
    shown = show_verified(spec.parent, out_dir / "verify.json")
    left = f"; {shown.left_out} left out (another plan's, or unreadable)" if shown.left_out else ""
    Console().print(
        f"plan: {spec.parent / 'plan.html'} and plan.md show predicted against measured of "
        f"{len(shown.runs)} verify run{'s' if len(shown.runs) != 1 else ''}{left}",
        highlight=False,
    )
    if not result["held"]:
        raise typer.Exit(1)

"""``sharedserve pack``: many capped model servers on one host, supervised."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sharedserve.cli._app import PANEL_GPUS, FakeGpus, app
from sharedserve.cli._replicas import check_server_args, replica_environment, spec_entries
from sharedserve.config import PackEntry, PackSettings
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import ConfigError

__all__: list[str] = []

PANEL_REPLICAS = "Replicas: ports, logs, restarts"

_Model = Annotated[
    Path | None,
    typer.Option(help="Model base path, as for `serve --model`.", show_default="none: --spec"),
]
_Replicas = Annotated[
    int | None,
    typer.Option(help="Number of model servers to run.", show_default=str(PackEntry.replicas)),
]
_Spec = Annotated[
    Path | None,
    typer.Option(
        help="Pack spec (YAML or JSON): a mix of models, instead of --model.", show_default="none"
    ),
]
_Policy = Annotated[
    PlacementPolicy,
    typer.Option(
        help="Placement of replicas without a `gpu` on a host with several GPUs: bundle (fill a "
        "GPU first) or spread (least used GPU first), as the allocator's.",
        case_sensitive=False,
    ),
]
_Name = Annotated[
    str | None,
    typer.Option(
        help="Model name; replicas are NAME-0, NAME-1 and so on.", show_default="dir name"
    ),
]
_Gpu = Annotated[
    str | None,
    typer.Option(
        help="GPU to pack onto: NVML index or UUID.",
        show_default="lowest index",
        rich_help_panel=PANEL_GPUS,
    ),
]
_GpuMemoryFraction = Annotated[
    float | None,
    typer.Option(
        help="Cap per replica as a share of the GPU.",
        show_default="even split, see below",
        rich_help_panel=PANEL_GPUS,
    ),
]
_GpuMemoryMib = Annotated[
    int | None,
    typer.Option(
        help="Cap per replica in MiB (instead of a fraction).",
        show_default="none: the fraction",
        rich_help_panel=PANEL_GPUS,
    ),
]
_ContextReserveMib = Annotated[
    int,
    typer.Option(
        help="GPU memory kept outside each cap for the replica's CUDA context.",
        rich_help_panel=PANEL_GPUS,
    ),
]
_CpuLimit = Annotated[
    float | None,
    typer.Option(
        help="CPU quota per replica in cores (a cgroup each).",
        show_default="none: no quota",
        rich_help_panel=PANEL_GPUS,
    ),
]
_Host = Annotated[
    str, typer.Option(help="Address the replicas listen on.", rich_help_panel=PANEL_REPLICAS)
]
_BasePort = Annotated[
    int | None,
    typer.Option(
        help="Replica i gets REST port P+2i and gRPC P+2i+1.",
        show_default="free ports",
        rich_help_panel=PANEL_REPLICAS,
    ),
]
_TargetsOut = Annotated[
    Path | None,
    typer.Option(
        help="Targets file to write.",
        show_default="LOG_DIR/targets.json",
        rich_help_panel=PANEL_REPLICAS,
    ),
]
_LogDir = Annotated[
    Path | None,
    typer.Option(
        help="Where replica logs go; kept after the run.",
        show_default="a new temp directory, removed at a clean stop",
        rich_help_panel=PANEL_REPLICAS,
    ),
]
_KeepLogs = Annotated[
    bool,
    typer.Option(
        "--keep-logs",
        help="Keep the temp directory of replica logs after a clean stop (after a failure it "
        "is kept anyway, and its path logged).",
        rich_help_panel=PANEL_REPLICAS,
    ),
]
_StartTimeout = Annotated[
    float,
    typer.Option(
        help="Seconds a replica may take to become AVAILABLE.", rich_help_panel=PANEL_REPLICAS
    ),
]
_StopGrace = Annotated[
    float,
    typer.Option(
        help="Seconds from SIGTERM to SIGKILL on stop; each replica is told to drain and exit "
        "within 90% of it (serve --shutdown-grace).",
        rich_help_panel=PANEL_REPLICAS,
    ),
]
_MaxRestarts = Annotated[
    int,
    typer.Option(
        help="Restarts in a row after which a crashing replica is given up.",
        rich_help_panel=PANEL_REPLICAS,
    ),
]
_Live = Annotated[
    bool | None,
    typer.Option(help="Live table of replicas.", show_default="when stdout is a terminal"),
]
_DryRun = Annotated[
    bool,
    typer.Option(
        help="Print the placement (each replica's GPU, cap, reserve and CPU quota) and "
        "start nothing."
    ),
]


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def pack(
    ctx: typer.Context,
    model: _Model = None,
    replicas: _Replicas = None,
    spec: _Spec = None,
    policy: _Policy = PackSettings.placement_policy,
    name: _Name = PackEntry.name,
    gpu: _Gpu = PackEntry.gpu,
    gpu_memory_fraction: _GpuMemoryFraction = None,
    gpu_memory_mib: _GpuMemoryMib = None,
    context_reserve_mib: _ContextReserveMib = PackSettings.context_reserve_mib,
    cpu_limit: _CpuLimit = PackEntry.cpu_limit_cores,
    host: _Host = PackSettings.host,
    base_port: _BasePort = PackSettings.base_port,
    targets_out: _TargetsOut = PackSettings.targets_out,
    log_dir: _LogDir = PackSettings.log_dir,
    keep_logs: _KeepLogs = PackSettings.keep_logs,
    fake_gpus: FakeGpus = PackSettings.fake_gpus,
    start_timeout: _StartTimeout = PackSettings.start_timeout_s,
    stop_grace: _StopGrace = PackSettings.stop_grace_s,
    max_restarts: _MaxRestarts = PackSettings.max_restarts,
    live: _Live = None,
    dry_run: _DryRun = False,
) -> None:
    """Run N capped `sharedserve serve` replicas of one model (or a mix, --spec) on this host and
    keep them up.

    Each replica gets the env contract the allocator would give it on Kubernetes (its GPU's
    UUID, SHAREDSERVE_GPU_MEMORY_FRACTION and _MIB) and, with --cpu-limit, its own CPU cgroup
    (v2 cpu.max or v1 cpu.cfs_quota_us). Where no cgroup can be written the servers are told the
    limit and size their threads to it, and the quota is reported as NOT enforced.

    Default GPU cap: an even split that keeps --context-reserve-mib (704 MiB, as measured on
    an H200) per replica for its CUDA context, which the framework's memory cap does not cover:
    cap = (GPU memory - N x 704 MiB) / N. A pack that cannot fit (N x (cap + reserve) over
    the GPU's memory, or a cap smaller than the model's weights) is refused before anything
    starts.

    Once every replica is AVAILABLE the targets file (the format `sharedserve bench --targets`
    reads) is written. A replica that dies is restarted on the same ports with exponential
    backoff (1, 2, 4 ... 30 s). Ctrl-C or SIGTERM stops every replica, removes the cgroups, the
    targets file and the temporary log directory (--keep-logs keeps it), and exits 0.

    Options after the known ones are passed to every `serve`, e.g. --enable-batching
    --max-batch-size 8.

    --spec FILE runs a mix: a `models:` list of entries (model, name, replicas, gpu,
    gpu_memory_mib or gpu_memory_fraction, cpu_limit, serve_args, slo_p99_ms, weight; a key at
    the top level is every entry's default). Entries without a cap share what their GPU has left
    in proportion to their model's size on disk; entries without a gpu are placed by --policy.
    """
    from sharedserve.pack.run import run_pack

    settings = PackSettings(
        entries=_entries(
            list(ctx.args),
            model,
            replicas,
            spec,
            name,
            gpu,
            gpu_memory_fraction,
            gpu_memory_mib,
            cpu_limit,
        ),
        placement_policy=policy,
        context_reserve_mib=context_reserve_mib,
        host=host,
        base_port=base_port,
        targets_out=targets_out,
        log_dir=log_dir,
        keep_logs=keep_logs,
        fake_gpus=fake_gpus,
        environment=replica_environment(),
        start_timeout_s=start_timeout,
        stop_grace_s=stop_grace,
        max_restarts=max_restarts,
    )
    if dry_run:
        from sharedserve.pack.dry_run import dry_run as print_placement

        raise typer.Exit(print_placement(settings))
    raise typer.Exit(run_pack(settings, live=sys.stdout.isatty() if live is None else live))


def _entries(
    args: list[str],
    model: Path | None,
    replicas: int | None,
    spec: Path | None,
    name: str | None,
    gpu: str | None,
    gpu_memory_fraction: float | None,
    gpu_memory_mib: int | None,
    cpu_limit: float | None,
) -> tuple[PackEntry, ...]:
    """The spec's entries, or one of --model; ConfigError for one-model flags beside a spec."""
    from sharedserve.limits.gpu import parse_cap_request

    extra = check_server_args(args)
    if spec is not None:
        given = {
            "--model": model,
            "--replicas": replicas,
            "--name": name,
            "--gpu": gpu,
            "--gpu-memory-fraction": gpu_memory_fraction,
            "--gpu-memory-mib": gpu_memory_mib,
            "--cpu-limit": cpu_limit,
        }
        return spec_entries(spec, given, extra)
    if model is None:
        raise ConfigError("give --model (with --replicas) or --spec")
    entry = PackEntry(
        model_dir=model,
        replicas=PackEntry.replicas if replicas is None else replicas,
        name=name,
        gpu=gpu,
        cap=parse_cap_request(gpu_memory_fraction, gpu_memory_mib),
        cpu_limit_cores=cpu_limit,
        server_args=extra,
    )
    return (entry,)

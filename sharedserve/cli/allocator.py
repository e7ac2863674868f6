"""``sharedserve allocator``: the vGPU device plugin or the DRA driver the kubelet talks to."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sharedserve.allocator.allocation import GrantOptions
from sharedserve.allocator.dra.settings import DraSettings
from sharedserve.allocator.dra.slices import MAX_SLOTS, SliceOptions
from sharedserve.allocator.inventory import MAX_REPLICAS, Sizing
from sharedserve.allocator.settings import (
    CDI_KIND,
    DEFAULT_MPS_PIPE_DIR,
    AllocatorSettings,
    Api,
    format_xids,
    parse_xids,
)
from sharedserve.cli._app import DeprecatedVgpusPerGpu, app, renamed_flag
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import ConfigError

__all__: list[str] = []


_DEFAULT_IGNORED_XIDS = format_xids(AllocatorSettings.ignored_xids)


def _check_mode(api: Api, device_plugin_only: dict[str, bool], dra_only: dict[str, bool]) -> None:
    """Refuse a flag of the other mode, rather than ignore what the user asked for."""
    other = dra_only if api is Api.DEVICE_PLUGIN else device_plugin_only
    given = [flag for flag, set_ in other.items() if set_]
    if given:
        mode = (
            "--api dra" if api is Api.DEVICE_PLUGIN else "the device plugin (--api device-plugin)"
        )
        raise ConfigError(f"{', '.join(given)} only applies to {mode}")


# --help's panels (cli/_help.py).
_PANEL_MPS = "MPS and CDI"
_PANEL_PLUGIN = "Device plugin"
_PANEL_HEALTH = "Health and metrics"
_PANEL_DRA = "DRA"

_ApiOpt = Annotated[
    Api,
    typer.Option(
        help="device-plugin: vGPUs as the extended resource sharedserve.io/vgpu. dra: a DRA "
        "driver (gpu.sharedserve.io) publishing each GPU's memory as consumable capacity; pods "
        "ask for an amount in a ResourceClaim.",
        case_sensitive=False,
    ),
]
_VgpusPerGpu = Annotated[
    int | None,
    typer.Option(
        help=f"vGPUs per GPU, 1-{MAX_REPLICAS}.",
        show_default=f"{Sizing.vgpus_per_gpu}, unless --vgpu-memory-mib",
    ),
]
_VgpuMemoryMib = Annotated[
    int | None,
    typer.Option(
        help="Memory per vGPU in MiB, instead of --vgpus-per-gpu: each GPU advertises as many "
        "vGPUs as its memory holds, so cards of different sizes get different counts.",
        show_default="off: --vgpus-per-gpu per GPU",
    ),
]
_Policy = Annotated[
    PlacementPolicy,
    typer.Option(
        help="GetPreferredAllocation: bundle fills the fullest GPU that fits (keeps whole GPUs "
        "free for big requests); spread picks the least-loaded GPU.",
        case_sensitive=False,
    ),
]
_AllowMultiGpu = Annotated[
    bool,
    typer.Option(help="Allow a container vGPUs on several GPUs (env values become one per GPU)."),
]
_Cdi = Annotated[
    bool,
    typer.Option(
        help=f"Also name each GPU as a CDI device ({CDI_KIND}=<uuid>).", rich_help_panel=_PANEL_MPS
    ),
]
_Mps = Annotated[
    bool,
    typer.Option(
        help="CUDA MPS: set per-pod thread percentage and pinned memory limit, mount the MPS "
        "pipe directory. Needs an MPS control daemon on the node.",
        rich_help_panel=_PANEL_MPS,
    ),
]
_MpsPipeDir = Annotated[
    Path,
    typer.Option(
        help="MPS control daemon's pipe directory, the same path on the host, in this container "
        "and in model containers. vGPUs are Unhealthy while the daemon's pid file is missing "
        "from it.",
        rich_help_panel=_PANEL_MPS,
    ),
]
_MpsShmDir = Annotated[
    Path | None,
    typer.Option(
        help="With --mps: host directory the MPS daemon uses as /dev/shm, mounted as each model "
        "container's /dev/shm.",
        show_default="none: /dev/shm is not shared",
        rich_help_panel=_PANEL_MPS,
    ),
]
_DevicePluginDir = Annotated[
    Path,
    typer.Option(
        help="Directory with the kubelet's kubelet.sock; ours goes there too.",
        rich_help_panel=_PANEL_PLUGIN,
    ),
]
_ResourceName = Annotated[
    str, typer.Option(help="Extended resource name pods request.", rich_help_panel=_PANEL_PLUGIN)
]
_HealthInterval = Annotated[
    float, typer.Option(help="Seconds between GPU health probes.", rich_help_panel=_PANEL_HEALTH)
]
_IgnoredXids = Annotated[
    str,
    typer.Option(
        help="XID errors that leave a GPU healthy, comma-separated (NVIDIA's device plugin's "
        "application-error list by default; empty: none).",
        rich_help_panel=_PANEL_HEALTH,
    ),
]
_XidRecoveryProbes = Annotated[
    int,
    typer.Option(
        help="Passing probes a GPU needs after a critical XID to recover.",
        rich_help_panel=_PANEL_HEALTH,
    ),
]
_MetricsPort = Annotated[
    int,
    typer.Option(
        help="Port for Prometheus /metrics; 0 turns metrics off.", rich_help_panel=_PANEL_HEALTH
    ),
]
_MetricsHost = Annotated[
    str, typer.Option(help="Address /metrics listens on.", rich_help_panel=_PANEL_HEALTH)
]
_NodeName = Annotated[
    str | None,
    typer.Option(
        envvar="NODE_NAME",
        help="DRA: this node's name (set NODE_NAME from the pod's spec.nodeName).",
        show_default="$NODE_NAME",
        rich_help_panel=_PANEL_DRA,
    ),
]
_Kubeconfig = Annotated[
    Path | None,
    typer.Option(
        help="DRA: kubeconfig for the API server.",
        show_default="in-cluster service account",
        rich_help_panel=_PANEL_DRA,
    ),
]
_DraPluginDir = Annotated[
    Path,
    typer.Option(
        help="DRA: directory for our DRA socket and claim checkpoint.", rich_help_panel=_PANEL_DRA
    ),
]
_PluginRegistryDir = Annotated[
    Path,
    typer.Option(
        help="DRA: the kubelet's plugin registry (registration socket).", rich_help_panel=_PANEL_DRA
    ),
]
_CdiDir = Annotated[
    Path,
    typer.Option(
        help="DRA: where CDI specs of prepared claims are written.", rich_help_panel=_PANEL_DRA
    ),
]
_Slots = Annotated[
    int | None,
    typer.Option(
        help=f"DRA without consumable capacity: publish each GPU as N (1-{MAX_SLOTS}) exclusive "
        "devices of an equal share of its memory.",
        show_default="off: one shared device per GPU, memory as consumable capacity",
        rich_help_panel=_PANEL_DRA,
    ),
]
_MemoryStepMib = Annotated[
    int,
    typer.Option(
        help="DRA: smallest memory a claim gets, in MiB; requests round up to a multiple.",
        rich_help_panel=_PANEL_DRA,
    ),
]
_FakeGpus = Annotated[
    Path | None,
    typer.Option(
        help="Simulated GPUs instead of NVML (a JSON inventory: docs/fake-gpus.md, "
        "`sharedserve schema fake-gpus`), re-read on every probe; for tests.",
        show_default="none: real GPUs through NVML",
    ),
]


@app.command()
def allocator(
    api: _ApiOpt = AllocatorSettings.api,
    vgpus_per_gpu: _VgpusPerGpu = None,
    # --vgpus-per-gpu's old name, kept so DaemonSets written for it work, with a warning.
    replicas: DeprecatedVgpusPerGpu = None,
    vgpu_memory_mib: _VgpuMemoryMib = None,
    policy: _Policy = AllocatorSettings.policy,
    allow_multi_gpu: _AllowMultiGpu = GrantOptions.allow_multi_gpu,
    cdi: _Cdi = False,
    mps: _Mps = False,
    mps_pipe_dir: _MpsPipeDir = DEFAULT_MPS_PIPE_DIR,
    mps_shm_dir: _MpsShmDir = GrantOptions.mps_shm_dir,
    device_plugin_dir: _DevicePluginDir = AllocatorSettings.device_plugin_dir,
    resource_name: _ResourceName = AllocatorSettings.resource_name,
    health_interval: _HealthInterval = AllocatorSettings.health_interval_s,
    ignored_xids: _IgnoredXids = _DEFAULT_IGNORED_XIDS,
    xid_recovery_probes: _XidRecoveryProbes = AllocatorSettings.xid_recovery_probes,
    metrics_port: _MetricsPort = AllocatorSettings.metrics_port,
    metrics_host: _MetricsHost = AllocatorSettings.metrics_host,
    node_name: _NodeName = DraSettings.node_name,
    kubeconfig: _Kubeconfig = DraSettings.kubeconfig,
    dra_plugin_dir: _DraPluginDir = DraSettings.plugin_dir,
    plugin_registry_dir: _PluginRegistryDir = DraSettings.registry_dir,
    cdi_dir: _CdiDir = DraSettings.cdi_dir,
    slots: _Slots = SliceOptions.slots,
    memory_step_mib: _MemoryStepMib = SliceOptions.memory_step_mib,
    fake_gpus: _FakeGpus = AllocatorSettings.fake_gpus,
) -> None:
    """Run the vGPU allocator: a kubelet device plugin (API v1beta1) advertising vGPUs, or,
    with --api dra, a DRA driver publishing GPU memory as consumable capacity.

    Each GPU is advertised as --vgpus-per-gpu vGPUs (or as many --vgpu-memory-mib shares as it
    holds). A pod that requests sharedserve.io/vgpu gets, through Allocate, the physical GPU
    (NVIDIA_VISIBLE_DEVICES) and its share of memory (SHAREDSERVE_GPU_MEMORY_FRACTION and
    SHAREDSERVE_GPU_MEMORY_MIB), which `sharedserve serve` applies. Unhealthy GPUs (probe
    failure, critical XID) are reported to the kubelet and come back when they pass again.
    Stops cleanly on SIGTERM.

    With --api dra, each GPU is one device of this node's ResourceSlice (driver
    gpu.sharedserve.io) whose memory many claims share; the scheduler does the arithmetic. A
    prepared claim gets a CDI spec carrying the same env contract, with the amount of memory the
    claim asked for. Needs --node-name, a DRA-enabled cluster and CDI in the container runtime.
    """
    settings = _settings(**locals())  # every flag, by its parameter's name
    from sharedserve.allocator.run import run

    raise typer.Exit(run(settings))


def _settings(
    *,
    api: Api,
    vgpus_per_gpu: int | None,
    replicas: int | None,
    vgpu_memory_mib: int | None,
    policy: PlacementPolicy,
    allow_multi_gpu: bool,
    cdi: bool,
    mps: bool,
    mps_pipe_dir: Path,
    mps_shm_dir: Path | None,
    device_plugin_dir: Path,
    resource_name: str,
    health_interval: float,
    ignored_xids: str,
    xid_recovery_probes: int,
    metrics_port: int,
    metrics_host: str,
    node_name: str | None,
    kubeconfig: Path | None,
    dra_plugin_dir: Path,
    plugin_registry_dir: Path,
    cdi_dir: Path,
    slots: int | None,
    memory_step_mib: int,
    fake_gpus: Path | None,
) -> AllocatorSettings:
    """The flags as settings; ConfigError for a flag of the other mode, or two that clash."""
    per_gpu_flag, per_gpu = renamed_flag("--vgpus-per-gpu", vgpus_per_gpu, "--replicas", replicas)
    _check_mode(
        api,
        {
            per_gpu_flag: per_gpu is not None,
            "--vgpu-memory-mib": vgpu_memory_mib is not None,
            "--policy": policy is not AllocatorSettings.policy,
            "--allow-multi-gpu": allow_multi_gpu,
            "--mps": mps,
            "--resource-name": resource_name != AllocatorSettings.resource_name,
            "--device-plugin-dir": device_plugin_dir != AllocatorSettings.device_plugin_dir,
        },
        {
            "--kubeconfig": kubeconfig is not None,
            "--dra-plugin-dir": dra_plugin_dir != DraSettings.plugin_dir,
            "--plugin-registry-dir": plugin_registry_dir != DraSettings.registry_dir,
            "--cdi-dir": cdi_dir != DraSettings.cdi_dir,
            "--slots": slots is not None,
            "--memory-step-mib": memory_step_mib != SliceOptions.memory_step_mib,
        },
    )
    if per_gpu is not None and vgpu_memory_mib is not None:
        raise ConfigError(f"give {per_gpu_flag} or --vgpu-memory-mib, not both")
    return AllocatorSettings(
        api=api,
        dra=DraSettings(
            node_name=node_name,
            kubeconfig=kubeconfig,
            plugin_dir=dra_plugin_dir,
            registry_dir=plugin_registry_dir,
            cdi_dir=cdi_dir,
            slices=SliceOptions(slots=slots, memory_step_mib=memory_step_mib),
        ),
        sizing=Sizing(
            vgpus_per_gpu=Sizing.vgpus_per_gpu if per_gpu is None else per_gpu,
            vgpu_memory_mib=vgpu_memory_mib,
        ),
        policy=policy,
        grant=GrantOptions(
            allow_multi_gpu=allow_multi_gpu,
            cdi_kind=CDI_KIND if cdi else None,
            mps_pipe_dir=mps_pipe_dir if mps else None,
            mps_shm_dir=mps_shm_dir,
        ),
        device_plugin_dir=device_plugin_dir,
        resource_name=resource_name,
        health_interval_s=health_interval,
        ignored_xids=parse_xids(ignored_xids),
        xid_recovery_probes=xid_recovery_probes,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        fake_gpus=fake_gpus,
    )

"""``sharedserve allocator``: the vGPU device plugin or the DRA driver the kubelet talks to."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sharedserve.allocator.allocation import GrantOptions
from sharedserve.allocator.dra.settings import (
    DEFAULT_CDI_DIR,
    DEFAULT_PLUGIN_DIR,
    DEFAULT_REGISTRY_DIR,
    DraSettings,
)
from sharedserve.allocator.dra.slices import MAX_SLOTS, SliceOptions
from sharedserve.allocator.health_state import DEFAULT_IGNORED_XIDS
from sharedserve.allocator.inventory import MAX_REPLICAS, Sizing
from sharedserve.allocator.settings import (
    DEFAULT_DEVICE_PLUGIN_DIR,
    DEFAULT_MPS_PIPE_DIR,
    DEFAULT_RESOURCE_NAME,
    AllocatorSettings,
    Api,
)
from sharedserve.cli._app import app
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import ConfigError

__all__: list[str] = []

_DEFAULT_REPLICAS = Sizing().replicas
# NVIDIA's container toolkit generates CDI specs of this kind, naming each GPU by its UUID too.
_CDI_KIND = "nvidia.com/gpu"


def _parse_xids(text: str) -> frozenset[int]:
    xids = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if not part.isdigit():
            raise ConfigError(f"--ignored-xids must be comma-separated XID numbers, got {text!r}")
        xids.add(int(part))
    return frozenset(xids)


def _check_mode(api: Api, device_plugin_only: dict[str, bool], dra_only: dict[str, bool]) -> None:
    """Refuse a flag of the other mode, rather than ignore what the user asked for."""
    other = dra_only if api is Api.DEVICE_PLUGIN else device_plugin_only
    given = [flag for flag, set_ in other.items() if set_]
    if given:
        mode = (
            "--api dra" if api is Api.DEVICE_PLUGIN else "the device plugin (--api device-plugin)"
        )
        raise ConfigError(f"{', '.join(given)} only applies to {mode}")


@app.command()
def allocator(
    api: Annotated[
        Api,
        typer.Option(
            help="device-plugin: vGPUs as the extended resource sharedserve.io/vgpu. dra: a "
            "DRA driver (gpu.sharedserve.io) publishing each GPU's memory as consumable "
            "capacity; pods ask for an amount in a ResourceClaim.",
            case_sensitive=False,
        ),
    ] = Api.DEVICE_PLUGIN,
    replicas: Annotated[
        int | None,
        typer.Option(
            help=f"vGPUs per GPU, 1-{MAX_REPLICAS}.",
            show_default=f"{_DEFAULT_REPLICAS}, unless --vgpu-memory-mib",
        ),
    ] = None,
    vgpu_memory_mib: Annotated[
        int | None,
        typer.Option(
            help="Memory per vGPU in MiB, instead of --replicas: each GPU advertises as many "
            "vGPUs as its memory holds, so cards of different sizes get different counts.",
            show_default="off: --replicas per GPU",
        ),
    ] = None,
    policy: Annotated[
        PlacementPolicy,
        typer.Option(
            help="GetPreferredAllocation: bundle fills the fullest GPU that fits (keeps whole "
            "GPUs free for big requests); spread picks the least-loaded GPU.",
            case_sensitive=False,
        ),
    ] = PlacementPolicy.BUNDLE,
    allow_multi_gpu: Annotated[
        bool,
        typer.Option(
            help="Allow a container vGPUs on several GPUs (env values become one per GPU)."
        ),
    ] = False,
    cdi: Annotated[
        bool, typer.Option(help=f"Also name each GPU as a CDI device ({_CDI_KIND}=<uuid>).")
    ] = False,
    mps: Annotated[
        bool,
        typer.Option(
            help="CUDA MPS: set per-pod thread percentage and pinned memory limit, mount the "
            "MPS pipe directory. Needs an MPS control daemon on the node."
        ),
    ] = False,
    mps_pipe_dir: Annotated[
        Path,
        typer.Option(
            help="MPS control daemon's pipe directory, the same path on the host, in this "
            "container and in model containers. vGPUs are Unhealthy while the daemon's pid file "
            "is missing from it."
        ),
    ] = DEFAULT_MPS_PIPE_DIR,
    mps_shm_dir: Annotated[
        Path | None,
        typer.Option(
            help="With --mps: host directory the MPS daemon uses as /dev/shm, mounted as each "
            "model container's /dev/shm.",
            show_default="none: /dev/shm is not shared",
        ),
    ] = None,
    device_plugin_dir: Annotated[
        Path, typer.Option(help="Directory with the kubelet's kubelet.sock; ours goes there too.")
    ] = DEFAULT_DEVICE_PLUGIN_DIR,
    resource_name: Annotated[
        str, typer.Option(help="Extended resource name pods request.")
    ] = DEFAULT_RESOURCE_NAME,
    health_interval: Annotated[
        float, typer.Option(help="Seconds between GPU health probes.")
    ] = 10.0,
    ignored_xids: Annotated[
        str,
        typer.Option(
            help="XID errors that leave a GPU healthy, comma-separated (NVIDIA's device "
            "plugin's application-error list by default; empty: none)."
        ),
    ] = ",".join(str(x) for x in sorted(DEFAULT_IGNORED_XIDS)),
    xid_recovery_probes: Annotated[
        int, typer.Option(help="Passing probes a GPU needs after a critical XID to recover.")
    ] = 3,
    metrics_port: Annotated[
        int, typer.Option(help="Port for Prometheus /metrics; 0 turns metrics off.")
    ] = 0,
    metrics_host: Annotated[str, typer.Option(help="Address /metrics listens on.")] = "0.0.0.0",
    node_name: Annotated[
        str | None,
        typer.Option(
            envvar="NODE_NAME",
            help="DRA: this node's name (set NODE_NAME from the pod's spec.nodeName).",
            show_default="$NODE_NAME",
        ),
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="DRA: kubeconfig for the API server.",
            show_default="in-cluster service account",
        ),
    ] = None,
    dra_plugin_dir: Annotated[
        Path, typer.Option(help="DRA: directory for our DRA socket and claim checkpoint.")
    ] = DEFAULT_PLUGIN_DIR,
    plugin_registry_dir: Annotated[
        Path, typer.Option(help="DRA: the kubelet's plugin registry (registration socket).")
    ] = DEFAULT_REGISTRY_DIR,
    cdi_dir: Annotated[
        Path, typer.Option(help="DRA: where CDI specs of prepared claims are written.")
    ] = DEFAULT_CDI_DIR,
    slots: Annotated[
        int | None,
        typer.Option(
            help=f"DRA without consumable capacity: publish each GPU as N (1-{MAX_SLOTS}) "
            "exclusive devices of an equal share of its memory.",
            show_default="off: one shared device per GPU, memory as consumable capacity",
        ),
    ] = None,
    memory_step_mib: Annotated[
        int,
        typer.Option(
            help="DRA: smallest memory a claim gets, in MiB; requests round up to a multiple."
        ),
    ] = SliceOptions().memory_step_mib,
    fake_gpus: Annotated[
        Path | None,
        typer.Option(
            help="Simulated GPU inventory (JSON) instead of NVML, for tests.",
            show_default="none: real GPUs through NVML",
        ),
    ] = None,
) -> None:
    """Run the vGPU allocator: a kubelet device plugin (API v1beta1) advertising vGPUs, or,
    with --api dra, a DRA driver publishing GPU memory as consumable capacity.

    Each GPU is advertised as --replicas vGPUs (or as many --vgpu-memory-mib shares as it
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
    from sharedserve.allocator.run import run

    _check_mode(
        api,
        {
            "--replicas": replicas is not None,
            "--vgpu-memory-mib": vgpu_memory_mib is not None,
            "--policy": policy is not PlacementPolicy.BUNDLE,
            "--allow-multi-gpu": allow_multi_gpu,
            "--mps": mps,
            "--resource-name": resource_name != DEFAULT_RESOURCE_NAME,
            "--device-plugin-dir": device_plugin_dir != DEFAULT_DEVICE_PLUGIN_DIR,
        },
        {
            "--kubeconfig": kubeconfig is not None,
            "--dra-plugin-dir": dra_plugin_dir != DEFAULT_PLUGIN_DIR,
            "--plugin-registry-dir": plugin_registry_dir != DEFAULT_REGISTRY_DIR,
            "--cdi-dir": cdi_dir != DEFAULT_CDI_DIR,
            "--slots": slots is not None,
            "--memory-step-mib": memory_step_mib != SliceOptions().memory_step_mib,
        },
    )
    if replicas is not None and vgpu_memory_mib is not None:
        raise ConfigError("give --replicas or --vgpu-memory-mib, not both")
    settings = AllocatorSettings(
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
            replicas=_DEFAULT_REPLICAS if replicas is None else replicas,
            vgpu_memory_mib=vgpu_memory_mib,
        ),
        policy=policy,
        grant=GrantOptions(
            allow_multi_gpu=allow_multi_gpu,
            cdi_kind=_CDI_KIND if cdi else None,
            mps_pipe_dir=mps_pipe_dir if mps else None,
            mps_shm_dir=mps_shm_dir,
        ),
        device_plugin_dir=device_plugin_dir,
        resource_name=resource_name,
        health_interval_s=health_interval,
        ignored_xids=_parse_xids(ignored_xids),
        xid_recovery_probes=xid_recovery_probes,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        fake_gpus=fake_gpus,
    )
    settings.validate()
    raise typer.Exit(run(settings))

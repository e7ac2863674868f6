"""``sharedserve k8s``: Kubernetes manifests without hand-edited YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sharedserve.cli._app import DeprecatedVgpusPerGpu, app, refuse_flags, renamed_flag
from sharedserve.cli._replicas import check_server_args
from sharedserve.config import PackSettings
from sharedserve.errors import ConfigError
from sharedserve.k8s.render import ModelDeployment

__all__: list[str] = []


k8s_app = typer.Typer(
    help="Kubernetes manifests (the allocator, bench and examples are in k8s/ as kustomize).",
    no_args_is_help=True,
)
app.add_typer(k8s_app, name="k8s")

_DEFAULT_RESERVE = PackSettings.context_reserve_mib
# render --help's panels (cli/_help.py).
_PANEL_SPEC = "With --spec: how a GPU is cut"
_PANEL_POD = "A pod's GPU, CPU and memory"

_Image = Annotated[str, typer.Option(help="sharedserve image, e.g. REGISTRY/sharedserve:TAG.")]
_Model = Annotated[
    str | None,
    typer.Option(
        help="The model, as serve's --model takes it: its path (models/NAME; a version "
        "directory models/NAME/1 is read as serve reads it) or just NAME. NAME, the path's last "
        "part, names its URLs (/v1/models/NAME) and its directory on the claim, /models/NAME. "
        "The files are read only where the path exists here; the pod reads the claim's.",
        show_default="none: --spec",
    ),
]
_Spec = Annotated[
    Path | None,
    typer.Option(
        help="Pack spec (YAML or JSON, as for `pack --spec`): a Deployment and Service for each "
        "entry, instead of --model.",
        show_default="none: --model",
    ),
]
_GpuMemoryMib = Annotated[
    int | None,
    typer.Option(
        help="With --spec: one GPU's memory in MiB (nvidia-smi's memory.total), which the spec's "
        "plan shares out.",
        show_default="none: required with --spec",
        rich_help_panel=_PANEL_SPEC,
    ),
]
_VgpusPerGpu = Annotated[
    int | None,
    typer.Option(
        help="With --spec: vGPUs per GPU, the allocator's --vgpus-per-gpu.",
        show_default="none: this or --vgpu-memory-mib with --spec",
        rich_help_panel=_PANEL_SPEC,
    ),
]
_VgpuMemoryMib = Annotated[
    int | None,
    typer.Option(
        help="With --spec: memory per vGPU in MiB, the allocator's --vgpu-memory-mib.",
        show_default="none: this or --vgpus-per-gpu with --spec",
        rich_help_panel=_PANEL_SPEC,
    ),
]
_ContextReserveMib = Annotated[
    int | None,
    typer.Option(
        help="With --spec: GPU memory per replica kept outside its cap for its CUDA context, as "
        "for `pack`.",
        show_default=str(_DEFAULT_RESERVE),
        rich_help_panel=_PANEL_SPEC,
    ),
]
_Vgpu = Annotated[
    int | None,
    typer.Option(
        help="With --model: vGPUs per pod (sharedserve.io/vgpu); --spec sizes them.",
        show_default=str(ModelDeployment.vgpu),
        rich_help_panel=_PANEL_POD,
    ),
]
_Dra = Annotated[
    bool,
    typer.Option(
        "--dra",
        help="For the DRA driver gpu.sharedserve.io (`allocator --api dra`, k8s/overlays/dra) "
        "instead of the device plugin: each pod claims GPU memory through a "
        "ResourceClaimTemplate rather than asking for sharedserve.io/vgpu.",
        rich_help_panel=_PANEL_POD,
    ),
]
_GpuMemory = Annotated[
    str | None,
    typer.Option(
        help="With --dra --model: GPU memory each pod claims of one GPU (Kubernetes quantity, "
        "e.g. 6Gi), which also becomes the server's cap; --spec sizes it from its plan.",
        show_default="none: required with --dra --model",
        rich_help_panel=_PANEL_POD,
    ),
]
_Cpu = Annotated[
    str | None,
    typer.Option(
        help="With --model: CPU request and limit (Kubernetes quantity); --spec: each entry's "
        "cpu_limit.",
        show_default=ModelDeployment.cpu,
        rich_help_panel=_PANEL_POD,
    ),
]
_Memory = Annotated[
    str,
    typer.Option(
        help="Memory request and limit (Kubernetes quantity), of every model's pods.",
        rich_help_panel=_PANEL_POD,
    ),
]
_ModelPvc = Annotated[
    str, typer.Option(help="PersistentVolumeClaim with the models, mounted at /models.")
]
_Namespace = Annotated[str, typer.Option(help="Namespace.")]
_Replicas = Annotated[
    int | None,
    typer.Option(
        help="With --model: pods, each taking --vgpu vGPUs.",
        show_default=str(ModelDeployment.replicas),
    ),
]
_Name = Annotated[
    str | None,
    typer.Option(help="With --model: Deployment and Service name.", show_default="from --model"),
]
_RuntimeClass = Annotated[
    str | None,
    typer.Option(
        help="RuntimeClass, where the NVIDIA runtime is not the node's default.",
        show_default="none: the node's default runtime",
    ),
]
_AdminSecret = Annotated[
    str | None,
    typer.Option(
        help="An existing Secret whose `key` the pods read as their management key (serve "
        "--admin-key-file: the model repository API and reloads need it), instead of the Secret "
        "sharedserve-admin with a new random key that is otherwise emitted with the models.",
        show_default="none: emit sharedserve-admin with a new key",
    ),
]
_Out = Annotated[
    Path | None, typer.Option(help="Write here instead of stdout.", show_default="stdout")
]


@k8s_app.command("render")
def render(
    image: _Image,
    model: _Model = None,
    spec: _Spec = None,
    gpu_memory_mib: _GpuMemoryMib = None,
    vgpus_per_gpu: _VgpusPerGpu = None,
    replicas_per_gpu: DeprecatedVgpusPerGpu = None,
    vgpu_memory_mib: _VgpuMemoryMib = None,
    context_reserve_mib: _ContextReserveMib = None,
    vgpu: _Vgpu = None,
    dra: _Dra = False,
    gpu_memory: _GpuMemory = ModelDeployment.gpu_memory,
    cpu: _Cpu = None,
    memory: _Memory = ModelDeployment.memory,
    model_pvc: _ModelPvc = ModelDeployment.model_pvc,
    namespace: _Namespace = ModelDeployment.namespace,
    replicas: _Replicas = None,
    name: _Name = ModelDeployment.name,
    runtime_class: _RuntimeClass = ModelDeployment.runtime_class,
    admin_secret: _AdminSecret = None,
    out: _Out = None,
) -> None:
    """Print a ready Deployment and Service for one model (--model), or for every model of a
    pack spec (--spec), as YAML for `kubectl apply -f`.

    The pod asks for sharedserve.io/vgpu (the allocator injects the GPU memory cap), has CPU and
    memory requests equal to its limits (the server sizes its threads to the CPU quota), reads
    the model read-only from the claim, and is ready only once the model has loaded and warmed
    up.

    --dra renders for the DRA driver instead: no sharedserve.io/vgpu; a ResourceClaimTemplate
    per model, asking the DeviceClass gpu.sharedserve.io for --gpu-memory of one GPU's memory
    (consumable capacity), and each pod claims from it. With --spec, each claim is what the
    plan gives one replica plus --context-reserve-mib, and no vGPU size is given.

    --spec FILE renders each entry as `pack --spec FILE` would run it on one GPU of
    --gpu-memory-mib: replicas, name (default: the model's directory name, also its directory
    on the claim), cpu_limit (default 500m) and serve_args come from the entry, and each pod
    asks for the vGPUs that hold its replica's planned cap plus --context-reserve-mib, rounded
    up to the allocator's vGPU size (--vgpus-per-gpu or --vgpu-memory-mib, as the allocator
    runs). The plan reads each model's files for its size, so the models must be on disk where
    the spec says. --model, --vgpu, --cpu, --replicas and --name are the spec's and are refused
    with it; weight and slo_p99_ms are bench's; an entry's gpu is refused (the scheduler
    places pods).

    The management APIs (the model repository API, TF Serving's HandleReloadConfigRequest,
    changes under /sharedserve/v1/) need a key: each pod mounts a Secret's `key` read-only and
    passes it to serve --admin-key-file. The Secret sharedserve-admin, with a new random key,
    comes first in the output (the key is written nowhere else); --admin-secret NAME uses an
    existing Secret instead and emits none. Calls carry the key in the sharedserve-admin-key
    header (REST) or metadata (gRPC); an entry's serve_args may name another with
    --admin-header.
    """
    per_gpu_flag, per_gpu = renamed_flag(
        "--vgpus-per-gpu", vgpus_per_gpu, "--replicas-per-gpu", replicas_per_gpu
    )
    if gpu_memory is not None and not dra:
        raise ConfigError(
            "--gpu-memory is what a pod claims from the DRA driver: give --dra with it (the "
            "device plugin's pods ask for --vgpu vGPUs instead)"
        )
    # The ModelDeployment fields every model of the render shares.
    common: dict[str, Any] = dict(
        image=image, memory=memory, model_pvc=model_pvc, namespace=namespace,
        runtime_class=runtime_class,
    )  # fmt: skip
    if admin_secret is not None:
        common["admin_secret"] = admin_secret
    if spec is not None:
        refuse_flags(
            {
                "--model": model,
                "--vgpu": vgpu,
                "--cpu": cpu,
                "--replicas": replicas,
                "--name": name,
            },
            "these come from the spec (replicas, name, cpu_limit per entry; vGPUs from its plan)",
            beside="--spec",
        )
        cut = {per_gpu_flag: per_gpu, "--vgpu-memory-mib": vgpu_memory_mib}
        text = _render_spec(spec, gpu_memory_mib, cut, gpu_memory, context_reserve_mib, common, dra)
    elif model is None:
        raise ConfigError("give --model (one model) or --spec (a pack spec's models)")
    else:
        refuse_flags(
            {
                "--gpu-memory-mib": gpu_memory_mib,
                per_gpu_flag: per_gpu,
                "--vgpu-memory-mib": vgpu_memory_mib,
                "--context-reserve-mib": context_reserve_mib,
            },
            "for --spec only, whose pods they size from its plan; with --model, give "
            + ("--gpu-memory" if dra else "--vgpu"),
        )
        text = _render_model(model, name, vgpu, cpu, replicas, gpu_memory, common, dra=dra)
    _write(text, out)


def _render_spec(
    spec: Path,
    gpu_memory_mib: int | None,
    cut: dict[str, int | None],
    gpu_memory: str | None,
    context_reserve_mib: int | None,
    common: dict[str, Any],
    dra: bool,
) -> str:
    """``--spec``: the vGPU cut (or, with --dra, claims) from the flags, then the spec's render;
    ``cut``: the flags that cut GPUs into vGPUs (vGPUs per GPU, memory per vGPU), by name."""
    from sharedserve.k8s.mix import ClaimSize, VgpuSize
    from sharedserve.pack.manifests import planned_gpu_mib, render_spec, spec_vgpu_size

    size: VgpuSize | ClaimSize
    if dra:
        refuse_flags(
            {"--gpu-memory": gpu_memory, **cut},
            "each pod claims the GPU memory the spec's plan gives one replica plus its context "
            "reserve; the DRA driver cuts no vGPUs",
            beside="--dra --spec",
        )
        size = ClaimSize(planned_gpu_mib(gpu_memory_mib))
    else:
        (per_gpu_flag, per_gpu), (_, per_vgpu_mib) = cut.items()
        size = spec_vgpu_size(gpu_memory_mib, per_gpu, per_vgpu_mib, per_gpu_flag=per_gpu_flag)
    reserve = _DEFAULT_RESERVE if context_reserve_mib is None else context_reserve_mib
    return render_spec(
        spec, size, reserve, common, dra=dra, check_server_args=check_server_args,
        admin_secret="admin_secret" not in common,
    )  # fmt: skip


def _render_model(
    model: str,
    name: str | None,
    vgpu: int | None,
    cpu: str | None,
    replicas: int | None,
    gpu_memory: str | None,
    common: dict[str, Any],
    *,
    dra: bool,
) -> str:
    """``--model``: one Deployment and Service, asking for vGPUs or (--dra) for GPU memory."""
    from sharedserve.k8s.render import render_model_yaml

    if dra:
        refuse_flags(
            {"--vgpu": vgpu},
            "vGPUs are the device plugin's; a pod asks the DRA driver for --gpu-memory",
            beside="--dra",
        )
        if gpu_memory is None:
            raise ConfigError(
                "--dra --model needs --gpu-memory: the GPU memory each pod claims (e.g. 6Gi), "
                "also its cap. There is no default: a claim without it would take the driver's "
                "default, a whole GPU"
            )
    deployment = ModelDeployment(
        model=_model_name(model),
        name=name,
        vgpu=ModelDeployment.vgpu if vgpu is None else vgpu,
        cpu=ModelDeployment.cpu if cpu is None else cpu,
        replicas=ModelDeployment.replicas if replicas is None else replicas,
        gpu_memory=gpu_memory,
        **common,
    )
    return render_model_yaml(deployment, admin_secret="admin_secret" not in common)


def _model_name(model: str) -> str:
    """--model's name, as ``serve --model`` takes a path: a model on disk here is named as the
    server names it (a version directory by its parent); a path that is not here by its last
    part, which is what the pod finds on the claim; a bare NAME is itself."""
    path = Path(model).expanduser()
    if path.is_dir():
        from sharedserve.server import find_model  # reads the directory

        return find_model(path).name
    if path.name.isdigit():
        raise ConfigError(
            f"--model {model}: {path.name} is a version directory, not here to read; pass the "
            f"model's base path ({path.parent}) or its name"
        )
    return path.name or model


def _write(text: str, out: Path | None) -> None:
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as e:
        raise ConfigError(f"cannot write {out}: {e.strerror}") from e

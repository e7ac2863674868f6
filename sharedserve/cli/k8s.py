"""``sharedserve k8s``: Kubernetes manifests without hand-edited YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sharedserve.allocator.inventory import MAX_REPLICAS, Sizing, build_inventory
from sharedserve.cli._app import app, refuse_flags
from sharedserve.cli.pack import check_server_args
from sharedserve.config import PackSettings
from sharedserve.errors import ConfigError
from sharedserve.gpu.info import GpuInfo
from sharedserve.k8s.mix import ClaimSize, MixModel, VgpuSize, render_mix_yaml
from sharedserve.k8s.render import ModelDeployment, check_serve_args, render_model_yaml
from sharedserve.quantity import format_cpu
from sharedserve.server.model_source import find_model

__all__: list[str] = []

k8s_app = typer.Typer(
    help="Kubernetes manifests (the allocator, bench and examples are in k8s/ as kustomize).",
    no_args_is_help=True,
)
app.add_typer(k8s_app, name="k8s")

_DEFAULT_RESERVE = PackSettings.context_reserve_mib


@k8s_app.command("render")
def render(
    image: Annotated[str, typer.Option(help="sharedserve image, e.g. REGISTRY/sharedserve:TAG.")],
    model: Annotated[
        str | None,
        typer.Option(
            help="Model name: its URLs (/v1/models/NAME) and its directory /models/NAME.",
            show_default="none: --spec",
        ),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option(
            help="Pack spec (YAML or JSON, as for `pack --spec`): a Deployment and Service for "
            "each entry, instead of --model.",
            show_default="none: --model",
        ),
    ] = None,
    gpu_memory_mib: Annotated[
        int | None,
        typer.Option(
            help="With --spec: one GPU's memory in MiB (nvidia-smi's memory.total), which the "
            "spec's plan shares out.",
            show_default="none: required with --spec",
        ),
    ] = None,
    replicas_per_gpu: Annotated[
        int | None,
        typer.Option(
            help="With --spec: vGPUs per GPU, the allocator's --replicas.",
            show_default="none: this or --vgpu-memory-mib with --spec",
        ),
    ] = None,
    vgpu_memory_mib: Annotated[
        int | None,
        typer.Option(
            help="With --spec: memory per vGPU in MiB, the allocator's --vgpu-memory-mib.",
            show_default="none: this or --replicas-per-gpu with --spec",
        ),
    ] = None,
    context_reserve_mib: Annotated[
        int | None,
        typer.Option(
            help="With --spec: GPU memory per replica kept outside its cap for its CUDA "
            "context, as for `pack`.",
            show_default=str(_DEFAULT_RESERVE),
        ),
    ] = None,
    vgpu: Annotated[
        int | None,
        typer.Option(
            help="With --model: vGPUs per pod (sharedserve.io/vgpu); --spec sizes them.",
            show_default="1",
        ),
    ] = None,
    dra: Annotated[
        bool,
        typer.Option(
            "--dra",
            help="For the DRA driver gpu.sharedserve.io (`allocator --api dra`, "
            "k8s/overlays/dra) instead of the device plugin: each pod claims GPU memory "
            "through a ResourceClaimTemplate rather than asking for sharedserve.io/vgpu.",
        ),
    ] = False,
    gpu_memory: Annotated[
        str | None,
        typer.Option(
            help="With --dra --model: GPU memory each pod claims of one GPU (Kubernetes "
            "quantity, e.g. 6Gi), which also becomes the server's cap; --spec sizes it from "
            "its plan.",
            show_default="none: required with --dra --model",
        ),
    ] = None,
    cpu: Annotated[
        str | None,
        typer.Option(
            help="With --model: CPU request and limit (Kubernetes quantity); --spec: each "
            "entry's cpu_limit.",
            show_default="500m",
        ),
    ] = None,
    memory: Annotated[
        str,
        typer.Option(help="Memory request and limit (Kubernetes quantity), of every model's pods."),
    ] = "2Gi",
    model_pvc: Annotated[
        str, typer.Option(help="PersistentVolumeClaim with the models, mounted at /models.")
    ] = "sharedserve-models",
    namespace: Annotated[str, typer.Option(help="Namespace.")] = "sharedserve",
    replicas: Annotated[
        int | None,
        typer.Option(help="With --model: pods, each taking --vgpu vGPUs.", show_default="1"),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            help="With --model: Deployment and Service name.", show_default="from --model"
        ),
    ] = None,
    runtime_class: Annotated[
        str | None,
        typer.Option(
            help="RuntimeClass, where the NVIDIA runtime is not the node's default.",
            show_default="none: the node's default runtime",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Write here instead of stdout.", show_default="stdout")
    ] = None,
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
    up to the allocator's vGPU size (--replicas-per-gpu or --vgpu-memory-mib, as the allocator
    runs). The plan reads each model's files for its size, so the models must be on disk where
    the spec says. --model, --vgpu, --cpu, --replicas and --name are the spec's and are refused
    with it; weight and slo_p99_ms are bench's; an entry's gpu is refused (the scheduler
    places pods).
    """
    if gpu_memory is not None and not dra:
        raise ConfigError(
            "--gpu-memory is what a pod claims from the DRA driver: give --dra with it (the "
            "device plugin's pods ask for --vgpu vGPUs instead)"
        )
    common: dict[str, Any] = {
        "image": image,
        "memory": memory,
        "model_pvc": model_pvc,
        "namespace": namespace,
        "runtime_class": runtime_class,
    }
    if spec is not None:
        per_model = {
            "--model": model,
            "--vgpu": vgpu,
            "--cpu": cpu,
            "--replicas": replicas,
            "--name": name,
        }
        refuse_flags(
            per_model,
            "these come from the spec (replicas, name, cpu_limit per entry; vGPUs from its plan)",
            beside="--spec",
        )
        size: VgpuSize | ClaimSize
        if dra:
            refuse_flags(
                {
                    "--gpu-memory": gpu_memory,
                    "--replicas-per-gpu": replicas_per_gpu,
                    "--vgpu-memory-mib": vgpu_memory_mib,
                },
                "each pod claims the GPU memory the spec's plan gives one replica plus its "
                "context reserve; the DRA driver cuts no vGPUs",
                beside="--dra --spec",
            )
            size = ClaimSize(_plan_gpu_mib(gpu_memory_mib))
        else:
            size = _vgpu_size(gpu_memory_mib, replicas_per_gpu, vgpu_memory_mib)
        reserve = _DEFAULT_RESERVE if context_reserve_mib is None else context_reserve_mib
        text = _render_spec(spec, size, reserve, common, dra=dra)
    elif model is None:
        raise ConfigError("give --model (one model) or --spec (a pack spec's models)")
    else:
        planning = {
            "--gpu-memory-mib": gpu_memory_mib,
            "--replicas-per-gpu": replicas_per_gpu,
            "--vgpu-memory-mib": vgpu_memory_mib,
            "--context-reserve-mib": context_reserve_mib,
        }
        refuse_flags(
            planning,
            "for --spec only, whose pods they size from its plan; with --model, give "
            + ("--gpu-memory" if dra else "--vgpu"),
        )
        if dra:
            refuse_flags(
                {"--vgpu": vgpu},
                "vGPUs are the device plugin's; a pod asks the DRA driver for --gpu-memory",
                beside="--dra",
            )
            if gpu_memory is None:
                raise ConfigError(
                    "--dra --model needs --gpu-memory: the GPU memory each pod claims (e.g. "
                    "6Gi), also its cap. There is no default: a claim without it would take the "
                    "driver's default, a whole GPU"
                )
        deployment = ModelDeployment(
            model=model,
            name=name,
            vgpu=ModelDeployment.vgpu if vgpu is None else vgpu,
            cpu=ModelDeployment.cpu if cpu is None else cpu,
            replicas=ModelDeployment.replicas if replicas is None else replicas,
            gpu_memory=gpu_memory,
            **common,
        )
        text = render_model_yaml(deployment)
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as e:
        raise ConfigError(f"cannot write {out}: {e.strerror}") from e


def _vgpu_size(
    gpu_memory_mib: int | None, replicas_per_gpu: int | None, vgpu_memory_mib: int | None
) -> VgpuSize:
    """One GPU cut into vGPUs by the allocator's own inventory code, as its flags would cut it."""
    gpu_memory_mib = _plan_gpu_mib(gpu_memory_mib)
    if replicas_per_gpu is not None and vgpu_memory_mib is not None:
        raise ConfigError("give --replicas-per-gpu or --vgpu-memory-mib, not both")
    if replicas_per_gpu is not None:
        if not 1 <= replicas_per_gpu <= MAX_REPLICAS:
            raise ConfigError(
                f"--replicas-per-gpu must be in 1..{MAX_REPLICAS}, got {replicas_per_gpu}"
            )
        if replicas_per_gpu > gpu_memory_mib:
            raise ConfigError(
                f"--replicas-per-gpu {replicas_per_gpu} cuts a {gpu_memory_mib} MiB GPU into "
                "vGPUs of less than 1 MiB"
            )
        sizing = Sizing(vgpus_per_gpu=replicas_per_gpu)
        flag = f"--vgpus-per-gpu {replicas_per_gpu}"
    elif vgpu_memory_mib is not None:
        if vgpu_memory_mib > gpu_memory_mib:
            raise ConfigError(
                f"--vgpu-memory-mib {vgpu_memory_mib} is more than the GPU's {gpu_memory_mib} "
                "MiB: the allocator would advertise no vGPU on it"
            )
        sizing = Sizing(vgpu_memory_mib=vgpu_memory_mib)
        flag = f"--vgpu-memory-mib {vgpu_memory_mib}"
    else:
        raise ConfigError(
            "--spec needs the allocator's vGPU size: --replicas-per-gpu N where it runs with "
            "--replicas N, or --vgpu-memory-mib M where it runs with --vgpu-memory-mib M"
        )
    (cut,) = build_inventory([_planned_gpu(gpu_memory_mib)], sizing).gpus
    return VgpuSize(gpu_memory_mib, cut.vgpu_memory_mib, cut.replicas, flag)


def _plan_gpu_mib(gpu_memory_mib: int | None) -> int:
    """--gpu-memory-mib, which --spec needs for its plan."""
    if gpu_memory_mib is None:
        raise ConfigError(
            "--spec needs --gpu-memory-mib: one GPU's memory in MiB (nvidia-smi "
            "--query-gpu=memory.total --format=csv), which the plan shares among the replicas"
        )
    if gpu_memory_mib < 1:
        raise ConfigError(f"--gpu-memory-mib must be positive, got {gpu_memory_mib}")
    return gpu_memory_mib


def _planned_gpu(memory_mib: int) -> GpuInfo:
    # Named for the flag, which is how the plan's refusals then refer to it.
    return GpuInfo("GPU-k8s-render", 0, "--gpu-memory-mib", memory_mib)


def _render_spec(
    path: Path, size: VgpuSize | ClaimSize, reserve: int, common: dict[str, Any], *, dra: bool
) -> str:
    """The spec's models as manifests, sized from ``pack``'s plan of the spec on one GPU."""
    from sharedserve.pack.caps import PlanItem, plan_gpu
    from sharedserve.pack.prepare import footprint_mib  # pack's measure: pack's own plan
    from sharedserve.pack.spec import load_spec

    if reserve < 0:
        raise ConfigError(f"--context-reserve-mib must be 0 or more, got {reserve}")
    items, models = [], []
    for i, entry in enumerate(load_spec(path).entries):
        where = f"{path}: models[{i}] ({entry.name or entry.model_dir.name})"
        if entry.gpu is not None:
            raise ConfigError(
                f"{where}: gpu pins replicas to a GPU of one host; on Kubernetes the scheduler "
                "and the allocator place pods: leave it out for k8s render"
            )
        try:
            source = find_model(entry.model_dir)
        except ConfigError as e:
            raise ConfigError(
                f"{where}: {e.message}; k8s render reads the model's files for its size, which "
                "sets its share of the GPU: build or copy the model there first"
            ) from e
        name = entry.name or source.name
        where = f"{path}: models[{i}] ({name})"
        items.append(PlanItem(name, entry.replicas, entry.cap, footprint_mib(source.path)))
        cpu = ModelDeployment.cpu
        try:
            check_serve_args(entry.server_args)
            check_server_args(list(entry.server_args))
            if entry.cpu_limit_cores is not None:
                cpu = format_cpu(entry.cpu_limit_cores, "cpu_limit")
        except ConfigError as e:
            raise ConfigError(f"{where}: {e.message}") from e
        deployment = ModelDeployment(
            model=name,
            model_dir=source.name,
            replicas=entry.replicas,
            cpu=cpu,
            serve_args=entry.server_args,
            **common,
        )
        models.append((deployment, where))
    try:
        shares = plan_gpu(_planned_gpu(size.gpu_memory_mib), items, context_reserve_mib=reserve)
    except ConfigError as e:
        raise ConfigError(
            f"{path}: pods are sized from pack's plan of the spec on one GPU, which refuses it:\n"
            f"{e.message}"
        ) from e
    mix = []
    for (deployment, where), share in zip(models, shares, strict=True):
        assert share.mib is not None  # planned on a GPU of known size
        mix.append(MixModel(deployment, share.mib, where))
    command = "sharedserve k8s render --dra --spec" if dra else "sharedserve k8s render --spec"
    return render_mix_yaml(
        mix, size, context_reserve_mib=reserve, source=str(path), command=command
    )

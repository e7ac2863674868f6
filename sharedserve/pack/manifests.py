"""A pack spec's models as Kubernetes manifests (``k8s render --spec``), sized from ``pack``'s
own plan of the spec on one GPU.

Each pod gets what ``pack --spec`` would give one replica on a GPU of the given size: its cap
plus the context reserve, as vGPUs of the allocator's cut (``k8s.vgpus``), or with the DRA
driver as an amount of memory its claim asks for. The plan reads each model's files for its
size, so the models must be on disk where the spec says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sharedserve.config import PackEntry
from sharedserve.errors import ConfigError
from sharedserve.gpu.info import GpuInfo
from sharedserve.k8s.mix import ClaimSize, MixModel, VgpuSize, render_mix_yaml
from sharedserve.k8s.render import ModelDeployment, check_serve_args, image_note
from sharedserve.k8s.shared_server import SharedServerModelFiles, SharedServerPods
from sharedserve.k8s.vgpus import vgpu_cut
from sharedserve.quantity import format_cpu
from sharedserve.server import ModelSource, find_model
from sharedserve.vgpu_sizing import Sizing

__all__ = ["planned_gpu_mib", "render_spec", "spec_vgpu_size"]


def planned_gpu_mib(gpu_memory_mib: int | None) -> int:
    """``--gpu-memory-mib``, which ``--spec`` needs for its plan."""
    if gpu_memory_mib is None:
        raise ConfigError(
            "--spec needs --gpu-memory-mib: one GPU's memory in MiB (nvidia-smi "
            "--query-gpu=memory.total --format=csv), which the plan shares among the replicas"
        )
    if gpu_memory_mib < 1:
        raise ConfigError(f"--gpu-memory-mib must be positive, got {gpu_memory_mib}")
    return gpu_memory_mib


def spec_vgpu_size(
    gpu_memory_mib: int | None,
    vgpus_per_gpu: int | None,
    vgpu_memory_mib: int | None,
    *,
    per_gpu_flag: str = "--vgpus-per-gpu",
) -> VgpuSize:
    """One GPU cut into vGPUs as the allocator's flags would cut it; ``per_gpu_flag``: the flag
    that gave ``vgpus_per_gpu``, which refusals name."""
    memory = planned_gpu_mib(gpu_memory_mib)
    if vgpus_per_gpu is not None and vgpu_memory_mib is not None:
        raise ConfigError(f"give {per_gpu_flag} or --vgpu-memory-mib, not both")
    if vgpus_per_gpu is not None:
        sizing = Sizing(vgpus_per_gpu=vgpus_per_gpu)
    elif vgpu_memory_mib is not None:
        sizing = Sizing(vgpu_memory_mib=vgpu_memory_mib)
    else:
        raise ConfigError(
            "--spec needs the allocator's vGPU size: --vgpus-per-gpu N where it runs with "
            "--vgpus-per-gpu N, or --vgpu-memory-mib M where it runs with --vgpu-memory-mib M"
        )
    return vgpu_cut(memory, sizing, names=(per_gpu_flag, "--vgpu-memory-mib"))


def _planned_gpu(memory_mib: int) -> GpuInfo:
    # Named for the flag, which is how the plan's refusals then refer to it.
    return GpuInfo("GPU-k8s-render", 0, "--gpu-memory-mib", memory_mib)


def render_spec(
    path: Path,
    size: VgpuSize | ClaimSize,
    reserve: int,
    common: Mapping[str, Any],
    *,
    dra: bool,
    check_server_args: Callable[[list[str]], object],
    admin_secret: bool = True,
) -> str:
    """The spec's models as manifests; ``common``: the ModelDeployment fields every model shares
    (image, namespace, the management key's Secret...); ``check_server_args``: the CLI's check of
    an entry's ``serve_args`` against ``sharedserve serve``'s own options; ``admin_secret``: emit
    the Secret with a new key (``k8s.admin``)."""
    from sharedserve.pack.caps import EntryOnGpu, caps_on_gpu
    from sharedserve.pack.prepare import footprint_mib  # pack's measure: pack's own plan
    from sharedserve.pack.spec import load_spec

    if reserve < 0:
        raise ConfigError(f"--context-reserve-mib must be 0 or more, got {reserve}")
    items, models, frameworks = [], [], []
    entries = load_spec(path).entries
    shared = sum(e.is_shared_server for e in entries)
    for i, entry in enumerate(entries):
        if entry.is_shared_server:
            where = f"{path}: servers[{i}] ({entry.name})"
        else:
            where = f"{path}: models[{i - shared}] ({entry.name or entry.model_dir.name})"
        if entry.gpu is not None:
            raise ConfigError(
                f"{where}: gpu pins replicas to a GPU of one host; on Kubernetes the scheduler "
                "and the allocator place pods: leave it out for k8s render"
            )
        dirs = [m.model_dir for m in entry.models] if entry.is_shared_server else [entry.model_dir]
        try:
            sources = [find_model(d) for d in dirs]
        except ConfigError as e:
            raise ConfigError(
                f"{where}: {e.message}; k8s render reads the model's files for its size, which "
                "sets its share of the GPU: build or copy the model there first"
            ) from e
        frameworks += [s.framework for s in sources]
        source = sources[0]
        name = entry.name or source.name
        if not entry.is_shared_server:
            where = f"{path}: models[{i - shared}] ({name})"
        footprint = sum(footprint_mib(s.path) for s in sources)
        items.append(EntryOnGpu(name, entry.replicas, entry.cap, footprint))
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
        models.append((deployment, where, _shared_server_pods(entry, sources, common, where)))
    try:
        shares = caps_on_gpu(_planned_gpu(size.gpu_memory_mib), items, context_reserve_mib=reserve)
    except ConfigError as e:
        raise ConfigError(
            f"{path}: pods are sized from pack's plan of the spec on one GPU, which refuses it:\n"
            f"{e.message}"
        ) from e
    mix = []
    for (deployment, where, server), share in zip(models, shares, strict=True):
        assert share.mib is not None  # planned on a GPU of known size
        mix.append(MixModel(deployment, share.mib, where, server))
    command = "sharedserve k8s render --dra --spec" if dra else "sharedserve k8s render --spec"
    text = render_mix_yaml(
        mix, size, context_reserve_mib=reserve, source=str(path), command=command,
        admin_secret=admin_secret,
    )  # fmt: skip
    note = image_note(frameworks, str(common["image"]))
    return "".join(f"# {line}\n" for line in note) + text


def _shared_server_pods(
    entry: PackEntry, sources: list[ModelSource], common: Mapping[str, Any], where: str
) -> SharedServerPods | None:
    """A shared server's models in its pods: each one's directory on the claim (its directory's
    name, as a one-model pod's) and its model file, as ``pack`` writes it."""
    if not entry.is_shared_server:
        return None
    from sharedserve.pack.repository import merged_model_file

    files = []
    for j, (model, source) in enumerate(zip(entry.models, sources, strict=True)):
        name = model.name or source.name
        try:
            # The same rules as a one-model pod's name and directory: safe in the pod's script.
            ModelDeployment(model=name, model_dir=source.name, **common).validate()
        except ConfigError as e:
            raise ConfigError(f"{where}: models[{j}] ({name}): {e.message}") from e
        files.append(SharedServerModelFiles(name, source.name, merged_model_file(model)))
    return SharedServerPods(tuple(files), paging=entry.paging)

"""Everything decided before a pack run starts a process: model, GPU share, ports, cgroups, env.

All refusals happen here, so an impossible pack (over-subscribed GPU, taken port, missing model)
fails before anything runs.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sharedserve import contract
from sharedserve.config import PackSettings
from sharedserve.contract import Grant, vgpu_id
from sharedserve.errors import ConfigError
from sharedserve.gpu.backend import open_gpu_backend
from sharedserve.limits.cpu import create_cpu_cgroup, remove_cgroup
from sharedserve.pack.plan import GpuShare, choose_gpu, plan_gpu_share
from sharedserve.pack.probe import free_port, port_is_free
from sharedserve.pack.replica import ReplicaSpec
from sharedserve.server.model_source import find_model

__all__ = ["PackPlan", "prepare_pack", "release_cgroups"]

log = logging.getLogger(__name__)

_MIB = 1 << 20


@dataclass(frozen=True)
class PackPlan:
    specs: list[ReplicaSpec]
    share: GpuShare
    simulated_gpus: bool
    cpu_quota_enforced: bool
    cpu_quota_note: str | None
    """Why the CPU quota is not enforced, when it is not."""
    log_dir: Path
    targets_path: Path


def _footprint_mib(path: Path) -> float:
    """Bytes of the model's files on disk, in MiB: weights a replica must hold at the least."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / _MIB


def _share(settings: PackSettings, footprint_mib: float) -> tuple[GpuShare, bool]:
    backend = open_gpu_backend(settings.fake_gpus)
    if backend is None:
        if settings.gpu is not None:
            raise ConfigError(f"--gpu {settings.gpu} given, but this host has no NVIDIA GPU")
        gpus = []
        simulated = False
    else:
        try:
            gpus = backend.list_gpus()
            simulated = backend.simulated
        finally:
            backend.close()
    gpu = choose_gpu(gpus, settings.gpu)
    share = plan_gpu_share(
        settings.replicas,
        settings.cap,
        gpu,
        context_reserve_mib=settings.context_reserve_mib,
        footprint_mib=footprint_mib,
    )
    return share, simulated


def _ports(settings: PackSettings) -> list[tuple[int, int]]:
    n, host = settings.replicas, settings.host
    if settings.base_port is None:
        picked: set[int] = set()
        while len(picked) < 2 * n:
            picked.add(free_port(host))
        ports = sorted(picked)
        return [(ports[2 * i], ports[2 * i + 1]) for i in range(n)]
    pairs = [(settings.base_port + 2 * i, settings.base_port + 2 * i + 1) for i in range(n)]
    taken = [p for pair in pairs for p in pair if not port_is_free(host, p)]
    if taken:
        raise ConfigError(f"ports already in use on {host}: {taken}; choose another --base-port")
    return pairs


def _make_cgroups(names: list[str], cores: float) -> tuple[list[Path] | None, str | None]:
    """One cgroup per replica under a parent named for this run, or (None, why not)."""
    parent = f"sharedserve-pack-{os.getpid()}"
    made: list[Path] = []
    try:
        for name in names:
            made.append(create_cpu_cgroup(parent, name, cores))
    except ConfigError as e:
        release_cgroups(made)
        return None, e.message
    return made, None


def release_cgroups(paths: list[Path]) -> None:
    """Remove cgroups this run made; a failure is logged, never raised (cleanup must go on)."""
    for path in paths:
        try:
            remove_cgroup(path)
        except ConfigError as e:
            log.error("%s", e.message)


def _server_command(settings: PackSettings, name: str, ports: tuple[int, int]) -> list[str]:
    command = [sys.executable, "-m", "sharedserve", "serve", "--model", str(settings.model_dir)]
    command += ["--name", name, "--host", settings.host]
    command += ["--rest-port", str(ports[0]), "--grpc-port", str(ports[1])]
    if settings.fake_gpus is not None:
        command += ["--fake-gpus", str(settings.fake_gpus)]
    return command + list(settings.server_args)


def _contract_env(settings: PackSettings, share: GpuShare, index: int) -> dict[str, str]:
    """The env contract (DESIGN.md), as the allocator would set it for one vGPU.

    A bare-host grant: no container runtime reads NVIDIA_VISIBLE_DEVICES here, so CUDA is told
    too, with indices in NVML (PCI bus) order, which is what --gpu and the targets file use.
    """
    uuid = None if share.gpu is None else share.gpu.uuid
    ids = () if uuid is None else (vgpu_id(uuid, index),)
    grant = Grant((contract.GpuShare(uuid, share.fraction, share.mib, ids),), bare_host=True)
    return {**settings.environment, **grant.to_env()}


def prepare_pack(settings: PackSettings) -> PackPlan:
    """Check everything and make the cgroups; nothing is started. Raises ConfigError."""
    settings.validate()
    source = find_model(settings.model_dir, settings.model_name)
    share, simulated = _share(settings, _footprint_mib(source.path))
    ports = _ports(settings)
    names = [f"{source.name}-{i}" for i in range(settings.replicas)]
    if settings.log_dir is None:
        log_dir = Path(tempfile.mkdtemp(prefix=f"sharedserve-pack-{source.name}-"))
    else:
        log_dir = settings.log_dir
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot create log directory {log_dir}: {e.strerror}") from e
    targets_path = settings.targets_out or log_dir / "targets.json"
    cgroups: list[Path] | None = None
    note = None
    if settings.cpu_limit_cores is not None:
        cgroups, note = _make_cgroups(names, settings.cpu_limit_cores)
    specs = []
    for i, name in enumerate(names):
        command = _server_command(settings, source.name, ports[i])
        if cgroups is None and settings.cpu_limit_cores is not None:
            # Fallback: no quota, but the server still sizes its threads to the limit.
            command += ["--cpu-limit", f"{settings.cpu_limit_cores:g}"]
        specs.append(
            ReplicaSpec(
                name=name,
                index=i,
                model=source.name,
                host=settings.host,
                rest_port=ports[i][0],
                grpc_port=ports[i][1],
                command=tuple(command),
                env=_contract_env(settings, share, i),
                log_path=log_dir / f"{name}.log",
                cgroup=None if cgroups is None else cgroups[i],
                cpu_limit=settings.cpu_limit_cores,
                gpu=None if share.gpu is None else share.gpu.uuid,
                gpu_memory_fraction=share.fraction,
            )
        )
    return PackPlan(
        specs=specs,
        share=share,
        simulated_gpus=simulated,
        cpu_quota_enforced=cgroups is not None,
        cpu_quota_note=note,
        log_dir=log_dir,
        targets_path=targets_path,
    )

"""Everything decided before a pack run starts a process: model, GPU share, ports, cgroups, env.

All refusals happen here, so an impossible pack (over-subscribed GPU, taken port, missing model)
fails before anything runs.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from sharedserve.config import PackEntry, PackSettings
from sharedserve.contract import Grant, vgpu_id
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import ConfigError
from sharedserve.framework_output import require_installed
from sharedserve.gpu.backend import open_gpu_backend
from sharedserve.gpu.info import GpuInfo
from sharedserve.limits.affinity import on_cpus
from sharedserve.limits.cgroups import create_cpu_cgroup, remove_cgroup
from sharedserve.pack.caps import EntryOnGpu, ReplicaShare, caps_on_gpu, place_entries
from sharedserve.pack.probe import free_port, port_is_free
from sharedserve.pack.replica import HeldModel, ReplicaSpec
from sharedserve.pack.repository import write_repository
from sharedserve.server import ModelSource, find_model

__all__ = ["PreparedPack", "check_pack", "footprint_mib", "prepare_pack", "release_cgroups"]

log = logging.getLogger(__name__)

_MIB = 1 << 20


@dataclass(frozen=True)
class PreparedPack:
    specs: list[ReplicaSpec]
    """Every replica, entry by entry."""
    shares: list[ReplicaShare]
    """Each replica's GPU share, in the order of ``specs``."""
    entries: list[PackEntry]
    """The entry of each replica, in the order of ``specs``."""
    simulated_gpus: bool
    cpu_quota_enforced: bool
    cpu_quota_note: str | None
    """Why the CPU quota is not enforced, when it is not."""
    log_dir: Path
    own_log_dir: bool
    """Whether pack made ``log_dir`` (a temporary directory), and so may remove it."""
    targets_path: Path
    context_reserve_mib: int
    """GPU memory each replica keeps outside its cap for its CUDA context."""

    @property
    def share(self) -> ReplicaShare:
        """The first replica's share (all of a one-model pack on one GPU have the same)."""
        return self.shares[0]


def footprint_mib(path: Path) -> float:
    """Bytes of the model's files on disk, in MiB: weights a replica must hold at the least."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / _MIB


def _list_gpus(
    settings: PackSettings, entries: tuple[PackEntry, ...]
) -> tuple[list[GpuInfo], bool]:
    backend = open_gpu_backend(settings.fake_gpus)
    if backend is None:
        pinned = next((e.gpu for e in entries if e.gpu is not None), None)
        if pinned is not None:
            raise ConfigError(f"--gpu {pinned} given, but this host has no NVIDIA GPU")
        return [], False
    try:
        return backend.list_gpus(), backend.simulated
    finally:
        backend.close()


def _shares(
    settings: PackSettings,
    entries: tuple[PackEntry, ...],
    names: list[str],
    footprints: list[float],
    gpus: list[GpuInfo],
) -> list[list[ReplicaShare]]:
    """Each entry's replicas' shares: placed on GPUs, then their caps computed GPU by GPU."""
    reserve = settings.context_reserve_mib
    items = [
        EntryOnGpu(name, e.replicas, e.cap, fp)
        for name, e, fp in zip(names, entries, footprints, strict=True)
    ]
    placed = place_entries(
        gpus,
        [(e.gpu, item) for e, item in zip(entries, items, strict=True)],
        policy=PlacementPolicy(settings.placement_policy),
        context_reserve_mib=reserve,
    )
    # Each GPU's entries and how many replicas of each it holds, in entry order.
    on_gpu: dict[GpuInfo | None, dict[int, int]] = {}
    for i, gpus_of_entry in enumerate(placed):
        for gpu in gpus_of_entry:
            counts = on_gpu.setdefault(gpu, {})
            counts[i] = counts.get(i, 0) + 1
    planned: dict[tuple[GpuInfo | None, int], ReplicaShare] = {}
    for gpu, counts in on_gpu.items():
        caps = caps_on_gpu(
            gpu,
            [replace(items[i], replicas=n) for i, n in counts.items()],
            context_reserve_mib=reserve,
        )
        planned.update(((gpu, i), share) for i, share in zip(counts, caps, strict=True))
    return [[planned[gpu, i] for gpu in gpus_of_entry] for i, gpus_of_entry in enumerate(placed)]


def _ports(settings: PackSettings, n: int) -> list[tuple[int, int]]:
    host = settings.host
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


def _make_cgroups(
    wanted: list[tuple[str, float | None]],
) -> tuple[list[Path | None] | None, str | None]:
    """A cgroup for each replica with a CPU limit, under a parent named for this run, or
    (None, why not)."""
    parent = f"sharedserve-pack-{os.getpid()}"
    made: list[Path | None] = []
    try:
        for name, cores in wanted:
            made.append(None if cores is None else create_cpu_cgroup(parent, name, cores))
    except ConfigError as e:
        release_cgroups([p for p in made if p is not None])
        return None, e.message
    return made, None


def release_cgroups(paths: list[Path]) -> None:
    """Remove cgroups this run made; a failure is logged, never raised (cleanup must go on)."""
    for path in paths:
        try:
            remove_cgroup(path)
        except ConfigError as e:
            log.error("%s", e.message)


# The share of --stop-grace a replica is given to stop on its own.
_OWN_STOP_SHARE = 0.9


def _server_command(
    settings: PackSettings, entry: PackEntry, name: str, ports: tuple[int, int]
) -> list[str]:
    command = [sys.executable, "-m", "sharedserve", "serve", "--model", str(entry.model_dir)]
    command += ["--name", name, "--host", settings.host]
    command += ["--rest-port", str(ports[0]), "--grpc-port", str(ports[1])]
    # The replica stops itself (drains, cuts what is left, exits) before our SIGKILL would: its
    # own default grace (20 s) is longer than ours. Extra serve arguments come last and win.
    command += ["--shutdown-grace", f"{settings.stop_grace_s * _OWN_STOP_SHARE:g}"]
    if settings.fake_gpus is not None:
        command += ["--fake-gpus", str(settings.fake_gpus)]
    return command + list(entry.server_args)


def _contract_env(settings: PackSettings, share: ReplicaShare, slot: int) -> dict[str, str]:
    """The env contract (``contract.Grant``), as the allocator would set it for one vGPU.

    A bare-host grant: no container runtime reads NVIDIA_VISIBLE_DEVICES here, so CUDA is told
    too, with indices in NVML (PCI bus) order, which is what --gpu and the targets file use.
    """
    uuid = share.share.uuid
    ids = () if uuid is None else (vgpu_id(uuid, slot),)
    grant = Grant((replace(share.share, vgpu_ids=ids),), bare_host=True)
    return {**settings.environment, **grant.to_env()}


def _found(path: Path, name: str | None, origin: str | None) -> ModelSource:
    """``find_model``, its refusal led by the spec entry that names the path, where one does."""
    try:
        return find_model(path, name)
    except ConfigError as e:
        if origin is None:
            raise
        raise ConfigError(f"{origin}: model: {e.message}") from e


def _sources(entries: tuple[PackEntry, ...]) -> list[list[ModelSource]]:
    """Each entry's models: its one, or a shared server's, each found on disk."""
    sources = [
        [_found(m.model_dir, m.name, m.origin) for m in e.models]
        if e.is_shared_server
        else [_found(e.model_dir, e.name, e.origin)]
        for e in entries
    ]
    for entry, row in zip(entries, sources, strict=True):
        if not entry.is_shared_server:  # a shared server serves the models it can, as serve does
            require_installed(row[0].framework)  # before the GPU lookup says anything
    names = [s.name for row in sources for s in row]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(
            f"two entries serve the model name {', '.join(repeated)}; give each a unique 'name'"
        )
    return sources


def _shared_server_command(
    settings: PackSettings, entry: PackEntry, repository: Path, ports: tuple[int, int]
) -> list[str]:
    """A shared server's process: one ``serve --model-repository`` holding all its models."""
    command = [sys.executable, "-m", "sharedserve", "serve"]
    command += ["--model-repository", str(repository), "--host", settings.host]
    command += ["--rest-port", str(ports[0]), "--grpc-port", str(ports[1])]
    command += ["--shutdown-grace", f"{settings.stop_grace_s * _OWN_STOP_SHARE:g}"]
    if entry.paging:
        command += ["--paging", "lru"]
    # The repository's entries are links to the models' own directories: the server may load
    # from those (and nothing else).
    for root in dict.fromkeys(m.model_dir.expanduser().resolve() for m in entry.models):
        command += ["--allowed-model-roots", str(root)]
    if settings.fake_gpus is not None:
        command += ["--fake-gpus", str(settings.fake_gpus)]
    return command + list(entry.server_args)


def _held(sources: list[ModelSource], entry: PackEntry) -> tuple[HeldModel, ...]:
    if not entry.is_shared_server:
        return ()
    return tuple(
        HeldModel(s.name, m.weight, m.slo_p99_ms)
        for s, m in zip(sources, entry.models, strict=True)
    )


def _repositories(
    entries: tuple[PackEntry, ...], sources: list[list[ModelSource]], log_dir: Path, make: bool
) -> dict[int, Path]:
    """Each shared server's model repository by entry index, written unless ``make`` is False."""
    out: dict[int, Path] = {}
    for i, (entry, row) in enumerate(zip(entries, sources, strict=True)):
        if not entry.is_shared_server:
            continue
        assert entry.name is not None  # a shared server always has one
        if not make:
            out[i] = log_dir / f"{entry.name}-repository"
            continue
        root = Path(tempfile.mkdtemp(prefix=f"{entry.name}-repository-", dir=log_dir))
        out[i] = write_repository(
            root, [(s.name, m) for s, m in zip(row, entry.models, strict=True)]
        )
    return out


def check_pack(settings: PackSettings) -> None:
    """Every refusal a run of ``settings`` would make, made now (ConfigError); nothing is made
    or started. ``bench`` checks its first scale so, before it says anything."""
    prepare_pack(settings, dry_run=True)


def _log_dir(given: Path | None, prefix: str, dry_run: bool) -> Path:
    """The replicas' log directory: ``given`` (made if missing), else a new temporary one that
    the pack owns; a dry run makes none and names what it would be."""
    if dry_run:
        return given or Path(tempfile.gettempdir()) / f"sharedserve-pack-{prefix}-*"
    if given is None:
        return Path(tempfile.mkdtemp(prefix=f"sharedserve-pack-{prefix}-"))
    try:
        given.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create log directory {given}: {e.strerror}") from e
    return given


def prepare_pack(settings: PackSettings, *, dry_run: bool = False) -> PreparedPack:
    """Check everything and make the cgroups; nothing is started. Raises ConfigError.

    ``dry_run``: check everything but make nothing, no cgroup and no log directory (the plan
    then says the CPU quota is not enforced, and why)."""
    settings.validate()
    entries = settings.entries
    sources = _sources(entries)
    names = [
        e.name if e.is_shared_server and e.name else row[0].name
        for e, row in zip(entries, sources, strict=True)
    ]
    footprints = [sum(footprint_mib(s.path) for s in row) for row in sources]
    gpus, simulated = _list_gpus(settings, entries)
    shares = _shares(settings, entries, names, footprints, gpus)
    replicas = [
        (e, name, r) for e, name in zip(entries, names, strict=True) for r in range(e.replicas)
    ]
    entry_of = [i for i, e in enumerate(entries) for _ in range(e.replicas)]
    ports = _ports(settings, len(replicas))
    prefix = names[0] if len(names) == 1 else "mix"
    log_dir = _log_dir(settings.log_dir, prefix, dry_run)
    targets_path = settings.targets_out or log_dir / "targets.json"
    replica_names = [f"{model}-{r}" for _, model, r in replicas]
    cgroups: list[Path | None] | None = None
    note = None
    if dry_run:
        note = "a dry run makes no cgroup"
    elif any(e.cpu_limit_cores is not None for e in entries):
        wanted = [
            (n, e.cpu_limit_cores) for n, (e, _, _) in zip(replica_names, replicas, strict=True)
        ]
        cgroups, note = _make_cgroups(wanted)
    try:
        repositories = _repositories(entries, sources, log_dir, make=not dry_run)
    except ConfigError:  # nothing has started: leave nothing behind
        release_cgroups([c for c in cgroups or [] if c is not None])
        if settings.log_dir is None and not dry_run:
            shutil.rmtree(log_dir, ignore_errors=True)
        raise
    flat_shares = [share for row in shares for share in row]
    used_slots: dict[str | None, int] = {}
    specs = []
    for i, ((entry, model, _), name) in enumerate(zip(replicas, replica_names, strict=True)):
        share = flat_shares[i]
        uuid = None if share.gpu is None else share.gpu.uuid
        slot = used_slots[uuid] = used_slots.get(uuid, -1) + 1  # vGPU slots per GPU
        repository = repositories.get(entry_of[i])
        if repository is None:
            command = _server_command(settings, entry, model, ports[i])
        else:
            command = _shared_server_command(settings, entry, repository, ports[i])
        if cgroups is None and entry.cpu_limit_cores is not None:
            # Fallback: no quota, but the server still sizes its threads to the limit.
            command += ["--cpu-limit", f"{entry.cpu_limit_cores:g}"]
        command = on_cpus(command, settings.cpus)
        specs.append(
            ReplicaSpec(
                name=name,
                index=i,
                model=model,
                host=settings.host,
                rest_port=ports[i][0],
                grpc_port=ports[i][1],
                command=tuple(command),
                env=_contract_env(settings, share, slot),
                log_path=log_dir / f"{name}.log",
                cgroup=None if cgroups is None else cgroups[i],
                cpu_limit=entry.cpu_limit_cores,
                gpu=uuid,
                gpu_memory_fraction=share.share.fraction,
                weight=entry.weight,
                slo_p99_ms=entry.slo_p99_ms,
                models=_held(sources[entry_of[i]], entry),
                repository=None if dry_run else repository,
            )
        )
    return PreparedPack(
        specs=specs,
        shares=flat_shares,
        entries=[e for e, _, _ in replicas],
        simulated_gpus=simulated,
        cpu_quota_enforced=cgroups is not None,
        cpu_quota_note=note,
        log_dir=log_dir,
        own_log_dir=settings.log_dir is None and not dry_run,
        targets_path=targets_path,
        context_reserve_mib=settings.context_reserve_mib,
    )

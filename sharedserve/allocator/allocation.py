"""What ``Allocate`` answers for one container: the env contract, MPS limits, mounts. Pure.

The kubelet has already chosen the vGPUs; this maps them to physical GPUs and says what the
container may use of each (a ``contract.Grant``). Nothing is recorded: the answer is a
function of the IDs alone, so a restarted plugin answers exactly as the old one did.

The variables and their formatting are ``sharedserve.contract``'s, which ``sharedserve serve``
reads back; multi-GPU grants (only with ``--allow-multi-gpu``) list one value per GPU there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sharedserve.allocator.inventory import Inventory, PhysicalGpu
from sharedserve.contract import GpuShare, Grant, MpsLimits
from sharedserve.errors import InvalidInput

__all__ = [
    "ContainerGrant",
    "GpuGrant",
    "GrantOptions",
    "MountSpec",
    "container_grant",
    "grants_by_gpu",
]


@dataclass(frozen=True)
class GpuGrant:
    """The vGPUs one container gets on one physical GPU."""

    gpu: PhysicalGpu
    vgpu_ids: tuple[str, ...]

    @property
    def vgpu_share(self) -> float:
        """Share of the GPU's vGPUs (granted / advertised): the pod's share of its SMs."""
        return len(self.vgpu_ids) / self.gpu.replicas

    @property
    def memory_mib(self) -> int:
        return len(self.vgpu_ids) * self.gpu.vgpu_memory_mib

    @property
    def share(self) -> GpuShare:
        """The memory cap of the env contract. Its fraction is the MiB's (``fraction_of``), not
        the vGPU share: a GPU cut into vGPUs of a given size keeps a remainder no vGPU owns, so
        one vGPU of 13 on an 80 GiB card is 6000 MiB, 0.073242 of it, not 1/13."""
        return GpuShare.of_mib(self.gpu.uuid, self.memory_mib, self.gpu.memory_mib, self.vgpu_ids)


@dataclass(frozen=True)
class GrantOptions:
    allow_multi_gpu: bool = False
    """Accept a request whose vGPUs sit on more than one GPU."""
    cdi_kind: str | None = None
    """CDI device kind (``nvidia.com/gpu``) to name each granted GPU by UUID; None: no CDI."""
    mps_pipe_dir: Path | None = None
    """MPS control daemon's pipe directory (mounted into the container); None: MPS off."""
    mps_shm_dir: Path | None = None
    """Host directory the MPS daemon uses as /dev/shm, mounted as the container's /dev/shm
    (MPS clients exchange shared memory with the daemon); None: the container's own."""


@dataclass(frozen=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class ContainerGrant:
    envs: dict[str, str]
    mounts: tuple[MountSpec, ...] = ()
    cdi_devices: tuple[str, ...] = ()
    gpus: tuple[GpuGrant, ...] = field(default=(), compare=False)


def grants_by_gpu(
    inventory: Inventory, device_ids: Sequence[str], *, allow_multi_gpu: bool
) -> list[GpuGrant]:
    """The grant per physical GPU, in NVML index order. InvalidInput for what cannot be given."""
    if not device_ids:
        raise InvalidInput("no device IDs in the container request")
    by_gpu: dict[str, list[tuple[int, str]]] = {}
    for vgpu in inventory.resolve(device_ids):
        by_gpu.setdefault(vgpu.gpu.uuid, []).append((vgpu.slot, vgpu.id))
    if len(by_gpu) > 1 and not allow_multi_gpu:
        raise InvalidInput(
            f"the {len(device_ids)} vGPUs requested sit on {len(by_gpu)} GPUs "
            f"({', '.join(sorted(by_gpu))}); a container gets vGPUs of one GPU unless the "
            "allocator runs with --allow-multi-gpu"
        )
    grants = []
    for uuid, slots in by_gpu.items():
        gpu = inventory.gpu(uuid)
        assert gpu is not None  # resolve() only returns vGPUs of known GPUs
        grants.append(GpuGrant(gpu, tuple(vid for _, vid in sorted(slots))))
    return sorted(grants, key=lambda g: g.gpu.index)


def container_grant(grants: Sequence[GpuGrant], options: GrantOptions) -> ContainerGrant:
    """The env contract (``contract.Grant``), plus MPS and CDI when configured."""
    mps = None
    mounts: tuple[MountSpec, ...] = ()
    if options.mps_pipe_dir is not None:
        pipe_dir = str(options.mps_pipe_dir)
        # One percentage per client, whatever the number of GPUs: the smallest share, so that
        # no GPU gives the pod more of its SMs than the pod's share of it.
        share = min(g.vgpu_share for g in grants)
        mps = MpsLimits(pipe_dir, max(1, int(100 * share)))
        # The pipes are how clients reach the node's MPS control daemon; they must be writable.
        mounts = (MountSpec(pipe_dir, pipe_dir, read_only=False),)
        if options.mps_shm_dir is not None:
            mounts += (MountSpec("/dev/shm", str(options.mps_shm_dir), read_only=False),)
    envs = Grant(tuple(g.share for g in grants), mps).to_env()
    cdi: tuple[str, ...] = ()
    if options.cdi_kind is not None:
        cdi = tuple(f"{options.cdi_kind}={g.gpu.uuid}" for g in grants)
    return ContainerGrant(envs, mounts, cdi, tuple(grants))

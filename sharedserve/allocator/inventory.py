"""Physical GPUs -> vGPUs: how many each GPU advertises, their IDs and their memory. Pure.

A vGPU is a share of one physical GPU: ``--vgpus-per-gpu N`` cuts every GPU into N equal shares,
or ``--vgpu-memory-mib M`` gives each GPU as many M MiB shares as its memory holds, so a 16 GiB
and an 80 GiB card on one node advertise different counts. A vGPU's ID is ``<uuid>::<slot>``: the
physical GPU can be read back from the ID alone, which is what lets the plugin keep no state
(the kubelet's checkpoint of allocated IDs is the only record, and survives our restarts).

The cut's arithmetic (``Sizing``, ``replicas_for``, ``vgpu_memory_for``, ``MAX_REPLICAS``) lives
in ``sharedserve.vgpu_sizing``, shared with the manifests that ask for vGPUs; it is re-exported
here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sharedserve.contract import VGPU_SEPARATOR, vgpu_id
from sharedserve.errors import ConfigError, InvalidInput, quoted
from sharedserve.vgpu_sizing import MAX_REPLICAS, Sizing, replicas_for, vgpu_memory_for

__all__ = [
    "MAX_DEVICE_ID_LENGTH",
    "MAX_REPLICAS",
    "GpuLike",
    "Inventory",
    "PhysicalGpu",
    "Sizing",
    "VGpu",
    "build_inventory",
    "replicas_for",
    "vgpu_id",
    "vgpu_memory_for",
]

#: The kubelet's limit on a device ID (``Device.ID`` in the v1beta1 API).
MAX_DEVICE_ID_LENGTH = 63


class GpuLike(Protocol):
    """What the inventory needs to know of a GPU (``sharedserve.gpu.GpuInfo`` has it).

    A protocol rather than GpuInfo itself keeps this module free of ``sharedserve.gpu``,
    whose NVML backend this pure module must not reach, even indirectly.
    """

    @property
    def uuid(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def memory_mib(self) -> int: ...
    @property
    def numa_node(self) -> int | None: ...


@dataclass(frozen=True)
class PhysicalGpu:
    """One physical GPU and how it is shared."""

    uuid: str
    index: int
    """NVML index (nvidia-smi's order, which is PCI bus order)."""
    name: str
    memory_mib: int
    """Total memory in MiB."""
    numa_node: int | None
    replicas: int
    """vGPUs this GPU advertises; 0 when it is smaller than one vGPU."""
    vgpu_memory_mib: int
    """Memory cap each of its vGPUs carries, in MiB."""

    @property
    def vgpu_ids(self) -> tuple[str, ...]:
        return tuple(vgpu_id(self.uuid, slot) for slot in range(self.replicas))


@dataclass(frozen=True)
class VGpu:
    id: str
    gpu: PhysicalGpu
    slot: int
    """Position on its GPU, 0..replicas-1."""


class Inventory:
    """The node's GPUs and vGPUs, fixed for the life of the plugin process."""

    def __init__(self, gpus: Sequence[PhysicalGpu]) -> None:
        self.gpus: tuple[PhysicalGpu, ...] = tuple(sorted(gpus, key=lambda g: g.index))
        self._by_uuid = {gpu.uuid: gpu for gpu in self.gpus}
        self._vgpus = {
            vid: VGpu(vid, gpu, slot) for gpu in self.gpus for slot, vid in enumerate(gpu.vgpu_ids)
        }

    @property
    def vgpu_ids(self) -> list[str]:
        """Every vGPU ID, by GPU index then slot."""
        return list(self._vgpus)

    def __len__(self) -> int:
        return len(self._vgpus)

    def get(self, device_id: str) -> VGpu | None:
        return self._vgpus.get(device_id)

    def gpu(self, uuid: str) -> PhysicalGpu | None:
        return self._by_uuid.get(uuid)

    def resolve(self, device_ids: Iterable[str]) -> list[VGpu]:
        """The vGPUs named, in the order given; InvalidInput names any unknown or repeated ID."""
        found: list[VGpu] = []
        unknown: list[str] = []
        seen: set[str] = set()
        for device_id in device_ids:
            if device_id in seen:
                raise InvalidInput(f"device {quoted(device_id)} is listed twice")
            seen.add(device_id)
            vgpu = self._vgpus.get(device_id)
            if vgpu is None:
                unknown.append(device_id)
            else:
                found.append(vgpu)
        if unknown:
            shown = ", ".join(quoted(u) for u in unknown[:3])
            more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            raise InvalidInput(f"unknown device ID(s) {shown}{more}: not advertised by this plugin")
        return found


def build_inventory(gpus: Iterable[GpuLike], sizing: Sizing) -> Inventory:
    """Cut ``gpus`` into vGPUs. ConfigError on repeated UUIDs or IDs the kubelet would refuse."""
    sizing.validate()
    physical: list[PhysicalGpu] = []
    seen: set[str] = set()
    for gpu in gpus:
        if gpu.uuid in seen:
            raise ConfigError(f"GPU {gpu.uuid} is listed twice")
        if VGPU_SEPARATOR in gpu.uuid or not gpu.uuid:
            raise ConfigError(f"GPU UUID {gpu.uuid!r} cannot name vGPUs")
        seen.add(gpu.uuid)
        replicas = replicas_for(gpu.memory_mib, sizing)
        per_vgpu = vgpu_memory_for(gpu.memory_mib, sizing)
        longest = vgpu_id(gpu.uuid, max(replicas - 1, 0))
        if len(longest) > MAX_DEVICE_ID_LENGTH:
            raise ConfigError(
                f"vGPU ID {longest!r} is {len(longest)} characters; the kubelet allows "
                f"{MAX_DEVICE_ID_LENGTH}"
            )
        physical.append(
            PhysicalGpu(
                uuid=gpu.uuid,
                index=gpu.index,
                name=gpu.name,
                memory_mib=gpu.memory_mib,
                numa_node=gpu.numa_node,
                replicas=replicas,
                vgpu_memory_mib=per_vgpu,
            )
        )
    return Inventory(physical)

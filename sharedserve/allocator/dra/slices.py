"""This node's ResourceSlice: the GPUs the scheduler may allocate, as ``resource.k8s.io/v1``. Pure.

Two shapes. By default one device per GPU whose ``memory`` and ``compute`` capacities may be
allocated many times (consumable capacity, KEP-5075): the scheduler subtracts each claim's
``memory`` and ``compute`` requests from the GPU's, so a pod asks for "6Gi and 40% of a GPU".
Compute is in percent of the GPU (``contract.DRA_COMPUTE_UNITS``); a claim that names no
compute consumes none of it (its policy's default is 0), so claims that ask for memory alone
share a GPU as they did before compute was published, and only the claims that name a share
(``size``'s manifests) book the GPU's time. With ``--slots N``, for clusters without that
feature, each GPU is N ordinary devices of an equal share of both instead, like the device
plugin's vGPUs.

An unhealthy GPU leaves the slice rather than being tainted: device taints need the
DRADeviceTaints feature gate, off by default before 1.36, without which the API server drops
them and the GPU would stay allocatable; a tainted device also halves how many devices one
slice may hold (64 instead of 128). Leaving works on every release with DRA. Claims already
allocated keep their device (allocations live in the claims, not in the slice) and are still
prepared.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sharedserve.allocator.health_state import Health
from sharedserve.allocator.inventory import PhysicalGpu
from sharedserve.contract import DRA_COMPUTE, DRA_COMPUTE_UNITS, DRA_DRIVER, DRA_MEMORY
from sharedserve.errors import ConfigError

__all__ = [
    "MAX_DEVICES",
    "MAX_SLOTS",
    "SliceOptions",
    "device_name",
    "devices",
    "parse_device_name",
    "resource_slice",
    "semver",
    "slice_name",
    "slot_compute",
    "slot_memory_mib",
]

#: Devices one ResourceSlice may hold (ResourceSliceMaxDevices in the API's validation).
MAX_DEVICES = 128
#: Slots per GPU: 16 slots on 8 GPUs fill one slice.
MAX_SLOTS = 16
_DEVICE = re.compile(r"gpu-(?P<index>0|[1-9][0-9]*)(?:-slot-(?P<slot>0|[1-9][0-9]*))?")
_NUMERIC = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class SliceOptions:
    slots: int | None = None
    """N exclusive slot devices per GPU instead of one shared device (no consumable capacity)."""
    memory_step_mib: int = 256
    """The smallest amount of memory a claim gets, and the step the scheduler rounds up to."""

    def check_fits(self, gpu_count: int) -> None:
        """ConfigError if this node's devices would not fit one slice (the API refuses it)."""
        count = gpu_count * (self.slots or 1)
        if count > MAX_DEVICES:
            raise ConfigError(
                f"{gpu_count} GPUs x --slots {self.slots} is {count} devices; one ResourceSlice "
                f"holds {MAX_DEVICES}: use fewer --slots"
            )

    def validate(self) -> None:
        if self.slots is not None and not 1 <= self.slots <= MAX_SLOTS:
            raise ConfigError(f"--slots must be in 1..{MAX_SLOTS}, got {self.slots}")
        if self.memory_step_mib < 1:
            raise ConfigError(f"--memory-step-mib must be positive, got {self.memory_step_mib}")


def device_name(index: int, slot: int | None = None) -> str:
    """``gpu-0``, or ``gpu-0-slot-3`` (a DNS label, as the API requires)."""
    return f"gpu-{index}" if slot is None else f"gpu-{index}-slot-{slot}"


def parse_device_name(name: str) -> tuple[int, int | None] | None:
    """(GPU index, slot or None) of a name ``device_name`` made; None for any other name."""
    match = _DEVICE.fullmatch(name)
    if match is None:
        return None
    slot = match["slot"]
    return int(match["index"]), None if slot is None else int(slot)


def slot_memory_mib(gpu: PhysicalGpu, slots: int) -> int:
    return gpu.memory_mib // slots


def slot_compute(slots: int) -> int:
    """A slot's share of its GPU's compute, in percent."""
    return DRA_COMPUTE_UNITS // slots


def slice_name(node: str) -> str:
    """One slice per node, named after it; the driver name keeps it apart from other drivers'."""
    return f"{node}-{DRA_DRIVER}"


def semver(version: str) -> str | None:
    """A driver version as semver 2.0 (``535.104.05`` -> ``535.104.5``: semver forbids leading
    zeros); None if it has no three numeric parts."""
    parts = version.strip().split(".")
    if len(parts) == 2:
        parts.append("0")
    if len(parts) != 3 or not all(_NUMERIC.fullmatch(p) for p in parts):
        return None
    return ".".join(str(int(p)) for p in parts)


def _mi(mib: int) -> str:
    return f"{mib}Mi"


def _attributes(gpu: PhysicalGpu, driver_version: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "uuid": {"string": gpu.uuid},
        "productName": {"string": gpu.name[:64]},
        "index": {"int": gpu.index},
    }
    if driver_version is not None:
        attributes["driverVersion"] = {"version": driver_version}
    return attributes


def _shared_device(gpu: PhysicalGpu, step: int, driver_version: str | None) -> dict[str, Any]:
    capacity: dict[str, Any] = {"value": _mi(gpu.memory_mib)}
    usable = gpu.memory_mib // step * step
    # The API requires min + step <= the capacity; a GPU smaller than two steps is offered
    # without a policy (any amount up to its memory).
    if usable >= 2 * step:
        capacity["requestPolicy"] = {
            # A claim that names no amount gets the whole GPU, as with any other GPU driver.
            "default": _mi(usable),
            "validRange": {"min": _mi(step), "step": _mi(step), "max": _mi(usable)},
        }
    # Any whole percent; none named consumes none (see the module's docstring).
    compute = {
        "value": str(DRA_COMPUTE_UNITS),
        "requestPolicy": {
            "default": "0",
            "validRange": {"min": "0", "step": "1", "max": str(DRA_COMPUTE_UNITS)},
        },
    }
    return {
        "name": device_name(gpu.index),
        "attributes": _attributes(gpu, driver_version),
        "capacity": {DRA_MEMORY: capacity, DRA_COMPUTE: compute},
        "allowMultipleAllocations": True,
    }


def _slot_devices(gpu: PhysicalGpu, slots: int, driver_version: str | None) -> list[Any]:
    memory = _mi(slot_memory_mib(gpu, slots))
    compute = str(slot_compute(slots))
    return [
        {
            "name": device_name(gpu.index, slot),
            "attributes": {**_attributes(gpu, driver_version), "slot": {"int": slot}},
            "capacity": {DRA_MEMORY: {"value": memory}, DRA_COMPUTE: {"value": compute}},
        }
        for slot in range(slots)
    ]


def devices(
    gpus: Sequence[PhysicalGpu],
    health: Mapping[str, Health],
    options: SliceOptions,
    driver_version: str | None,
) -> list[dict[str, Any]]:
    """The slice's devices: healthy GPUs only, in index order."""
    found: list[dict[str, Any]] = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        if health.get(gpu.uuid) is not Health.HEALTHY:
            continue
        if options.slots is None:
            found.append(_shared_device(gpu, options.memory_step_mib, driver_version))
        else:
            found += _slot_devices(gpu, options.slots, driver_version)
    return found


def resource_slice(node: str, found: list[dict[str, Any]], generation: int) -> dict[str, Any]:
    """The whole object: one slice is the whole pool, named after the node."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node)},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": found,
        },
    }

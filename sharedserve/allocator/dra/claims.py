"""What one allocated ResourceClaim gets on this node: its devices and each request's env. Pure.

The scheduler has already chosen the devices and, with consumable capacity, how much of each
GPU's memory the claim consumes (``status.allocation.devices.results[].consumedCapacity``);
this maps them to our GPUs and writes the env contract (``sharedserve.contract``) that
``sharedserve serve`` applies as its memory cap. A claim's results for other drivers are
theirs to prepare and are left alone.

One env per *request* of the claim, not per device: the contract is one set of variables per
container, so a request granted two GPUs gets ``NVIDIA_VISIBLE_DEVICES=a,b`` once (two CDI
devices each setting the variable would leave whichever the runtime applied last). A container
names a claim, or one request of it, and gets the CDI devices of those requests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sharedserve.allocator.dra.slices import parse_device_name, slot_memory_mib
from sharedserve.allocator.inventory import PhysicalGpu
from sharedserve.contract import DRA_DRIVER, DRA_MEMORY, GpuShare, Grant
from sharedserve.errors import ConfigError, InvalidInput, quoted
from sharedserve.quantity import parse_quantity

__all__ = [
    "CDI_CLASS",
    "CDI_KIND",
    "ClaimRef",
    "PreparedClaim",
    "PreparedDevice",
    "cdi_name",
    "prepare_claim",
]

CDI_CLASS = "claim"
CDI_KIND = f"{DRA_DRIVER}/{CDI_CLASS}"
"""The CDI kind of the specs the driver writes: one spec per claim, one device per request."""
_MIB = 1 << 20
# CDI device names: letters, digits and "_.-:" (tags.cncf.io/container-device-interface).
_CDI_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


@dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it in NodePrepareResources."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PreparedDevice:
    """One entry of NodePrepareResources' answer."""

    request: str
    pool: str
    device: str
    share_id: str | None
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True)
class PreparedClaim:
    ref: ClaimRef
    devices: tuple[PreparedDevice, ...]
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    """CDI device name -> the env its containerEdits set, one per request."""


@dataclass
class _Request:
    """The GPUs one request was given, in allocation order, and the memory of each."""

    results: list[dict[str, Any]] = field(default_factory=list)
    mib: dict[int, int] = field(default_factory=dict)


def cdi_name(uid: str, request: str) -> str:
    return _CDI_UNSAFE.sub("_", f"{uid}-{request}")


def _memory_mib(result: Mapping[str, Any], claim: ClaimRef, gpu: PhysicalGpu) -> int:
    consumed = (result.get("consumedCapacity") or {}).get(DRA_MEMORY)
    if consumed is None:
        return gpu.memory_mib  # a device allocated whole (no consumable capacity)
    try:
        size = parse_quantity(str(consumed), "consumedCapacity.memory")
    except ConfigError as e:
        raise InvalidInput(f"claim {claim}: {e.message}") from None
    mib = int(size // _MIB)
    if mib < 1:
        raise InvalidInput(
            f"claim {claim}: {quoted(consumed)} of memory on {result['device']} is less than 1 MiB"
        )
    return mib


def _requests(
    claim: ClaimRef,
    results: Sequence[Mapping[str, Any]],
    pool: str,
    gpus: Mapping[int, PhysicalGpu],
    slots: int | None,
) -> dict[str, _Request]:
    requests: dict[str, _Request] = {}
    for result in results:
        device = str(result.get("device", ""))
        where = f"{result.get('pool')}/{device}"
        if result.get("pool") != pool:
            raise InvalidInput(f"claim {claim}: device {where} is not on this node (pool {pool})")
        parsed = parse_device_name(device)
        gpu = None if parsed is None else gpus.get(parsed[0])
        if parsed is None or gpu is None or (parsed[1] is None) != (slots is None):
            raise InvalidInput(
                f"claim {claim}: device {where} is not one this driver publishes on this node"
            )
        if parsed[1] is not None and slots is not None:
            if parsed[1] >= slots:
                raise InvalidInput(f"claim {claim}: device {where}: this node has {slots} slots")
            mib = slot_memory_mib(gpu, slots)
        else:
            mib = _memory_mib(result, claim, gpu)
        request = requests.setdefault(str(result.get("request", "")), _Request())
        request.results.append(dict(result))
        request.mib[gpu.index] = request.mib.get(gpu.index, 0) + mib
        if request.mib[gpu.index] > gpu.memory_mib:
            raise InvalidInput(
                f"claim {claim}: request {quoted(result.get('request'))} asks for "
                f"{request.mib[gpu.index]} MiB of {device} ({gpu.name}), which has "
                f"{gpu.memory_mib} MiB"
            )
    return requests


def prepare_claim(
    claim: Mapping[str, Any],
    ref: ClaimRef,
    *,
    pool: str,
    gpus: Sequence[PhysicalGpu],
    slots: int | None = None,
    gpu_cdi_kind: str | None = None,
) -> PreparedClaim:
    """What to answer and write for ``claim`` (the API object). InvalidInput says why not."""
    uid = (claim.get("metadata") or {}).get("uid")
    if uid != ref.uid:
        raise InvalidInput(
            f"claim {ref} has UID {uid}, the kubelet asked for {ref.uid} (deleted and re-created?)"
        )
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise InvalidInput(f"claim {ref} is not allocated")
    results = [
        r
        for r in (allocation.get("devices") or {}).get("results") or []
        if r.get("driver") == DRA_DRIVER
    ]
    if not results:
        raise InvalidInput(f"claim {ref} has no device of driver {DRA_DRIVER}")
    by_index = {gpu.index: gpu for gpu in gpus}
    devices: list[PreparedDevice] = []
    envs: dict[str, dict[str, str]] = {}
    for name, request in _requests(ref, results, pool, by_index, slots).items():
        try:
            shares = tuple(
                GpuShare.of_mib(by_index[i].uuid, mib, by_index[i].memory_mib)
                for i, mib in sorted(request.mib.items())
            )
        except ConfigError as e:  # a share finer than the contract carries (a huge GPU)
            raise InvalidInput(f"claim {ref}: request {quoted(name)}: {e.message}") from None
        cdi = cdi_name(ref.uid, name)
        envs[cdi] = Grant(shares, bare_host=True).to_env()
        for n, result in enumerate(request.results):
            ids = [f"{CDI_KIND}={cdi}"] if n == 0 else []
            if gpu_cdi_kind is not None:
                index = parse_device_name(result["device"])
                assert index is not None  # checked in _requests
                ids.append(f"{gpu_cdi_kind}={by_index[index[0]].uuid}")
            share = result.get("shareID")
            devices.append(
                PreparedDevice(
                    name, pool, result["device"], None if share is None else str(share), tuple(ids)
                )
            )
    return PreparedClaim(ref, tuple(devices), envs)

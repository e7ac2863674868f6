"""Which vGPUs to prefer for a request (``GetPreferredAllocation``): bundle or spread. Pure.

The kubelet asks at pod admission, passing the vGPUs that are free and healthy; it decides which
ones a container gets, and only asks us for a preference. Two rules hold for both policies:

* never split a request across GPUs when one GPU can hold all of it (a split request gets one
  memory cap per GPU, and is refused outright without ``--allow-multi-gpu``);
* ``must_include`` vGPUs (already chosen by the kubelet, e.g. for NUMA alignment) are always in
  the answer, and their GPU is used first.

The policies are the placement routine's (``placement.policy.preference``), over this GPU's
room (its free vGPUs) and used share (its vGPUs taken): ``bundle`` is best fit, the GPU with the
fewest free vGPUs that still holds the whole request, so small pods fill partly used GPUs and a
big request still finds a whole GPU after many small ones; ``spread`` is least used first, more of
a GPU's compute for each pod at the cost of fragmenting free vGPUs across GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

from sharedserve.allocator.inventory import Inventory, PhysicalGpu, VGpu
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import InvalidInput
from sharedserve.placement.policy import preference

__all__ = ["preferred_allocation"]


def _sort_key(policy: PlacementPolicy, gpu: PhysicalGpu, free: int) -> tuple[float, ...]:
    used_share = (gpu.replicas - free) / gpu.replicas
    return (*preference(policy, room=float(free), used=used_share), gpu.index)


def preferred_allocation(
    inventory: Inventory,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    policy: PlacementPolicy,
    *,
    allow_multi_gpu: bool = True,
) -> list[str]:
    """``size`` IDs from ``available`` (plus ``must_include``), placed by ``policy``.

    InvalidInput when the request cannot be met from what was offered or names unknown IDs:
    the kubelet never sends such a request, so answering one with a guess would hide a bug.
    Without ``allow_multi_gpu`` it never prefers vGPUs of two GPUs, which Allocate would refuse.
    """
    if size < 1:
        raise InvalidInput(f"allocation_size must be at least 1, got {size}")
    must = inventory.resolve(must_include)
    if len(must) > size:
        raise InvalidInput(
            f"must_include_deviceIDs holds {len(must)} devices, more than allocation_size {size}"
        )
    must_ids = {v.id for v in must}
    offered = inventory.resolve(i for i in available if i not in must_ids)
    free: dict[str, list[VGpu]] = {}
    for vgpu in (*must, *offered):
        free.setdefault(vgpu.gpu.uuid, []).append(vgpu)
    if sum(len(v) for v in free.values()) < size:
        raise InvalidInput(
            f"allocation_size {size} exceeds the {len(must) + len(offered)} devices offered"
        )
    for vgpus in free.values():
        # Must-include first, then lowest slots: answers are deterministic and easy to read.
        vgpus.sort(key=lambda v: (v.id not in must_ids, v.slot))
    gpus = {uuid: vgpus[0].gpu for uuid, vgpus in free.items()}

    must_gpus = {v.gpu.uuid for v in must}
    if len(must_gpus) > 1:
        candidates: list[str] = []  # the kubelet already split the request
    elif must_gpus:
        (only,) = must_gpus
        candidates = [only] if len(free[only]) >= size else []
    else:
        candidates = [uuid for uuid, vgpus in free.items() if len(vgpus) >= size]
    if candidates:
        best = min(candidates, key=lambda u: _sort_key(policy, gpus[u], len(free[u])))
        return [v.id for v in free[best][:size]]
    if not allow_multi_gpu:
        why = (
            f"must_include_deviceIDs span {len(must_gpus)} GPUs"
            if len(must_gpus) > 1
            else f"no GPU has {size} of the devices offered"
        )
        raise InvalidInput(
            f"{why}, and a container gets vGPUs of one GPU unless the allocator runs with "
            "--allow-multi-gpu (Allocate would refuse this)"
        )

    # No single GPU holds it: use as few GPUs as possible, the must-include ones first, then
    # the GPUs with most room (ties in NVML order).
    order = sorted(free, key=lambda u: (u not in must_gpus, -len(free[u]), gpus[u].index))
    chosen = [v.id for v in must]
    for uuid in order:
        for vgpu in free[uuid]:
            if len(chosen) == size:
                return chosen
            if vgpu.id not in must_ids:
                chosen.append(vgpu.id)
    return chosen

"""Table-driven tests of GetPreferredAllocation's placement (bundle, spread) and fragmentation."""

from __future__ import annotations

import pytest

from sharedserve.allocator.inventory import Inventory, Sizing, build_inventory
from sharedserve.allocator.placement import preferred_allocation
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import InvalidInput
from sharedserve.gpu.info import GpuInfo
from sharedserve.placement import Host, Replicas, place

BUNDLE, SPREAD = PlacementPolicy.BUNDLE, PlacementPolicy.SPREAD


def inventory(*replicas: int) -> Inventory:
    """GPUs GPU-A, GPU-B, ... with the given vGPU counts (1 GiB per vGPU)."""
    gpus = [
        GpuInfo(f"GPU-{chr(65 + i)}", i, "T", memory_mib=count * 1024, numa_node=0)
        for i, count in enumerate(replicas)
    ]
    return build_inventory(gpus, Sizing(vgpu_memory_mib=1024))


def ids(spec: str) -> list[str]:
    """``"A0 A1 B3"`` -> ``["GPU-A::0", "GPU-A::1", "GPU-B::3"]``."""
    return [f"GPU-{item[0]}::{item[1:]}" for item in spec.split()]


def free(inv: Inventory, **slots: str) -> list[str]:
    """Available IDs: for each GPU letter, the free slots (``A="0 1"``); others all free."""
    out = []
    for gpu in inv.gpus:
        letter = gpu.uuid[-1]
        taken = slots.get(letter)
        chosen = range(gpu.replicas) if taken is None else [int(s) for s in taken.split()]
        out += [f"{gpu.uuid}::{s}" for s in chosen]
    return out


@pytest.mark.parametrize(
    ("replicas", "available", "must", "size", "policy", "expected"),
    [
        pytest.param((4, 4), {"A": "3"}, "", 1, BUNDLE, "A3", id="bundle-fullest-that-fits"),
        pytest.param((4, 4), {"A": "3"}, "", 2, BUNDLE, "B0 B1", id="bundle-skips-too-full"),
        pytest.param((4, 4), {"A": "3"}, "", 1, SPREAD, "B0", id="spread-least-loaded"),
        pytest.param((4, 4), {}, "", 1, BUNDLE, "A0", id="bundle-tie-lowest-index"),
        pytest.param((4, 4), {}, "", 1, SPREAD, "A0", id="spread-tie-lowest-index"),
        pytest.param(
            (4, 4), {"A": "1 3", "B": "2 3"}, "", 2, BUNDLE, "A1 A3", id="bundle-tie-free-count"
        ),
        pytest.param(
            (4, 8),
            {"A": "2 3", "B": "1 4 7"},
            "",
            3,
            SPREAD,
            "B1 B4 B7",
            id="spread-never-splits-when-one-gpu-fits",
        ),
        pytest.param(
            (4, 8),
            {"A": "2 3", "B": "1 4 7"},
            "",
            2,
            SPREAD,
            "A2 A3",
            id="spread-used-share-not-count",
        ),
        pytest.param(
            (4, 20), {"A": "2 3"}, "", 2, BUNDLE, "A2 A3", id="bundle-mixed-sizes-best-fit"
        ),
        pytest.param((4, 20), {"A": "2 3"}, "", 2, SPREAD, "B0 B1", id="spread-mixed-sizes"),
        pytest.param((4, 4), {"B": "3"}, "A2", 2, BUNDLE, "A2 A0", id="must-include-first"),
        pytest.param(
            (4, 4), {"A": "3"}, "A3", 2, BUNDLE, "A3 B0", id="must-include-gpu-too-full-splits"
        ),
        pytest.param((4, 4), {}, "A3 B1", 3, BUNDLE, "A3 B1 A0", id="must-include-already-split"),
        pytest.param((4, 4), {"A": "0 1", "B": "2 3"}, "", 3, BUNDLE, "A0 A1 B2", id="split"),
        pytest.param(
            (4, 4, 4),
            {"A": "0", "B": "1 2", "C": "3"},
            "",
            3,
            SPREAD,
            "B1 B2 A0",
            id="split-most-free-gpu-first",
        ),
        pytest.param((2, 2), {}, "", 4, BUNDLE, "A0 A1 B0 B1", id="split-everything"),
    ],
)
def test_preferred_allocation(
    replicas: tuple[int, ...],
    available: dict[str, str],
    must: str,
    size: int,
    policy: PlacementPolicy,
    expected: str,
) -> None:
    inv = inventory(*replicas)
    offered = free(inv, **available)
    must_ids = ids(must) if must else []
    assert preferred_allocation(inv, offered, must_ids, size, policy) == ids(expected)


@pytest.mark.parametrize(
    ("available", "must", "size", "fragment"),
    [
        pytest.param(["GPU-A::0"], [], 2, "exceeds the 1 devices", id="too-few-offered"),
        pytest.param(["GPU-A::0", "GPU-Z::0"], [], 1, "unknown device", id="unknown-available"),
        pytest.param(["GPU-A::0"], ["GPU-A::9"], 1, "unknown device", id="unknown-must"),
        pytest.param(ids("A0 A1"), ids("A0 A1"), 1, "more than allocation_size", id="must>size"),
        pytest.param(ids("A0"), [], 0, "at least 1", id="size-zero"),
        pytest.param(ids("A0 A0"), [], 1, "listed twice", id="repeated-id"),
    ],
)
def test_preferred_allocation_rejects(
    available: list[str], must: list[str], size: int, fragment: str
) -> None:
    with pytest.raises(InvalidInput, match=fragment) as info:
        preferred_allocation(inventory(4, 4), available, must, size, BUNDLE)
    assert info.value.grpc_code == "INVALID_ARGUMENT"


class Node:
    """The kubelet's side of placement: it offers what is free and takes our preference."""

    def __init__(self, policy: PlacementPolicy, *replicas: int) -> None:
        self.inv = inventory(*replicas)
        self.policy = policy
        self.allocated: set[str] = set()

    def admit(self, size: int) -> list[str]:
        offered = [i for i in self.inv.vgpu_ids if i not in self.allocated]
        chosen = preferred_allocation(self.inv, offered, [], size, self.policy)
        assert len(chosen) == size and not self.allocated & set(chosen)
        self.allocated |= set(chosen)
        return chosen

    def gpus_of(self, chosen: list[str]) -> set[str]:
        return {i.split("::")[0] for i in chosen}


@pytest.mark.parametrize(
    ("policy", "single_gpu"), [(BUNDLE, True), (SPREAD, False)], ids=["bundle", "spread"]
)
def test_fragmentation_four_small_then_one_big(policy: PlacementPolicy, single_gpu: bool) -> None:
    """IBM's bundle vs spread example: 2 GPUs x 4 vGPUs, four 1-vGPU pods, then a 4-vGPU pod.

    Bundle packs the small pods onto GPU A, so the big one gets all of GPU B; spread puts two
    on each GPU, and the big one must be split (which Allocate refuses by default).
    """
    node = Node(policy, 4, 4)
    small = [node.admit(1) for _ in range(4)]
    assert len(node.gpus_of([i for pod in small for i in pod])) == (1 if single_gpu else 2)
    big = node.admit(4)
    assert (len(node.gpus_of(big)) == 1) is single_gpu


@pytest.mark.parametrize(
    ("policy", "single_gpu"), [(BUNDLE, True), (SPREAD, False)], ids=["bundle", "spread"]
)
def test_fragmentation_with_churn(policy: PlacementPolicy, single_gpu: bool) -> None:
    """4 GPUs x 8 vGPUs: 20 small pods, every third one ends, 6 more arrive, then an 8-vGPU
    request. Bundle fills the holes the ended pods left and keeps a GPU whole."""
    node = Node(policy, 8, 8, 8, 8)
    pods = [node.admit(1) for _ in range(20)]
    for pod in pods[::3]:
        node.allocated -= set(pod)
    for _ in range(6):
        node.admit(1)
    assert len(node.allocated) == 19
    offered = [i for i in node.inv.vgpu_ids if i not in node.allocated]
    big = preferred_allocation(node.inv, offered, [], 8, policy)
    assert (len(node.gpus_of(big)) == 1) is single_gpu


def test_bundle_keeps_whole_gpus_free_for_many_small_pods() -> None:
    """After 12 one-vGPU pods on 4 GPUs x 8, bundle leaves two GPUs untouched; spread none."""
    for policy, untouched in ((BUNDLE, 2), (SPREAD, 0)):
        node = Node(policy, 8, 8, 8, 8)
        for _ in range(12):
            node.admit(1)
        used = node.gpus_of(sorted(node.allocated))
        assert len(node.inv.gpus) - len(used) == untouched, policy


@pytest.mark.parametrize(("policy", "gpu"), [(BUNDLE, 0), (SPREAD, 1)])
def test_the_kubelet_adapter_and_the_placement_routine_prefer_the_same_gpu(
    policy: PlacementPolicy, gpu: int
) -> None:
    # Two GPUs of four 1 GiB vGPUs, three of the first taken; one more 1 GiB request. The
    # policies are defined once (placement.policy): both answer the same GPU.
    inv = inventory(4, 4)
    (chosen,) = preferred_allocation(inv, free(inv, A="3"), [], 1, policy)
    assert chosen.startswith(f"GPU-{'AB'[gpu]}::")
    host = Host([GpuInfo("GPU-A", 0, "T", 4096), GpuInfo("GPU-B", 1, "T", 4096)])
    taken = Replicas("taken", 3, 1024, gpu=0)
    placement = place([taken, Replicas("m", 1, 1024)], host, reserve_mib=0, policy=policy)
    assert placement.gpus_of("m") == [gpu]

"""Table-driven tests of GPUs -> vGPUs: counts, IDs, memory per vGPU, lookups, message size."""

from __future__ import annotations

import pytest

from sharedserve.allocator.deviceplugin.plugin import DeviceBoard
from sharedserve.allocator.health_state import Health
from sharedserve.allocator.inventory import (
    MAX_DEVICE_ID_LENGTH,
    MAX_REPLICAS,
    Sizing,
    build_inventory,
    replicas_for,
)
from sharedserve.errors import ConfigError, InvalidInput
from sharedserve.gpu.info import GpuInfo

UUID0 = "GPU-8f1c2d3e-0000-4000-8000-000000000000"
UUID1 = "GPU-8f1c2d3e-1111-4000-8000-111111111111"
K80 = GpuInfo(UUID0, 0, "Tesla K80", 11441, numa_node=0)
A100 = GpuInfo(UUID1, 1, "A100-SXM4-80GB", 81920, numa_node=1)


@pytest.mark.parametrize(
    ("memory_mib", "sizing", "expected"),
    [
        pytest.param(16384, Sizing(vgpus_per_gpu=4), 4, id="replicas"),
        pytest.param(81920, Sizing(vgpus_per_gpu=4), 4, id="replicas-ignore-size"),
        pytest.param(16384, Sizing(vgpu_memory_mib=4096), 4, id="by-memory-16g"),
        pytest.param(81920, Sizing(vgpu_memory_mib=4096), 20, id="by-memory-80g"),
        pytest.param(11441, Sizing(vgpu_memory_mib=4096), 2, id="by-memory-floor"),
        pytest.param(2048, Sizing(vgpu_memory_mib=4096), 0, id="smaller-than-one-vgpu"),
        pytest.param(81920, Sizing(vgpu_memory_mib=1), MAX_REPLICAS, id="capped"),
        pytest.param(16384, Sizing(vgpus_per_gpu=7, vgpu_memory_mib=8192), 2, id="memory-wins"),
    ],
)
def test_replicas_for(memory_mib: int, sizing: Sizing, expected: int) -> None:
    assert replicas_for(memory_mib, sizing) == expected


@pytest.mark.parametrize(
    ("sizing", "counts", "per_vgpu_mib"),
    [
        pytest.param(Sizing(vgpus_per_gpu=4), [4, 4], [2860, 20480], id="replicas-floor-memory"),
        pytest.param(Sizing(vgpus_per_gpu=1), [1, 1], [11441, 81920], id="one-per-gpu"),
        pytest.param(Sizing(vgpu_memory_mib=5120), [2, 16], [5120, 5120], id="mixed-models"),
        pytest.param(Sizing(vgpu_memory_mib=20000), [0, 4], [20000, 20000], id="small-gpu-none"),
    ],
)
def test_build_inventory(sizing: Sizing, counts: list[int], per_vgpu_mib: list[int]) -> None:
    inventory = build_inventory([A100, K80], sizing)  # discovery order is not index order
    assert [g.uuid for g in inventory.gpus] == [UUID0, UUID1]
    assert [g.replicas for g in inventory.gpus] == counts
    assert [g.vgpu_memory_mib for g in inventory.gpus] == per_vgpu_mib
    assert [g.numa_node for g in inventory.gpus] == [0, 1]
    expected_ids = [f"{UUID0}::{n}" for n in range(counts[0])]
    expected_ids += [f"{UUID1}::{n}" for n in range(counts[1])]
    assert inventory.vgpu_ids == expected_ids
    assert len(inventory) == sum(counts)
    for gpu in inventory.gpus:
        # The caps handed out never add up to more than the GPU has.
        assert gpu.replicas * gpu.vgpu_memory_mib <= gpu.memory_mib


def test_ids_map_back_to_their_gpu() -> None:
    inventory = build_inventory([K80, A100], Sizing(vgpus_per_gpu=64))
    vgpu = inventory.get(f"{UUID1}::63")
    assert vgpu is not None and (vgpu.gpu.uuid, vgpu.slot) == (UUID1, 63)
    assert inventory.get(f"{UUID1}::64") is None
    assert max(len(i) for i in inventory.vgpu_ids) <= MAX_DEVICE_ID_LENGTH


@pytest.mark.parametrize(
    ("gpus", "sizing", "fragment"),
    [
        pytest.param([K80, K80], Sizing(), "listed twice", id="duplicate-uuid"),
        pytest.param(
            [GpuInfo("GPU-" + "f" * 60, 0, "x", 100)], Sizing(), "kubelet allows", id="id-too-long"
        ),
        pytest.param([GpuInfo("GPU-a::b", 0, "x", 100)], Sizing(), "cannot name", id="sep-in-uuid"),
        pytest.param([K80], Sizing(vgpus_per_gpu=0), "--vgpus-per-gpu", id="zero-replicas"),
        pytest.param(
            [K80], Sizing(vgpus_per_gpu=MAX_REPLICAS + 1), "--vgpus-per-gpu", id="too-many"
        ),
        pytest.param([K80], Sizing(vgpu_memory_mib=0), "--vgpu-memory-mib", id="zero-memory"),
    ],
)
def test_build_inventory_rejects(gpus: list[GpuInfo], sizing: Sizing, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        build_inventory(gpus, sizing)


@pytest.mark.parametrize(
    ("ids", "fragment"),
    [
        pytest.param(["GPU-nope::0"], "unknown device ID(s) 'GPU-nope::0'", id="unknown"),
        pytest.param([f"{UUID0}::4"], "unknown", id="slot-out-of-range"),
        pytest.param([f"{UUID0}::0", f"{UUID0}::0"], "listed twice", id="repeated"),
        pytest.param([f"x{n}" for n in range(5)], "and 2 more", id="many-unknown-summarised"),
    ],
)
def test_resolve_rejects(ids: list[str], fragment: str) -> None:
    inventory = build_inventory([K80], Sizing(vgpus_per_gpu=4))
    with pytest.raises(InvalidInput, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        inventory.resolve(ids)


def test_list_and_watch_message_for_8_gpus_x_64_is_small() -> None:
    """The kubelet refuses gRPC messages over 4 MiB; 8 x 64 vGPUs stay far below it."""
    gpus = [
        GpuInfo(f"GPU-8f1c2d3e-{i:04d}-4000-8000-{i:012d}", i, "H100", 81559, numa_node=i // 4)
        for i in range(8)
    ]
    inventory = build_inventory(gpus, Sizing(vgpus_per_gpu=64))
    board = DeviceBoard(inventory, dict.fromkeys((g.uuid for g in gpus), Health.HEALTHY))
    message = board.response
    assert len(message.devices) == 512
    assert message.devices[511].topology.nodes[0].ID == 1
    assert message.ByteSize() < 40 * 1024  # ~63 bytes a device

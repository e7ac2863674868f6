"""Table-driven tests of what Allocate grants a container: the env contract, MPS and CDI."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedserve.allocator.allocation import GrantOptions, MountSpec, container_grant, grants_by_gpu
from sharedserve.allocator.inventory import Inventory, Sizing, build_inventory
from sharedserve.errors import InvalidInput
from sharedserve.gpu.info import GpuInfo

A = "GPU-aaaaaaaa-0000-4000-8000-000000000000"
B = "GPU-bbbbbbbb-0000-4000-8000-000000000000"


FOUR = Sizing(vgpus_per_gpu=4)
PLAIN = GrantOptions()


def inventory(sizing: Sizing = FOUR) -> Inventory:
    # B is listed first but has the higher index: grants follow NVML order, not discovery order.
    return build_inventory([GpuInfo(B, 1, "A100", 81920, 1), GpuInfo(A, 0, "T4", 15360, 0)], sizing)


def grant(ids: list[str], options: GrantOptions = PLAIN, **kw: Sizing) -> dict[str, str]:
    inv = inventory(**kw)
    return container_grant(
        grants_by_gpu(inv, ids, allow_multi_gpu=options.allow_multi_gpu), options
    ).envs


@pytest.mark.parametrize(
    ("ids", "sizing", "fraction", "mib"),
    [
        pytest.param([f"{A}::0"], Sizing(vgpus_per_gpu=4), "0.25", "3840", id="one-of-four"),
        pytest.param(
            [f"{A}::3", f"{A}::1"], Sizing(vgpus_per_gpu=4), "0.5", "7680", id="two-of-four"
        ),
        pytest.param([f"{A}::0"], Sizing(vgpus_per_gpu=3), "0.333333", "5120", id="third"),
        pytest.param([f"{A}::0"], Sizing(vgpus_per_gpu=1), "1.0", "15360", id="whole-gpu"),
        pytest.param(
            [f"{B}::0"],
            Sizing(vgpu_memory_mib=6000),
            "0.073242",  # 6000 of 81920 MiB, not 1 of its 13 vGPUs (which would be 6301 MiB)
            "6000",
            id="by-memory-mib-wins",
        ),
    ],
)
def test_single_gpu_envs(ids: list[str], sizing: Sizing, fraction: str, mib: str) -> None:
    envs = grant(ids, sizing=sizing)
    gpu = ids[0].split("::")[0]
    assert envs == {
        "NVIDIA_VISIBLE_DEVICES": gpu,
        "SHAREDSERVE_VGPU_IDS": ",".join(sorted(ids)),
        "SHAREDSERVE_GPU_MEMORY_FRACTION": fraction,
        "SHAREDSERVE_GPU_MEMORY_MIB": mib,
    }
    total = {A: 15360, B: 81920}[gpu]
    assert float(fraction) > 0 and float(fraction) * total <= int(mib)


def test_multi_gpu_refused_by_default() -> None:
    with pytest.raises(InvalidInput, match="--allow-multi-gpu") as info:
        grant([f"{A}::0", f"{B}::0"])
    assert info.value.grpc_code == "INVALID_ARGUMENT"


def test_multi_gpu_one_value_per_gpu_in_nvml_order() -> None:
    envs = grant([f"{B}::1", f"{A}::0", f"{B}::0"], GrantOptions(allow_multi_gpu=True))
    assert envs["NVIDIA_VISIBLE_DEVICES"] == f"{A},{B}"
    assert envs["SHAREDSERVE_VGPU_IDS"] == f"{A}::0,{B}::0,{B}::1"
    assert envs["SHAREDSERVE_GPU_MEMORY_FRACTION"] == "0.25,0.5"
    assert envs["SHAREDSERVE_GPU_MEMORY_MIB"] == "3840,40960"


@pytest.mark.parametrize(
    ("ids", "fragment"),
    [
        pytest.param([], "no device IDs", id="empty"),
        pytest.param(["GPU-x::0"], "unknown device", id="unknown"),
        pytest.param([f"{A}::0", f"{A}::0"], "listed twice", id="repeated"),
    ],
)
def test_plan_rejects(ids: list[str], fragment: str) -> None:
    with pytest.raises(InvalidInput, match=fragment):
        grants_by_gpu(inventory(), ids, allow_multi_gpu=True)


def test_mps_sets_per_pod_limits_and_mounts_pipes() -> None:
    options = GrantOptions(mps_pipe_dir=Path("/run/nvidia/mps"))
    result = container_grant(
        grants_by_gpu(inventory(), [f"{B}::2"], allow_multi_gpu=False), options
    )
    assert result.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/run/nvidia/mps"
    assert result.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    # The container sees only its GPU, as CUDA device 0, whatever its index on the host (1).
    assert result.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"
    assert result.mounts == (MountSpec("/run/nvidia/mps", "/run/nvidia/mps", read_only=False),)


def test_mps_shm_dir_becomes_dev_shm() -> None:
    options = GrantOptions(mps_pipe_dir=Path("/run/mps/pipe"), mps_shm_dir=Path("/run/mps/shm"))
    result = container_grant(
        grants_by_gpu(inventory(), [f"{A}::0"], allow_multi_gpu=False), options
    )
    assert result.mounts[1] == MountSpec("/dev/shm", "/run/mps/shm", read_only=False)


def test_mps_multi_gpu_uses_smallest_share_and_container_ordinals() -> None:
    options = GrantOptions(allow_multi_gpu=True, mps_pipe_dir=Path("/tmp/nvidia-mps"))
    ids = [f"{A}::0", f"{A}::1", f"{A}::2", f"{B}::0"]
    envs = container_grant(grants_by_gpu(inventory(), ids, allow_multi_gpu=True), options).envs
    assert envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=11520M,1=20480M"
    assert envs["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_mps_thread_percentage_never_zero() -> None:
    options = GrantOptions(mps_pipe_dir=Path("/tmp/nvidia-mps"))
    inv = inventory(Sizing(vgpus_per_gpu=200))
    envs = container_grant(grants_by_gpu(inv, [f"{A}::0"], allow_multi_gpu=False), options).envs
    assert envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "1"


def test_no_mps_no_mps_envs_or_mounts() -> None:
    result = container_grant(
        grants_by_gpu(inventory(), [f"{A}::0"], allow_multi_gpu=False), GrantOptions()
    )
    assert not [k for k in result.envs if k.startswith("CUDA_")]
    assert result.mounts == () and result.cdi_devices == ()


def test_cdi_names_each_gpu_by_uuid() -> None:
    options = GrantOptions(allow_multi_gpu=True, cdi_kind="nvidia.com/gpu")
    result = container_grant(
        grants_by_gpu(inventory(), [f"{B}::0", f"{A}::0"], allow_multi_gpu=True), options
    )
    assert result.cdi_devices == (f"nvidia.com/gpu={A}", f"nvidia.com/gpu={B}")

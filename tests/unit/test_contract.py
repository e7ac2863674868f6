"""The env contract: what every writer writes, the one reader reads back, exactly."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharedserve.allocator.allocation import GrantOptions, container_grant, grants_by_gpu
from sharedserve.allocator.dra.cdi import spec as cdi_spec
from sharedserve.allocator.dra.claims import ClaimRef, PreparedClaim, prepare_claim
from sharedserve.allocator.inventory import Sizing, build_inventory
from sharedserve.config import CapSource, GpuCapRequest
from sharedserve.contract import (
    CUDA_VISIBLE_DEVICES,
    DRA_DRIVER,
    DRA_MEMORY,
    FRACTION_DIGITS,
    GPU_MEMORY_FRACTION,
    GPU_MEMORY_MIB,
    NVIDIA_VISIBLE_DEVICES,
    VARIABLES,
    GpuShare,
    Grant,
    MpsLimits,
    fraction_of,
    mib_of,
    vgpu_id,
    without_grant,
)
from sharedserve.errors import ConfigError
from sharedserve.gpu.info import GpuInfo
from sharedserve.limits.gpu import GpuCap, parse_cap_request, resolve_cap

UUIDS = st.uuids().map(lambda u: f"GPU-{u}")
FRACTIONS = st.floats(min_value=0.0, max_value=1.0, exclude_min=True, allow_nan=False)
MIBS = st.integers(min_value=1, max_value=10**7)


@st.composite
def grants(draw: st.DrawFn) -> Grant:
    uuids = draw(st.lists(UUIDS, min_size=1, max_size=4, unique=True))
    with_fraction, with_mib = draw(st.booleans()), draw(st.booleans())
    gpus = []
    for uuid in uuids:
        slots = draw(st.lists(st.integers(0, 63), max_size=3, unique=True))
        gpus.append(
            GpuShare(
                uuid,
                draw(FRACTIONS) if with_fraction else None,
                draw(MIBS) if with_mib else None,
                tuple(vgpu_id(uuid, s) for s in sorted(slots)),
            )
        )
    mps = None
    if with_mib and draw(st.booleans()):
        mps = MpsLimits("/run/nvidia/mps", draw(st.integers(1, 100)))
    bare = draw(st.booleans())
    # Set by hand on a bare host (an index, or empty to hide every GPU); bare_host implies it.
    visible = None if bare else draw(st.sampled_from([None, "", "0", "1,0"]))
    return Grant(tuple(gpus), mps, bare_host=bare, visible_devices=visible)


@given(grants())
def test_the_contract_names_every_variable_it_writes(grant: Grant) -> None:
    assert set(grant.to_env()) <= VARIABLES
    assert without_grant({**grant.to_env(), "PATH": "/bin", "SHAREDSERVE_LOG_LEVEL": "info"}) == {
        "PATH": "/bin",
        "SHAREDSERVE_LOG_LEVEL": "info",
    }


@pytest.mark.parametrize("keyword", ["all", "none", "void", "ALL"])
def test_the_container_runtimes_keywords_are_no_grant(keyword: str) -> None:
    # NVIDIA's images set NVIDIA_VISIBLE_DEVICES=all by default: that names no GPU of a grant.
    grant = Grant.from_env({NVIDIA_VISIBLE_DEVICES: keyword, GPU_MEMORY_FRACTION: "0.5"})
    assert grant.gpus == (GpuShare(None, 0.5, None),)


@pytest.mark.parametrize(
    ("env", "visible"),
    [
        ({}, None),
        ({CUDA_VISIBLE_DEVICES: ""}, ""),
        ({CUDA_VISIBLE_DEVICES: " 1 "}, "1"),
        ({NVIDIA_VISIBLE_DEVICES: "GPU-a", CUDA_VISIBLE_DEVICES: "GPU-a"}, "GPU-a"),
        ({NVIDIA_VISIBLE_DEVICES: "GPU-a", CUDA_VISIBLE_DEVICES: "0"}, "0"),
    ],
)
def test_what_cuda_will_see(env: dict[str, str], visible: str | None) -> None:
    assert Grant.from_env(env).cuda_visible_devices == visible


@given(grants())
def test_round_trip(grant: Grant) -> None:
    assert Grant.from_env(grant.to_env()) == grant


@given(st.lists(FRACTIONS, min_size=1, max_size=4), st.booleans())
def test_round_trip_without_a_gpu_to_name(fractions: list[float], with_mib: bool) -> None:
    # A packer without a GPU grants a share of nothing in particular.
    shares = tuple(GpuShare(None, f, 100 if with_mib else None) for f in fractions)
    assert Grant.from_env(Grant(shares).to_env()) == Grant(shares)


def test_no_variables_is_no_gpu() -> None:
    assert Grant.from_env({}) == Grant(())
    assert Grant.from_env({GPU_MEMORY_FRACTION: "  ", GPU_MEMORY_MIB: ""}) == Grant(())


def test_a_third_is_never_rounded_up() -> None:
    env = Grant((GpuShare("GPU-a", 1 / 3, 5461),)).to_env()
    assert env[GPU_MEMORY_FRACTION] == "0.3333333333333333"
    assert Grant.from_env(env).gpus[0].fraction == 1 / 3


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({NVIDIA_VISIBLE_DEVICES: "GPU-a,GPU-b", GPU_MEMORY_MIB: "4096"}, "differ in length"),
        ({GPU_MEMORY_FRACTION: "0.5,", GPU_MEMORY_MIB: ""}, "empty entry"),
        ({GPU_MEMORY_FRACTION: "0.5,abc"}, GPU_MEMORY_FRACTION),
        ({GPU_MEMORY_FRACTION: "1.5"}, GPU_MEMORY_FRACTION),
        ({GPU_MEMORY_MIB: "4096,0"}, GPU_MEMORY_MIB),
        ({GPU_MEMORY_MIB: "1.5"}, GPU_MEMORY_MIB),
        (
            {"CUDA_MPS_PIPE_DIRECTORY": "/run/mps", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "0"},
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        ),
    ],
)
def test_bad_contract_names_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Grant.from_env(env)


def _gpu(uuid: str, index: int, mib: int) -> GpuInfo:
    return GpuInfo(uuid=uuid, index=index, name="GPU", memory_mib=mib, numa_node=0)


def test_the_allocators_multi_gpu_grant_is_what_serve_reads() -> None:
    # Was a ConfigError at start: the allocator wrote "4096,40960", serve read one number.
    inventory = build_inventory(
        [_gpu("GPU-a", 0, 16384), _gpu("GPU-b", 1, 81920)], Sizing(vgpus_per_gpu=4)
    )
    ids = ["GPU-b::0", "GPU-a::0", "GPU-b::1"]
    options = GrantOptions(allow_multi_gpu=True, mps_pipe_dir=Path("/run/mps"))
    envs = container_grant(grants_by_gpu(inventory, ids, allow_multi_gpu=True), options).envs
    grant = Grant.from_env(envs)
    assert [(g.uuid, g.fraction, g.mib) for g in grant.gpus] == [
        ("GPU-a", 0.25, 4096),
        ("GPU-b", 0.5, 40960),
    ]
    assert grant.gpus[1].vgpu_ids == ("GPU-b::0", "GPU-b::1")
    assert grant.mps == MpsLimits("/run/mps", 25)
    request = parse_cap_request(None, None, Grant.from_env(envs))
    assert request == GpuCapRequest.of(CapSource.ENV, mib=4096)


def test_serve_takes_the_first_gpu_of_a_multi_gpu_grant(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        request = parse_cap_request(None, None, Grant.from_env({GPU_MEMORY_FRACTION: "0.25,0.5"}))
    assert request == GpuCapRequest.of(CapSource.ENV, fraction=0.25)
    assert "grants 2 GPUs" in caplog.text and "first" in caplog.text


# --- the one MiB <-> fraction conversion -------------------------------------------------------

GIB_80 = 81920
GPU_SIZES = st.integers(min_value=1, max_value=10**6)  # up to ~976 GiB: every MiB has a share


@pytest.mark.parametrize(
    ("mib", "total", "fraction"),
    [
        pytest.param(1, GIB_80, 0.000012, id="1-MiB-of-80-GiB"),  # 12.2e-6, rounded down
        pytest.param(GIB_80, GIB_80, 1.0, id="exactly-full"),
        pytest.param(GIB_80 - 1, GIB_80, 0.999987, id="one-MiB-short"),
        pytest.param(5120, 15360, 0.333333, id="a-third"),
        pytest.param(6000, GIB_80, 0.073242, id="a-vgpu-by-memory"),
        # 0.28 x 25 is 7.000000000000001 in floats: one step lower keeps the product at the cap.
        pytest.param(7, 25, 0.279999, id="float-product-over"),
        pytest.param(1, 10**6, 0.000001, id="one-step"),
    ],
)
def test_fraction_of(mib: int, total: int, fraction: float) -> None:
    assert fraction_of(mib, total) == fraction
    assert fraction_of(mib, total) * total <= mib


@pytest.mark.parametrize(
    ("mib", "total", "fragment"),
    [
        pytest.param(0, GIB_80, "positive", id="zero"),
        pytest.param(-1, GIB_80, "positive", id="negative"),
        pytest.param(1, 0, "positive", id="no-gpu-memory"),
        pytest.param(GIB_80 + 1, GIB_80, f"exceeds the GPU's {GIB_80} MiB", id="over-the-gpu"),
        pytest.param(1, 2 * 10**6 + 1, "give at least 3 MiB", id="finer-than-a-share"),
    ],
)
def test_fraction_of_refuses(mib: int, total: int, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        fraction_of(mib, total)


@pytest.mark.parametrize(
    ("fraction", "total", "mib"),
    [
        pytest.param(0.29, 100, 29, id="0.29-is-29-hundredths"),  # 28.999999999999996 in floats
        pytest.param(1.0, GIB_80, GIB_80, id="exactly-full"),
        pytest.param(0.5, 11441, 5720, id="floors"),  # 5720.5
        pytest.param(1 / 3, 15360, 5119, id="the-float-under-a-third"),  # 5119.99999...
        pytest.param(0.000013, GIB_80, 1, id="1-MiB-of-80-GiB"),  # 1.06
    ],
)
def test_mib_of(fraction: float, total: int, mib: int) -> None:
    assert mib_of(fraction, total) == mib


@pytest.mark.parametrize(
    ("fraction", "total", "fragment"),
    [
        pytest.param(0.0, GIB_80, "in \\(0, 1\\]", id="zero"),
        pytest.param(1.5, GIB_80, "in \\(0, 1\\]", id="over-the-gpu"),
        pytest.param(float("nan"), GIB_80, "in \\(0, 1\\]", id="nan"),
        pytest.param(0.000012, GIB_80, "under 1 MiB", id="under-a-MiB"),  # 0.98 MiB
        pytest.param(0.5, 0, "positive", id="no-gpu-memory"),
    ],
)
def test_mib_of_refuses(fraction: float, total: int, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        mib_of(fraction, total)


@given(st.data(), GPU_SIZES)
def test_fraction_of_never_stands_for_more_than_its_mib(data: st.DataObject, total: int) -> None:
    mib = data.draw(st.integers(min_value=1, max_value=total))
    fraction = fraction_of(mib, total)
    assert 0 < fraction <= 1
    assert fraction * total <= mib  # as floats compute it: what torch applies
    assert len(repr(fraction).split(".")[-1]) <= FRACTION_DIGITS or "e" in repr(fraction)
    # As large as the rounding allows: the next step up would stand for more than the MiB.
    assert mib / total - fraction < 2 / 10**FRACTION_DIGITS
    # Back to MiB: at most the cap, short of it by the rounding alone (a sixth decimal cannot
    # name every MiB of a large GPU, which is why writers write the MiB too).
    if fraction * total >= 1:
        back = mib_of(fraction, total)
        assert mib - 1 - 2 * total // 10**FRACTION_DIGITS <= back <= mib


@given(st.integers(min_value=1, max_value=10**FRACTION_DIGITS), GPU_SIZES)
def test_mib_of_takes_the_share_as_written(steps: int, total: int) -> None:
    # A share as the contract writes it, "0.000123": its MiB are exact in integers.
    fraction = float(f"{steps / 10**FRACTION_DIGITS:.{FRACTION_DIGITS}f}")
    exact = steps * total // 10**FRACTION_DIGITS
    if exact == 0:
        with pytest.raises(ConfigError, match="under 1 MiB"):
            mib_of(fraction, total)
    else:
        assert mib_of(fraction, total) == exact


# --- every writer, read back by the one reader -------------------------------------------------
# The packer's grant is read back the same way in tests/integration/pack/test_pack_contract.py (it
# needs a model on disk).

CARD_MIB = st.integers(min_value=1024, max_value=200_000)  # a 1 GiB to a ~195 GiB card


def assert_served_as_written(env: dict[str, str], gpu: GpuInfo, mib: int) -> None:
    """The grant ``env`` gives one GPU a cap of ``mib``: the reader reads it back, ``serve``
    enforces it, and its fraction never stands for more than the MiB."""
    written = GpuShare(gpu.uuid, fraction_of(mib, gpu.memory_mib), mib)
    grant = Grant.from_env(env)
    assert [(g.uuid, g.fraction, g.mib) for g in grant.gpus] == [
        (written.uuid, written.fraction, written.mib)
    ]
    request = parse_cap_request(None, None, grant)
    assert request == GpuCapRequest.of(CapSource.ENV, mib=mib)
    assert resolve_cap(request, gpu) == GpuCap(written, CapSource.ENV, gpu.memory_mib)
    assert written.fraction is not None and written.fraction * gpu.memory_mib <= mib


@given(CARD_MIB, st.data())
def test_the_device_plugins_grant_is_served_as_written(total: int, data: st.DataObject) -> None:
    gpu = _gpu("GPU-a", 0, total)
    by_memory = st.integers(1, total).map(lambda m: Sizing(vgpu_memory_mib=m))
    inventory = build_inventory([gpu], data.draw(st.just(Sizing()) | by_memory))
    (physical,) = inventory.gpus
    count = data.draw(st.integers(1, physical.replicas))
    ids = [vgpu_id(gpu.uuid, slot) for slot in range(count)]
    envs = container_grant(
        grants_by_gpu(inventory, ids, allow_multi_gpu=False), GrantOptions()
    ).envs
    assert_served_as_written(envs, gpu, count * physical.vgpu_memory_mib)


def _cdi_env(prepared: PreparedClaim) -> dict[str, str]:
    """The env the container runtime applies from the CDI spec the driver writes."""
    (device,) = cdi_spec(prepared)["devices"]
    return dict(item.split("=", 1) for item in device["containerEdits"]["env"])


def _claim(device: str, memory: str | None) -> dict[str, Any]:
    found: dict[str, Any] = {"request": "gpu", "driver": DRA_DRIVER, "pool": "node-a"}
    found["device"] = device
    if memory is not None:
        found["consumedCapacity"] = {DRA_MEMORY: memory}
    return {
        "metadata": {"uid": "uid-1", "namespace": "team", "name": "model-gpu"},
        "status": {"allocation": {"devices": {"results": [found]}}},
    }


@given(CARD_MIB, st.data())
def test_the_dra_drivers_cdi_env_is_served_as_written(total: int, data: st.DataObject) -> None:
    gpu = _gpu("GPU-a", 0, total)
    gpus = build_inventory([gpu], Sizing()).gpus
    ref = ClaimRef("team", "uid-1", "model-gpu")
    if data.draw(st.booleans(), label="slots"):  # the GPU cut into equal slots
        slots = data.draw(st.integers(1, 64))
        body, mib = _claim(f"gpu-0-slot-{slots - 1}", None), total // slots
    else:  # consumable capacity: any amount the scheduler granted
        slots, mib = None, data.draw(st.integers(1, total))
        body = _claim("gpu-0", f"{mib}Mi")
    prepared = prepare_claim(body, ref, pool="node-a", gpus=gpus, slots=slots)
    assert_served_as_written(_cdi_env(prepared), gpu, mib)

"""The env contract: what every writer writes, the one reader reads back, exactly."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharedserve.allocator.allocation import GrantOptions, container_grant, plan
from sharedserve.allocator.inventory import Sizing, build_inventory
from sharedserve.config import CapSource, GpuCapRequest
from sharedserve.contract import (
    CUDA_VISIBLE_DEVICES,
    GPU_MEMORY_FRACTION,
    GPU_MEMORY_MIB,
    NVIDIA_VISIBLE_DEVICES,
    VARIABLES,
    GpuShare,
    Grant,
    MpsLimits,
    vgpu_id,
    without_grant,
)
from sharedserve.errors import ConfigError
from sharedserve.gpu.info import GpuInfo
from sharedserve.limits.gpu import parse_cap_request

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
    envs = container_grant(plan(inventory, ids, allow_multi_gpu=True), options).envs
    grant = Grant.from_env(envs)
    assert [(g.uuid, g.fraction, g.mib) for g in grant.gpus] == [
        ("GPU-a", 0.25, 4096),
        ("GPU-b", 0.5, 40960),
    ]
    assert grant.gpus[1].vgpu_ids == ("GPU-b::0", "GPU-b::1")
    assert grant.mps == MpsLimits("/run/mps", 25)
    request = parse_cap_request(None, None, Grant.from_env(envs))
    assert request == GpuCapRequest(None, 4096, CapSource.ENV)


def test_serve_takes_the_first_gpu_of_a_multi_gpu_grant(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        request = parse_cap_request(None, None, Grant.from_env({GPU_MEMORY_FRACTION: "0.25,0.5"}))
    assert request == GpuCapRequest(0.25, None, CapSource.ENV)
    assert "grants 2 GPUs" in caplog.text and "first" in caplog.text

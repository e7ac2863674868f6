"""The one placement routine, table-driven: heterogeneous replicas (memory with a reserve, busy
share, measured density, spread) onto a host's GPUs or a fleet's, by bundle or spread; and the
policies' preference, which the allocator's kubelet adapter shares. The fleet's properties
(constraints never give, near the lower bound) are tested in test_placement_fleet.py."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sharedserve.contract import mib_of
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import ConfigError
from sharedserve.gpu.info import GpuInfo
from sharedserve.placement import Host, OpenEnded, Placement, Replicas, place, preference

BUNDLE, SPREAD = PlacementPolicy.BUNDLE, PlacementPolicy.SPREAD
RESERVE = 512


def gpu(index: int, memory_mib: int = 16384, healthy: bool = True) -> GpuInfo:
    return GpuInfo(f"GPU-{index:04d}", index, "T4", memory_mib, healthy=healthy)


def layout(placement: Placement) -> dict[int, list[str]]:
    """Each GPU used (by index) and its replicas' models, sorted."""
    return {g.index: sorted(r.model for r in g.replicas) for g in placement.gpus}


def on_host(
    requests: Sequence[Replicas], gpus: Sequence[GpuInfo], policy: PlacementPolicy = BUNDLE
) -> Placement:
    placement = place(requests, Host(gpus), reserve_mib=RESERVE, policy=policy)
    sizes = {g.index: g.memory_mib for g in gpus}
    for g in placement.gpus:  # no GPU over its memory, reserves included
        assert g.memory_mib == sum(r.gpu_memory_mib + RESERVE for r in g.replicas)
        assert g.memory_mib <= sizes[g.index]
        assert g.info is not None and g.info.index == g.index
    count = {r.model: r.replicas for r in requests}
    assert {m: len(placement.gpus_of(m)) for m in count} == count  # every replica, once
    return placement


BIG = Replicas("big", 1, 8192)
SMALL = Replicas("small", 20, 100)


@pytest.mark.parametrize(
    ("requests", "gpus", "policy", "expected"),
    [
        # The host: an 8 GiB model beside twenty small ones, on two 16 GiB GPUs. Equal
        # slots sized to the largest would be 8.5 GiB, two in all; placed by what each takes,
        # the big one's GPU keeps 7 GiB for 12 small ones (12 x 612 MiB) and the rest go on.
        ([BIG, SMALL], [gpu(0), gpu(1)], BUNDLE, {0: ["big"] + ["small"] * 12, 1: ["small"] * 8}),
        # bundle opens the smallest GPU that holds the replica: best fit over GPU sizes.
        ([Replicas("m", 1, 10_000)], [gpu(0, 81920), gpu(1, 16384)], BUNDLE, {1: ["m"]}),
        ([Replicas("m", 1, 20_000)], [gpu(0, 81920), gpu(1, 16384)], BUNDLE, {0: ["m"]}),
        # spread: least used first, every healthy GPU open from the start.
        ([Replicas("m", 3, 100)], [gpu(0), gpu(1), gpu(2)], SPREAD, {0: ["m"], 1: ["m"], 2: ["m"]}),
        ([Replicas("m", 3, 100)], [gpu(0), gpu(1), gpu(2)], BUNDLE, {0: ["m", "m", "m"]}),
        (
            [Replicas("a", 1, 6000), Replicas("b", 2, 100)],
            [gpu(0), gpu(1)],
            SPREAD,
            {0: ["a", "b"], 1: ["b"]},  # b's first on the emptier GPU; its second apart
        ),
        # An unhealthy GPU takes nothing.
        ([Replicas("m", 2, 100)], [gpu(0, healthy=False), gpu(1)], SPREAD, {1: ["m", "m"]}),
        # Pinned replicas go on their GPU first; the rest are placed around them.
        (
            [Replicas("p", 2, 7000, gpu=1), Replicas("m", 2, 7000)],
            [gpu(0), gpu(1)],
            BUNDLE,
            {0: ["m", "m"], 1: ["p", "p"]},
        ),
        # The measured density limits a GPU whatever its room.
        (
            [Replicas("m", 3, 100, max_density=2)],
            [gpu(0), gpu(1)],
            BUNDLE,
            {0: ["m", "m"], 1: ["m"]},
        ),
    ],
)
def test_a_hosts_gpus_take_heterogeneous_replicas(
    requests: list[Replicas],
    gpus: list[GpuInfo],
    policy: PlacementPolicy,
    expected: dict[int, list[str]],
) -> None:
    assert layout(on_host(requests, gpus, policy)) == expected


@pytest.mark.parametrize(
    ("memory", "reserve", "per_gpu"),
    [
        (3500, 512, 4),  # 4 x 4012 = 16048 of 16384 MiB
        (3500, 600, 3),  # 4 x 4100 = 16400: the reserve alone tips it
        (3584, 512, 4),  # 4 x 4096: exactly full still fits
        (4096, 0, 4),
    ],
)
def test_each_replica_keeps_its_reserve_outside_its_memory(
    memory: int, reserve: int, per_gpu: int
) -> None:
    placement = place(
        [Replicas("m", 8, memory)], Host([gpu(0), gpu(1), gpu(2)]), reserve_mib=reserve
    )
    assert len(placement.gpus[0].replicas) == per_gpu
    assert placement.gpus[0].memory_mib == per_gpu * (memory + reserve)


def test_a_cap_given_as_a_fraction_takes_its_share_of_whichever_gpu() -> None:
    requests = [Replicas("f", 2, 0, memory_fraction=0.25)]
    placement = on_host(requests, [gpu(0, 81920), gpu(1, 16383)], SPREAD)
    taken = {g.index: g.replicas[0].gpu_memory_mib for g in placement.gpus}
    assert taken == {0: 20480, 1: mib_of(0.25, 16383)}  # 4095: the contract's rounding down


def test_busy_shares_stay_within_the_target() -> None:
    requests = [Replicas("busy", 3, 100, busy_share=0.5)]
    placement = place(requests, Host([gpu(0), gpu(1), gpu(2)]), reserve_mib=RESERVE, target=0.8)
    assert layout(placement) == {0: ["busy"], 1: ["busy"], 2: ["busy"]}


def test_a_fleet_opens_gpus_as_needed_and_deals_them_to_nodes() -> None:
    # size's side of the host: the same mix on 16 GiB GPUs opened as needed.
    fleet = place([BIG, SMALL], OpenEnded(16384, gpus_per_node=8), reserve_mib=RESERVE)
    host = on_host([BIG, SMALL], [gpu(0), gpu(1)])
    assert len(fleet.gpus) == len(host.gpus) == 2
    assert layout(fleet) == layout(host)
    # A model's first `spread` replicas on different GPUs, and nodes where the fleet has them.
    spread = place(
        [Replicas("m", 6, 100, spread=3)], OpenEnded(16384, gpus_per_node=1), reserve_mib=RESERVE
    )
    assert [g.node for g in spread.gpus] == [0, 1, 2] and spread.unspread == []
    # Past its spread, best fit: the rest fill the first GPU rather than open or spread.
    assert [len(g.replicas) for g in spread.gpus] == [4, 1, 1]


@pytest.mark.parametrize(
    ("requests", "gpus", "message"),
    [
        (
            [Replicas("m", 5, 7000)],  # 2 x 7512 MiB to a GPU
            [gpu(0), gpu(1)],
            r"1 of 5 replicas fit no GPU on this host: 1 of m \(7,000 MiB \+ 512 MiB reserve "
            r"each\); GPU 0 1,360 of 16,384 MiB free \(2 replicas\); GPU 1 1,360 of 16,384",
        ),
        (
            [Replicas("a", 1, 12_000), Replicas("b", 2, 6000)],
            [gpu(0), gpu(1, healthy=False)],
            r"2 of 3 replicas fit no GPU.*2 of b \(6,000 MiB.*GPU 0 3,872 of 16,384 MiB free "
            r"\(1 replicas\); GPU 1 unhealthy",
        ),
        (
            [Replicas("huge", 1, 20_000)],
            [gpu(0), gpu(1)],
            r"model huge: one replica needs 20,512 MiB \(with its reserve\).*the largest "
            r"healthy GPU has 16,384 MiB",
        ),
        ([Replicas("m", 1, 100)], [gpu(0, healthy=False)], "every GPU on this host is unhealthy"),
        ([Replicas("p", 1, 100, gpu=1)], [gpu(0), gpu(1, healthy=False)], "GPU 1 is unhealthy"),
        ([Replicas("p", 1, 100, gpu=7)], [gpu(0)], "GPU 7 names no GPU on this host"),
        ([Replicas("m", 1, 1), Replicas("m", 1, 1)], [gpu(0)], "name a model twice: m$"),
    ],
)
def test_a_mix_that_does_not_fit_is_refused_with_its_figures(
    requests: list[Replicas], gpus: list[GpuInfo], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        place(requests, Host(gpus), reserve_mib=RESERVE)


def test_a_fleet_over_max_gpus_is_refused_with_the_count() -> None:
    with pytest.raises(ConfigError, match=r"the fleet needs 3 GPUs and gpu\.max_gpus allows 2"):
        place([Replicas("m", 3, 10_000)], OpenEnded(16384, 8, max_gpus=2), reserve_mib=RESERVE)


@pytest.mark.parametrize(
    ("policy", "candidates", "best"),
    [
        # (room, used) of each candidate: bundle takes the least room (best fit), then the
        # fuller; spread the least used, then the one with more room.
        (BUNDLE, [(3.0, 0.25), (1.0, 0.75), (5.0, 0.0)], 1),
        (BUNDLE, [(1.0, 0.5), (1.0, 0.75)], 1),
        (SPREAD, [(3.0, 0.25), (1.0, 0.75), (5.0, 0.0)], 2),
        (SPREAD, [(1.0, 0.5), (3.0, 0.5)], 1),
    ],
)
def test_what_each_policy_prefers(
    policy: PlacementPolicy, candidates: list[tuple[float, float]], best: int
) -> None:
    keys = [preference(policy, room=room, used=used) for room, used in candidates]
    assert keys.index(min(keys)) == best

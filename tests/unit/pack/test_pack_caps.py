"""How pack's replicas share GPUs: selection, placement over a host's GPUs, the default split,
refusals. Table-driven."""

from __future__ import annotations

import pytest

from sharedserve.config import CapSource, GpuCapRequest
from sharedserve.contract import GpuShare
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import ConfigError
from sharedserve.gpu.info import GpuInfo
from sharedserve.pack.caps import (
    EntryOnGpu,
    ReplicaShare,
    caps_on_gpu,
    choose_gpu,
    place_entries,
)
from sharedserve.pack.supervisor import restart_delay

K80 = GpuInfo("GPU-aaaa-0000", 0, "Tesla K80", 11441)
A100 = GpuInfo("GPU-bbbb-1111", 1, "A100", 81920)
SICK = GpuInfo("GPU-cccc-2222", 2, "T4", 15360, healthy=False)
NONE = GpuCapRequest.of(CapSource.NONE)


def plan_gpu_share(
    replicas: int,
    request: GpuCapRequest,
    gpu: GpuInfo | None,
    *,
    context_reserve_mib: int,
    footprint_mib: float = 0.0,
) -> ReplicaShare:
    """One model's pack: the one-entry case of ``caps_on_gpu``, as ``pack --model`` plans it."""
    item = EntryOnGpu("the model", replicas, request, footprint_mib)
    (share,) = caps_on_gpu(gpu, [item], context_reserve_mib=context_reserve_mib)
    return share


def fraction(f: float) -> GpuCapRequest:
    return GpuCapRequest.of(CapSource.FLAG, fraction=f)


def mib(m: int) -> GpuCapRequest:
    return GpuCapRequest.of(CapSource.FLAG, mib=m)


@pytest.mark.parametrize(
    ("gpus", "selector", "expected"),
    [
        ([A100, K80], None, K80),  # lowest index by default
        ([K80, A100], "1", A100),
        ([K80, A100], "GPU-bbbb", A100),  # UUID prefix, as CUDA accepts
        ([K80, A100], "GPU-aaaa-0000", K80),
        ([], None, None),  # no GPU: CPU-only host
    ],
)
def test_choose_gpu(gpus: list[GpuInfo], selector: str | None, expected: GpuInfo | None) -> None:
    assert choose_gpu(gpus, selector) == expected


@pytest.mark.parametrize(
    ("gpus", "selector", "message"),
    [
        ([K80], "3", "names no GPU"),
        ([], "0", "names no GPU"),
        ([K80, A100], "GPU-", "matches 2 GPUs"),
        ([K80, SICK], "2", "unhealthy"),
    ],
)
def test_choose_gpu_refuses(gpus: list[GpuInfo], selector: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        choose_gpu(gpus, selector)


@pytest.mark.parametrize(
    ("replicas", "request_", "gpu", "reserve", "expected_mib", "expected_fraction"),
    [
        # Even split keeps the context reserve outside each cap: (11441 - 4 x 512) // 4.
        (4, NONE, K80, 512, 2348, 0.205226),
        (1, NONE, A100, 512, 81408, 0.99375),
        (8, NONE, A100, 0, 10240, 0.125),
        # Requested caps are kept as asked when they fit.
        (3, fraction(0.25), K80, 512, 2860, 0.249978),
        (2, mib(4000), K80, 512, 4000, 0.349619),
        (10, mib(7000), A100, 1000, 7000, 0.085449),
        # No GPU: nothing to size against; a fraction is recorded as given.
        (4, fraction(0.25), None, 512, None, 0.25),
        (4, mib(1000), None, 512, 1000, None),
        (4, NONE, None, 512, None, None),
    ],
)
def test_plan_gpu_share(
    replicas: int,
    request_: GpuCapRequest,
    gpu: GpuInfo | None,
    reserve: int,
    expected_mib: int | None,
    expected_fraction: float | None,
) -> None:
    share = plan_gpu_share(replicas, request_, gpu, context_reserve_mib=reserve)
    assert share.mib == expected_mib
    assert share.fraction == expected_fraction
    assert share.gpu == gpu
    assert share.default_split is (request_.source is CapSource.NONE)
    if share.mib is not None and gpu is not None:
        # The fraction never stands for more than the MiB cap, and the pack fits the card.
        assert share.fraction is not None
        assert share.fraction * gpu.memory_mib <= share.mib
        assert replicas * (share.mib + reserve) <= gpu.memory_mib


@pytest.mark.parametrize(
    ("replicas", "request_", "gpu", "reserve", "footprint", "message"),
    [
        (4, fraction(0.3), None, 512, 0, "sum to at most 1"),
        (3, fraction(0.34), K80, 0, 0, "exceeds GPU 0's 11441 MiB"),
        # 4 x 0.25 fills the card with no room for the CUDA contexts.
        (4, fraction(0.25), K80, 512, 0, "at most 3 fit"),
        (3, mib(4000), K80, 0, 0, "12000 MiB exceeds"),
        (23, NONE, K80, 512, 0, "do not fit"),
        (8, NONE, K80, 512, 1200, "weights alone take 1200 MiB"),
        (2, mib(100), A100, 512, 100.5, "more than the 100 MiB cap"),
        (0, NONE, K80, 512, 0, "at least 1"),
    ],
)
def test_plan_gpu_share_refuses(
    replicas: int,
    request_: GpuCapRequest,
    gpu: GpuInfo | None,
    reserve: int,
    footprint: float,
    message: str,
) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_gpu_share(
            replicas, request_, gpu, context_reserve_mib=reserve, footprint_mib=footprint
        )


@pytest.mark.parametrize(
    ("crashes", "delay"), [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0), (40, 30.0)]
)
def test_restart_delay_doubles_up_to_a_cap(crashes: int, delay: float) -> None:
    assert restart_delay(crashes) == delay


# --- mixes: the proportional split, refusals with a table, placement ----------------------------

T4 = GpuInfo("GPU-dddd-3333", 3, "T4", 16384)
T4B = GpuInfo("GPU-eeee-4444", 4, "T4", 16384)
T4C = GpuInfo("GPU-ffff-5555", 5, "T4", 16384)


@pytest.mark.parametrize(
    ("items", "expected_mib"),
    [
        # Equal footprints: exactly today's even split, (16384 - 3 x 512) // 3.
        ([EntryOnGpu("a", 2, NONE, 100.0), EntryOnGpu("b", 1, NONE, 100.0)], [4949, 4949]),
        # b's weights are 3x a's: free 14848 split 1:3 per replica -> 14848 x 1/5 and x 3/5.
        ([EntryOnGpu("a", 2, NONE, 100.0), EntryOnGpu("b", 1, NONE, 300.0)], [2969, 8908]),
        # Explicit caps come off the top; the rest is split: 16384 - 6000 - 3 x 512 = 8848.
        ([EntryOnGpu("big", 1, mib(6000), 5000.0), EntryOnGpu("s", 2, NONE, 10.0)], [6000, 4424]),
        # A measured peak replaces the weights on disk.
        ([EntryOnGpu("a", 1, NONE, 100.0, 300.0), EntryOnGpu("b", 1, NONE, 300.0)], [7680, 7680]),
    ],
)
def test_entries_without_a_cap_share_in_proportion_to_footprint(
    items: list[EntryOnGpu], expected_mib: list[int]
) -> None:
    shares = caps_on_gpu(T4, items, context_reserve_mib=512)
    assert [s.mib for s in shares] == expected_mib
    used = sum(i.replicas * (s.mib or 0) for i, s in zip(items, shares, strict=True))
    assert used + 512 * sum(i.replicas for i in items) <= T4.memory_mib


def test_a_mix_that_cannot_fit_is_refused_with_a_table() -> None:
    # 2 x 7000 + 3 x 1 MiB of weights + 5 x 512 = 16563 MiB.
    items = [EntryOnGpu("resnet", 2, mib(7000), 98.0), EntryOnGpu("tiny", 3, NONE, 1.0)]
    with pytest.raises(ConfigError) as e:
        caps_on_gpu(T4, items, context_reserve_mib=512)
    message = e.value.message
    assert "5 replicas do not fit: 16563 MiB exceeds GPU 3's 16384 MiB (T4) by 179 MiB" in message
    lines = message.splitlines()
    header = next(line for line in lines if "entry" in line).split()
    assert header[:2] == ["entry", "replicas"]
    assert any(line.split()[:2] == ["resnet", "2"] and "15024" in line for line in lines)
    assert any(line.split()[:2] == ["tiny", "3"] for line in lines)


def test_a_cap_below_a_models_weights_names_the_entry() -> None:
    items = [EntryOnGpu("big", 1, mib(1000), 2000.0), EntryOnGpu("s", 1, NONE, 10.0)]
    with pytest.raises(ConfigError, match="big: the model's weights alone take 2000 MiB"):
        caps_on_gpu(T4, items, context_reserve_mib=512)


def test_a_cap_finer_than_the_contracts_shares_is_refused_not_crashed_on() -> None:
    # 1 MiB of 2,000,000 is under 1e-6: its share would be written as 0, which servers refuse.
    huge = GpuInfo("GPU-huge", 9, "huge", 2_000_000)
    items = [EntryOnGpu("tiny", 1, mib(1), 0.1)]
    with pytest.raises(ConfigError, match=r"tiny on GPU 9: a cap of 1 MiB.*least 2 MiB"):
        caps_on_gpu(huge, items, context_reserve_mib=512)
    (share,) = caps_on_gpu(huge, [EntryOnGpu("tiny", 1, mib(2), 0.1)], context_reserve_mib=512)
    assert share.fraction == 0.000001
    assert share.share == GpuShare(huge.uuid, 0.000001, 2)


def test_without_a_gpu_a_mix_records_caps_and_checks_fractions() -> None:
    items = [EntryOnGpu("a", 2, fraction(0.25), 1.0), EntryOnGpu("b", 1, NONE, 1.0)]
    shares = caps_on_gpu(None, items, context_reserve_mib=512)
    assert [(s.fraction, s.mib, s.gpu) for s in shares] == [(0.25, None, None), (None, None, None)]
    with pytest.raises(ConfigError, match="sum to at most 1"):
        caps_on_gpu(None, [*items, EntryOnGpu("c", 1, fraction(0.6))], context_reserve_mib=512)


def _indices(placed: list[list[GpuInfo | None]]) -> list[list[int | None]]:
    return [[None if g is None else g.index for g in row] for row in placed]


def _entries(*entries: tuple[str | None, int, float]) -> list[tuple[str | None, EntryOnGpu]]:
    """``(gpu selector, replicas, weights MiB)`` entries, named a, b, c ... and uncapped."""
    return [
        (selector, EntryOnGpu("abcdefgh"[i], replicas, NONE, weights))
        for i, (selector, replicas, weights) in enumerate(entries)
    ]


@pytest.mark.parametrize(
    ("policy", "entries", "expected"),
    [
        # bundle fills a GPU before the next: 4 of 3000 MiB + 512 reserve hold a 16 GiB GPU.
        (PlacementPolicy.BUNDLE, _entries((None, 2, 3000), (None, 1, 3000)), [[3, 3], [3]]),
        (
            PlacementPolicy.BUNDLE,
            _entries((None, 5, 3000), (None, 2, 3000)),
            [[3, 3, 3, 3, 4], [4, 4]],  # GPU 3 full after 4 of a
        ),
        # spread: least used first, so one entry's replicas land on different GPUs.
        (PlacementPolicy.SPREAD, _entries((None, 3, 3000)), [[3, 4, 5]]),
        (PlacementPolicy.SPREAD, _entries((None, 1, 3000), (None, 2, 3000)), [[3], [4, 5]]),
        (PlacementPolicy.SPREAD, _entries((None, 4, 3000)), [[3, 3, 4, 5]]),
        # A pinned entry takes its GPU first; the rest are placed around it.
        (PlacementPolicy.SPREAD, _entries(("3", 2, 3000), (None, 2, 3000)), [[3, 3], [4, 5]]),
        (PlacementPolicy.BUNDLE, _entries(("5", 1, 3000), (None, 1, 3000)), [[5], [5]]),
        # Heterogeneous: an 8 GiB replica and small ones fill one GPU before the next.
        (PlacementPolicy.BUNDLE, _entries((None, 1, 8192), (None, 3, 100)), [[3], [3, 3, 3]]),
    ],
)
def test_placement_over_several_gpus_is_the_placement_routines(
    policy: PlacementPolicy,
    entries: list[tuple[str | None, EntryOnGpu]],
    expected: list[list[int]],
) -> None:
    placed = place_entries([T4, T4B, T4C], entries, policy=policy, context_reserve_mib=512)
    assert _indices(placed) == expected


def test_placement_takes_each_replicas_cap_or_weights_and_its_reserve() -> None:
    # Two 16 GiB GPUs: a 6 GiB cap, a quarter of a GPU, and 4 GiB of weights each take their
    # own (the quarter is 4096 MiB of either), with 512 MiB reserve a replica.
    entries = [
        (None, EntryOnGpu("capped", 2, mib(6144), 10.0)),
        (None, EntryOnGpu("quarter", 2, fraction(0.25), 10.0)),
        (None, EntryOnGpu("weights", 1, NONE, 4000.2)),
    ]
    placed = place_entries(
        [T4, T4B], entries, policy=PlacementPolicy.BUNDLE, context_reserve_mib=512
    )
    per_gpu = {3: 0, 4: 0}
    taken = {"capped": 6144, "quarter": 4096, "weights": 4001}
    for (_, item), gpus in zip(entries, placed, strict=True):
        for g in gpus:
            assert g is not None
            per_gpu[g.index] += taken[item.name] + 512
    assert all(used <= 16384 for used in per_gpu.values())
    assert sum(len(g) for g in placed) == 5


def test_placement_skips_unhealthy_gpus_and_refuses_when_full() -> None:
    sick = GpuInfo("GPU-9999", 0, "T4", 16384, healthy=False)
    placed = place_entries(
        [sick, T4],
        _entries((None, 2, 3000)),
        policy=PlacementPolicy.SPREAD,
        context_reserve_mib=512,
    )
    assert _indices(placed) == [[3, 3]]
    with pytest.raises(
        ConfigError, match=r"2 of 6 replicas fit no GPU.*GPU 0 unhealthy; GPU 3 2,336 of 16,384"
    ):
        place_entries(
            [sick, T4],
            _entries((None, 6, 3000)),
            policy=PlacementPolicy.SPREAD,
            context_reserve_mib=512,
        )


def test_one_gpu_or_none_needs_no_placement() -> None:
    # One GPU: everything on it, whether it fits or not; caps_on_gpu says why not with a table.
    placed = place_entries(
        [K80], _entries((None, 2, 9000)), policy=PlacementPolicy.SPREAD, context_reserve_mib=512
    )
    assert _indices(placed) == [[0, 0]]
    assert place_entries(
        [], _entries((None, 1, 1)), policy=PlacementPolicy.BUNDLE, context_reserve_mib=512
    ) == [[None]]

"""How replicas share a GPU: selection, the default split, refusals. Table-driven."""

from __future__ import annotations

import pytest

from sharedserve.config import CapSource, GpuCapRequest
from sharedserve.errors import ConfigError
from sharedserve.gpu.info import GpuInfo
from sharedserve.pack.plan import choose_gpu, plan_gpu_share
from sharedserve.pack.supervisor import restart_delay

K80 = GpuInfo("GPU-aaaa-0000", 0, "Tesla K80", 11441)
A100 = GpuInfo("GPU-bbbb-1111", 1, "A100", 81920)
SICK = GpuInfo("GPU-cccc-2222", 2, "T4", 15360, healthy=False)
NONE = GpuCapRequest(None, None, CapSource.NONE)


def fraction(f: float) -> GpuCapRequest:
    return GpuCapRequest(f, None, CapSource.FLAG)


def mib(m: int) -> GpuCapRequest:
    return GpuCapRequest(None, m, CapSource.FLAG)


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
        (4, NONE, K80, 512, 2348, 0.2052),
        (1, NONE, A100, 512, 81408, 0.9937),
        (8, NONE, A100, 0, 10240, 0.125),
        # Requested caps are kept as asked when they fit.
        (3, fraction(0.25), K80, 512, 2860, 0.2499),
        (2, mib(4000), K80, 512, 4000, 0.3496),
        (10, mib(7000), A100, 1000, 7000, 0.0854),
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

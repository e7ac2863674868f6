"""The load each replica of a mix is offered: split by weight, then over replicas, times scale."""

from __future__ import annotations

import pytest

from sharedserve.bench.offered import Offered, ReplicaRef, offered_load
from sharedserve.config import LoadPattern
from sharedserve.errors import ConfigError


def mix(*models: tuple[str, int, float]) -> list[ReplicaRef]:
    """Replicas of (model, replicas, weight), named as pack names them."""
    return [ReplicaRef(f"{m}-{i}", m, w) for m, n, w in models for i in range(n)]


# The example mix: tiny x4 weight 6, mobilenet_v2 x2 weight 2, resnet50 x1 weight 1.
EXAMPLE = (("tiny", 4, 6.0), ("mobilenet_v2", 2, 2.0), ("resnet50", 1, 1.0))


def scaled(models: tuple[tuple[str, int, float], ...], scale: int) -> list[ReplicaRef]:
    return mix(*((m, n * scale, w) for m, n, w in models))


@pytest.mark.parametrize("scale", [1, 2, 4])
def test_poisson_rate_is_the_mix_total_split_by_weight_then_replicas(scale: int) -> None:
    load = offered_load(
        scaled(EXAMPLE, scale), LoadPattern.POISSON, concurrency=1, rate=90.0, scale=scale
    )
    # 90 req/s at scale 1: tiny 60 over 4 replicas, mobilenet 20 over 2, resnet 10 over 1.
    # Scaled, each replica keeps its rate: only the packing changes.
    assert {n: o.rate for n, o in load.items() if n.startswith("tiny")} == pytest.approx(
        dict.fromkeys((f"tiny-{i}" for i in range(4 * scale)), 15.0)
    )
    assert load["mobilenet_v2-0"] == Offered(users=1, rate=pytest.approx(10.0))
    assert load["resnet50-0"].rate == pytest.approx(10.0)
    assert sum(o.rate or 0 for o in load.values()) == pytest.approx(90.0 * scale)


@pytest.mark.parametrize(
    ("concurrency", "scale", "expected"),
    [
        # 18 users: tiny 12 (3 each), mobilenet 4 (2 each), resnet 2.
        (18, 1, {"tiny": [3, 3, 3, 3], "mobilenet_v2": [2, 2], "resnet50": [2]}),
        (18, 2, {"tiny": [3] * 8, "mobilenet_v2": [2] * 4, "resnet50": [2, 2]}),
        # 10 users: tiny's 6.67 -> 7 (2,2,2,1), mobilenet 2.22 -> 2, resnet 1.11 -> 1.
        (10, 1, {"tiny": [2, 2, 2, 1], "mobilenet_v2": [1, 1], "resnet50": [1]}),
        # Fewer users than replicas: every replica still gets one.
        (3, 1, {"tiny": [1, 1, 1, 1], "mobilenet_v2": [1, 1], "resnet50": [1]}),
    ],
)
def test_parallel_users_split_by_weight_at_least_one_per_replica(
    concurrency: int, scale: int, expected: dict[str, list[int]]
) -> None:
    load = offered_load(
        scaled(EXAMPLE, scale),
        LoadPattern.PARALLEL,
        concurrency=concurrency,
        rate=1.0,
        scale=scale,
    )
    got: dict[str, list[int]] = {}
    for name, offered in load.items():
        got.setdefault(name.rsplit("-", 1)[0], []).append(offered.users)
        assert offered.rate is None
    assert got == expected


@pytest.mark.parametrize("density", [1, 2, 8])
def test_one_model_sweep_keeps_the_per_replica_meaning(density: int) -> None:
    replicas = mix(("tiny", density, 1.0))
    parallel = offered_load(replicas, LoadPattern.PARALLEL, concurrency=10, rate=5, scale=density)
    poisson = offered_load(replicas, LoadPattern.POISSON, concurrency=10, rate=5, scale=density)
    assert {o.users for o in parallel.values()} == {10}
    assert {o.rate for o in poisson.values()} == {5.0}


def test_sequential_is_one_user_per_replica_whatever_the_weights() -> None:
    load = offered_load(mix(*EXAMPLE), LoadPattern.SEQUENTIAL, concurrency=50, rate=9, scale=1)
    assert set(load.values()) == {Offered(users=1, rate=None)}
    assert len(load) == 7


def test_zero_weight_and_disagreeing_weights_are_refused() -> None:
    with pytest.raises(ConfigError, match="model idle has weight 0"):
        offered_load(
            mix(("tiny", 1, 1.0), ("idle", 1, 0.0)),
            LoadPattern.POISSON,
            concurrency=1,
            rate=1.0,
            scale=1,
        )
    odd = [ReplicaRef("tiny-0", "tiny", 1.0), ReplicaRef("tiny-1", "tiny", 2.0)]
    with pytest.raises(ConfigError, match="disagree on its weight"):
        offered_load(odd, LoadPattern.PARALLEL, concurrency=4, rate=1.0, scale=1)

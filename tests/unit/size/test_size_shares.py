"""Each Deployment's units of a GPU, apportioned over the plan's GPUs (``size.shares``)."""

from __future__ import annotations

import pytest

from sharedserve.size.shares import Need, apportion


def test_a_gpu_with_room_shares_it_out_and_every_pod_gets_its_share() -> None:
    # 10 units: shares 2.5 and 4 leave 3.5 spare, which goes to them in proportion.
    shares = apportion([{"a": 1, "b": 1}], {"a": Need(2.5, 1), "b": Need(4.0, 1)}, 10)
    assert sum(shares.units.values()) == 10
    assert shares.units["a"] >= 2.5 and shares.units["b"] >= 4
    assert shares.under == 0 and shares.full == []


def test_a_full_gpu_rounds_within_one_unit_and_never_overflows() -> None:
    # Three shares of 10/3 fill 10 units: one pod is a third of a unit under its share.
    needs = {name: Need(10 / 3, 1) for name in "abc"}
    shares = apportion([{"a": 1, "b": 1, "c": 1}], needs, 10)
    assert sorted(shares.units.values()) == [3, 3, 4]
    assert shares.under == pytest.approx(1 / 3, abs=1e-6)


def test_memory_is_never_rounded_under() -> None:
    # a's memory takes 4 units though its share by busy is 3.2: b gets what is left.
    shares = apportion([{"a": 1, "b": 1}], {"a": Need(4.0, 4), "b": Need(6.2, 1)}, 10)
    assert shares.units == {"a": 4, "b": 6}


def test_one_template_a_deployment_its_fullest_gpu_bounds_it() -> None:
    # a is alone on GPU 0 and beside b on GPU 1: every pod of a asks the same, which GPU 1 bounds.
    gpus = [{"a": 1}, {"a": 1, "b": 1}]
    shares = apportion(gpus, {"a": Need(5.0, 1), "b": Need(5.0, 1)}, 10)
    assert shares.units == {"a": 5, "b": 5}
    # Two pods of one Deployment on a GPU take two of its units per unit they ask.
    shares = apportion([{"a": 2, "b": 1}], {"a": Need(3.0, 1), "b": Need(3.0, 1)}, 10)
    assert 2 * shares.units["a"] + shares.units["b"] <= 10 and shares.units["a"] >= 3


def test_memory_a_gpu_cannot_hold_is_reported() -> None:
    shares = apportion([{"a": 1, "b": 1}, {"b": 1}], {"a": Need(3, 3), "b": Need(2, 2)}, 4)
    assert shares.full == [0]
    assert shares.units == {"a": 3, "b": 2}

"""The decoding budget: room at once when there is some, a wait in arrival order when there is
not, 503 (ResourceExhausted) when none comes in time."""

from __future__ import annotations

import asyncio

import pytest

from sharedserve.errors import ResourceExhausted
from sharedserve.server.wire.body_bytes import DecodingBytes


async def _take(budget: DecodingBytes, size: int, log: list[str], name: str, hold: float) -> None:
    async with budget.hold(size):
        log.append(f"{name}+")
        await asyncio.sleep(hold)
        log.append(f"{name}-")


def test_bodies_that_fit_run_together() -> None:
    async def main() -> list[str]:
        budget, log = DecodingBytes(100, wait_s=5), list[str]()
        await asyncio.gather(*(_take(budget, 30, log, n, 0.05) for n in "abc"))
        assert budget.used == 0
        return log

    assert asyncio.run(main()) == ["a+", "b+", "c+", "a-", "b-", "c-"]


def test_a_body_waits_for_room_in_arrival_order() -> None:
    async def main() -> list[str]:
        budget, log = DecodingBytes(100, wait_s=5), list[str]()
        # c would fit beside a, but b arrived first and is waiting: c must not overtake it.
        await asyncio.gather(
            _take(budget, 60, log, "a", 0.1),
            _take(budget, 80, log, "b", 0.05),
            _take(budget, 30, log, "c", 0.0),
        )
        return log

    assert asyncio.run(main()) == ["a+", "a-", "b+", "b-", "c+", "c-"]


def test_no_room_in_time_is_resource_exhausted_and_costs_nothing() -> None:
    async def main() -> None:
        budget = DecodingBytes(100, wait_s=0.05)
        async with budget.hold(100):
            with pytest.raises(ResourceExhausted, match="--max-decoding-bytes"):
                async with budget.hold(1):
                    raise AssertionError("must not run")
            assert budget.used == 100
        assert budget.used == 0
        async with budget.hold(100):  # and the budget is whole again
            pass

    asyncio.run(main())


def test_a_body_over_the_whole_budget_runs_alone() -> None:
    async def main() -> list[str]:
        budget, log = DecodingBytes(100, wait_s=5), list[str]()
        await asyncio.gather(_take(budget, 500, log, "a", 0.05), _take(budget, 1, log, "b", 0))
        return log

    assert asyncio.run(main()) == ["a+", "a-", "b+", "b-"]

"""The real Batcher on a real event loop, with a numpy function standing in for the framework."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import numpy as np
import pytest

from sharedserve.errors import (
    InvalidInput,
    NotReady,
    ResourceExhausted,
    SharedServeError,
)
from sharedserve.server.inference.batching import Batcher
from sharedserve.server.inference.batching_policy import BatchingSettings

T = TypeVar("T")
Inputs = dict[str, np.ndarray]


class Model:
    """``y = x * 2`` and ``n`` = the rows of the batch each row ran in; records every batch.

    ``gated``: each call waits for the test to open ``gate``, so queues fill up exactly.
    """

    def __init__(self, *, gated: bool = False, error: Exception | None = None) -> None:
        self.batches: list[tuple[str, dict[str, tuple[tuple[int, ...], str]]]] = []
        self.gate = threading.Event()
        self.started = threading.Event()
        self.finished = threading.Event()
        self.error = error
        if not gated:
            self.gate.set()

    def __call__(self, signature_name: str, inputs: Inputs) -> Inputs:
        self.finished.clear()
        self.batches.append(
            (signature_name, {k: (v.shape, v.dtype.name) for k, v in inputs.items()})
        )
        self.started.set()
        assert self.gate.wait(10), "the test never opened the gate"
        self.finished.set()
        if self.error is not None:
            raise self.error
        rows = next(iter(inputs.values())).shape[0]
        return {"y": inputs["x"] * 2, "n": np.full(rows, rows)}

    @property
    def sizes(self) -> list[int]:
        return [next(iter(seen.values()))[0][0] for _, seen in self.batches]


def run(body: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(body, 60))


def settings(**overrides: int) -> BatchingSettings:
    values = {"max_batch_size": 8, "batch_timeout_micros": 20_000, "max_enqueued_batches": 100}
    return BatchingSettings(**(values | overrides))


def rows(n: int, start: float = 0.0, width: int = 3) -> Inputs:
    return {"x": (start + np.arange(n * width, dtype=np.float32)).reshape(n, width)}


async def wait_until_running(model: Model) -> None:
    assert await asyncio.to_thread(model.started.wait, 10)


def test_concurrent_requests_are_merged_and_each_gets_its_own_rows() -> None:
    model = Model()
    seen: list[int] = []

    async def body() -> None:
        batcher = Batcher(model, settings(num_batch_threads=2), on_batch=seen.append)
        await batcher.start()
        sent = [rows(1 + i % 3, start=1000.0 * i) for i in range(60)]
        results = await asyncio.gather(*(batcher.submit("serving_default", x) for x in sent))
        for x, got in zip(sent, results, strict=True):
            np.testing.assert_array_equal(got["y"], x["x"] * 2)
            assert got["n"].shape == (x["x"].shape[0],)
        assert batcher.queue_depth == 0
        stats = batcher.stats
        assert (stats.requests, stats.rows) == (60, sum(x["x"].shape[0] for x in sent))
        assert stats.batches == len(model.batches)
        await batcher.stop()

    run(body())
    assert len(model.batches) < 60
    assert max(model.sizes) <= 8
    assert seen == model.sizes


def test_timeout_flushes_a_partial_batch() -> None:
    model = Model()

    async def body() -> float:
        batcher = Batcher(model, settings(max_batch_size=100, batch_timeout_micros=50_000))
        await batcher.start()
        began = time.monotonic()
        results = await asyncio.gather(*(batcher.submit("s", rows(1, i)) for i in range(3)))
        elapsed = time.monotonic() - began
        assert [int(r["n"][0]) for r in results] == [3, 3, 3]
        await batcher.stop()
        return elapsed

    elapsed = run(body())
    assert model.sizes == [3]
    assert 0.03 <= elapsed < 5


def test_zero_timeout_runs_at_once_and_merges_what_queued_meanwhile() -> None:
    model = Model(gated=True)

    async def body() -> None:
        batcher = Batcher(model, settings(batch_timeout_micros=0, num_batch_threads=1))
        await batcher.start()
        first = asyncio.create_task(batcher.submit("s", rows(1)))
        await wait_until_running(model)  # ran alone: nobody else had come
        later = [asyncio.create_task(batcher.submit("s", rows(1, i))) for i in range(3)]
        await asyncio.sleep(0)
        model.gate.set()
        await asyncio.gather(first, *later)
        await batcher.stop()

    run(body())
    assert model.sizes == [1, 3]


def test_different_signatures_shapes_and_dtypes_do_not_merge() -> None:
    model = Model()
    int_rows = {"x": np.arange(6, dtype=np.int64).reshape(2, 3)}
    requests: list[tuple[str, Inputs]] = [
        ("a", rows(1)),
        ("b", rows(1)),
        ("a", rows(2, width=4)),
        ("a", int_rows),
        ("a", rows(2)),
        ("b", rows(1)),
    ]

    async def body() -> list[Inputs]:
        batcher = Batcher(model, settings(max_batch_size=64, batch_timeout_micros=50_000))
        await batcher.start()
        results = await asyncio.gather(*(batcher.submit(s, x) for s, x in requests))
        await batcher.stop()
        return results

    results = run(body())
    for (_, x), got in zip(requests, results, strict=True):
        np.testing.assert_array_equal(got["y"], x["x"] * 2)
        assert got["y"].dtype == x["x"].dtype
    assert sorted(model.batches, key=repr) == sorted(
        [
            ("a", {"x": ((3, 3), "float32")}),
            ("b", {"x": ((2, 3), "float32")}),
            ("a", {"x": ((2, 4), "float32")}),
            ("a", {"x": ((2, 3), "int64")}),
        ],
        key=repr,
    )


def test_full_queue_refuses_at_once_and_the_server_keeps_working() -> None:
    model = Model(gated=True)

    async def body() -> None:
        limits = settings(max_batch_size=2, batch_timeout_micros=0, max_enqueued_batches=2)
        batcher = Batcher(model, limits)
        await batcher.start()
        running = asyncio.create_task(batcher.submit("s", rows(1, 0)))
        await wait_until_running(model)  # the only batch thread is now busy
        queued = [asyncio.create_task(batcher.submit("s", rows(1, i))) for i in (1, 2, 3, 4)]
        await asyncio.sleep(0.05)  # two full batches now wait: the queue is at its bound
        assert batcher.queue_depth == 4

        began = time.monotonic()
        with pytest.raises(ResourceExhausted, match="queue is full"):
            await batcher.submit("s", rows(1, 5))
        assert time.monotonic() - began < 1

        model.gate.set()
        results = await asyncio.gather(running, *queued)
        for i, got in enumerate(results):
            np.testing.assert_array_equal(got["y"], rows(1, i)["x"] * 2)
        after = await batcher.submit("s", rows(2, 7))
        np.testing.assert_array_equal(after["y"], rows(2, 7)["x"] * 2)
        await batcher.stop()

    run(body())
    assert model.sizes == [1, 2, 2, 2]


def test_request_over_max_batch_size_is_invalid() -> None:
    async def body() -> None:
        batcher = Batcher(Model(), settings(max_batch_size=4))
        await batcher.start()
        with pytest.raises(InvalidInput, match="5 rows, more than the batch limit"):
            await batcher.submit("s", rows(5))
        with pytest.raises(InvalidInput, match="disagree on the batch size"):
            await batcher.submit("s", {"x": np.zeros((2, 1)), "z": np.zeros((3, 1))})
        assert (await batcher.submit("s", rows(4)))["y"].shape == (4, 3)
        await batcher.stop()

    run(body())


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ResourceExhausted("out of GPU memory under the cap"), ResourceExhausted),
        (ValueError("shape mismatch in the graph"), SharedServeError),
    ],
)
def test_run_batch_error_reaches_every_caller_of_that_batch(
    error: Exception, expected: type[SharedServeError]
) -> None:
    model = Model(error=error)

    async def body() -> list[BaseException | Inputs]:
        batcher = Batcher(model, settings(max_batch_size=4, batch_timeout_micros=1_000_000))
        await batcher.start()
        calls = [batcher.submit("s", rows(1, i)) for i in range(4)]  # fills one batch
        results = await asyncio.gather(*calls, return_exceptions=True)
        await batcher.stop()
        return results

    results = run(body())
    assert model.sizes == [4]
    assert len({id(r) for r in results}) == 1
    failure = results[0]
    assert isinstance(failure, expected)
    assert type(failure) is expected
    if isinstance(error, SharedServeError):
        assert failure is error
    else:
        assert failure.__cause__ is error
        assert "ValueError: shape mismatch in the graph" in str(failure)


def test_a_cancelled_caller_does_not_break_its_batch() -> None:
    model = Model(gated=True)

    async def body() -> None:
        batcher = Batcher(model, settings(batch_timeout_micros=0))
        await batcher.start()
        first = asyncio.create_task(batcher.submit("s", rows(1, 0)))
        await wait_until_running(model)
        gone = asyncio.create_task(batcher.submit("s", rows(2, 1)))
        kept = asyncio.create_task(batcher.submit("s", rows(1, 2)))
        await asyncio.sleep(0)
        gone.cancel()
        model.gate.set()
        await first
        np.testing.assert_array_equal((await kept)["y"], rows(1, 2)["x"] * 2)
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert batcher.stats.requests == 2
        await batcher.stop()

    run(body())
    assert model.sizes == [1, 1]


def test_stop_fails_pending_and_running_requests() -> None:
    model = Model(gated=True)

    async def body() -> None:
        batcher = Batcher(model, settings(batch_timeout_micros=0))
        await batcher.start()
        running = asyncio.create_task(batcher.submit("s", rows(1)))
        await wait_until_running(model)
        pending = [asyncio.create_task(batcher.submit("s", rows(1, i))) for i in range(3)]
        await asyncio.sleep(0)
        assert batcher.queue_depth == 3
        await batcher.stop()
        for task in [running, *pending]:
            with pytest.raises(NotReady):
                await task
        assert batcher.queue_depth == 0
        with pytest.raises(NotReady, match="not running"):
            await batcher.submit("s", rows(1))
        model.gate.set()  # let the abandoned framework call end before the loop closes
        assert await asyncio.to_thread(model.finished.wait, 10)

    run(body())
    assert model.sizes == [1]


def test_submit_before_start_is_not_ready() -> None:
    async def body() -> None:
        batcher = Batcher(Model(), settings())
        with pytest.raises(NotReady):
            await batcher.submit("s", rows(1))

    run(body())


def test_invalid_settings_are_refused_up_front() -> None:
    with pytest.raises(SharedServeError, match="num_batch_threads"):
        Batcher(Model(), settings(num_batch_threads=0))

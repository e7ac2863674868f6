"""Large JSON bodies parsed in a worker process (``server/wire/decode_pool.py``): the same value
as parsing here, the worker's CPU reported for the request's model, a declined body left to the
general path, and a dead worker replaced without losing the body."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import numpy as np
import orjson
import pytest

from sharedserve.server.metrics import taken_elsewhere
from sharedserve.server.wire import DecodePool, json_arrays
from sharedserve.server.wire.tfserving import codec

ROWS = np.random.default_rng(7).random((4096, 8))
LARGE = orjson.dumps({"signature_name": "serving_default", "instances": ROWS.tolist()})


@pytest.fixture
def pool() -> Iterator[DecodePool]:
    pool = DecodePool(1)
    try:
        yield pool
    finally:
        pool.close()


def test_a_large_body_is_parsed_in_a_worker_with_the_same_value(pool: DecodePool) -> None:
    assert len(LARGE) >= pool.min_bytes
    taken_elsewhere()
    payload = codec.parse_predict_body(LARGE, pool.parse)
    assert taken_elsewhere() > 0  # the worker's CPU, for the model's decode phase
    assert pool.running_workers() == 1
    here = codec.parse_predict_body(LARGE)
    assert payload["signature_name"] == here["signature_name"] == "serving_default"
    array = payload["instances"]
    assert isinstance(array, json_arrays.JsonArray)
    np.testing.assert_array_equal(array.raw, here["instances"].raw)
    np.testing.assert_array_equal(array.raw, ROWS)
    # Its source is the caller's body again, for the general path's messages.
    assert array.source is LARGE and array.value() == here["instances"].value()


def test_small_and_declined_bodies_stay_here(pool: DecodePool) -> None:
    small = orjson.dumps({"instances": [[1.0, 2.0]]})
    assert codec.parse_predict_body(small, pool.parse) == {"instances": [[1.0, 2.0]]}
    assert pool.running_workers() == 0  # never started for a small body
    strings = orjson.dumps({"instances": [["a" * 64] * 8] * 1024})
    assert len(strings) >= pool.min_bytes
    # The fast path declines strings: the worker says so, and the body is parsed whole here.
    assert codec.parse_predict_body(strings, pool.parse)["instances"][0][0] == "a" * 64
    assert pool.running_workers() == 1
    with pytest.raises(Exception, match="not valid JSON"):
        codec.parse_predict_body(LARGE[:-1], pool.parse)


def test_a_dead_worker_is_replaced_and_the_body_parsed_here(pool: DecodePool) -> None:
    codec.parse_predict_body(LARGE, pool.parse)
    (pid,) = pool.worker_pids()
    os.kill(pid, signal.SIGKILL)
    payload = codec.parse_predict_body(LARGE, pool.parse)  # the pool found broken: here
    np.testing.assert_array_equal(payload["instances"].raw, ROWS)
    payload = codec.parse_predict_body(LARGE, pool.parse)  # a new worker
    np.testing.assert_array_equal(payload["instances"].raw, ROWS)
    assert pool.worker_pids() and pid not in pool.worker_pids()


def test_a_closed_pool_parses_here(pool: DecodePool) -> None:
    pool.close()
    payload = codec.parse_predict_body(LARGE, pool.parse)
    np.testing.assert_array_equal(payload["instances"].raw, ROWS)
    assert pool.running_workers() == 0

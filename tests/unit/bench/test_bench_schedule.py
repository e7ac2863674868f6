"""Open-loop send times: Poisson-timed, and each measurement window holds the rate times its
length to one request, whatever the rate (``bench.loadgen.schedule``)."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from sharedserve.bench.loadgen import BLOCK_MIN, BLOCK_S, arrivals, block_count, block_span


def _times(rate: float, window: float, warmup: float, windows: int) -> np.ndarray:
    end = warmup + windows * window
    sent = arrivals(random.Random(7), rate, window, warmup)
    return np.array(list(itertools.takewhile(lambda t: t < end, sent)))


# size --verify's windows: a 10 s warm-up, then three of 20 s (a 60 s --duration). 1/s is the
# rate whose 60 s held 55 requests before, in every run; 1.5/s, 0.3/s and an odd rate do not
# divide into whole blocks; 200/s is a hot model's.
@pytest.mark.parametrize("rate", [1.0, 1.5, 0.3, 7.37, 200.0])
@pytest.mark.parametrize(("window", "warmup"), [(20.0, 10.0), (60.0, 5.0), (10.0, 0.0)])
def test_every_window_holds_the_rate_times_its_length_to_one_request(
    rate: float, window: float, warmup: float
) -> None:
    times = _times(rate, window, warmup, 3)
    assert np.all(np.diff(times) >= 0) and times[0] >= 0
    for k in range(3):
        low, high = warmup + k * window, warmup + (k + 1) * window
        held = int(np.sum((times >= low) & (times < high)))
        assert abs(held - rate * window) <= 1, (k, held)
    measured = int(np.sum(times >= warmup))
    assert abs(measured - rate * window * 3) <= 1


def test_the_send_times_are_poisson_within_their_blocks() -> None:
    # Uniform positions in blocks: gaps about exponential, coefficient of variation near 1
    # (a fixed schedule would give 0).
    gaps = np.diff(_times(200.0, 20.0, 10.0, 3))
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize(("rate", "window"), [(1.0, 20.0), (200.0, 20.0), (0.05, 20.0), (3.0, 7.0)])
def test_a_block_divides_the_window_and_is_long_enough(rate: float, window: float) -> None:
    span = block_span(rate, window)
    blocks = window / span
    assert blocks == pytest.approx(round(blocks))
    if window >= max(BLOCK_S, BLOCK_MIN / rate):
        assert span >= BLOCK_S and rate * span >= BLOCK_MIN - 1e-9
    else:
        assert span == window  # too short a window for a full block: one block a window


def test_counts_carry_from_block_to_block() -> None:
    # 0.75 requests a block: 0, 1, 1, 1, 0, ... summing to 0.75 a block over any run.
    counts = [block_count(0.375, 2.0, i) for i in range(-4, 12)]
    assert set(counts) <= {0, 1}
    for start in range(len(counts) - 8):
        assert abs(sum(counts[start : start + 8]) - 6) <= 1
    assert math.isclose(sum(counts), 0.75 * len(counts), abs_tol=1)


def test_a_bad_schedule_is_refused() -> None:
    with pytest.raises(ValueError, match="rate > 0"):
        next(arrivals(random.Random(0), 0.0, 20.0, 10.0))

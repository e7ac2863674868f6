"""When an open-loop (``poisson``) target sends: Poisson arrivals in blocks of an exact count,
lined up with the windows the load generator measures in. Pure.

Free-running exponential gaps give a count whose noise alone is 1/sqrt(rate * window): 10% at
1.5/s over 60 s, more than a plan's QPS may miss by. So arrivals come in blocks, each a fixed
count spread uniformly at random over the block: a Poisson process conditioned on its count,
Poisson-timed within the block still. The blocks are lined up with the measurement windows
(the first opens after the warm-up, each ``duration / stability_windows`` long): a block's span
divides the window and block edges fall on window edges, so a window holds whole blocks, and
the counts are carried from block to block, so it holds the rate times its length to one
request. Blocks that ran from the user's start in spans of their own were cut by the windows'
edges: a 1/s target held 55 requests in 60 s, the same 55 in two runs (``size --verify``,
benchmarks/results/sizing_verify_cpu.md).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

__all__ = ["BLOCK_MIN", "BLOCK_S", "arrivals", "block_count", "block_span"]

BLOCK_MIN = 8
"""Arrivals a block holds at the least (the Poisson timing is within a block)."""
BLOCK_S = 2.0
"""Seconds a block lasts at the least."""


def block_span(rate: float, window_s: float) -> float:
    """A block's seconds: the window split into as many blocks as each still lasts ``BLOCK_S``
    and holds ``BLOCK_MIN`` arrivals at ``rate``; the whole window where it is shorter."""
    shortest = max(BLOCK_S, BLOCK_MIN / rate)
    return window_s / max(1, math.floor(window_s / shortest))


def block_count(rate: float, span_s: float, index: int) -> int:
    """Arrivals in block ``index`` (0: the first of the first window; negative: the warm-up's):
    the whole requests the rate has made by its end less those by its start, so that any run of
    blocks holds ``rate`` times its length to one request."""
    per_block = rate * span_s
    return math.floor(per_block * (index + 1)) - math.floor(per_block * index)


def arrivals(rng: random.Random, rate: float, window_s: float, warmup_s: float) -> Iterator[float]:
    """Send times, in seconds from the user's start, sorted, without end: blocks lined up with
    windows that open ``warmup_s`` after the start and last ``window_s`` each."""
    if not rate > 0 or not window_s > 0 or warmup_s < 0:
        raise ValueError(
            f"need rate > 0, window > 0, warm-up >= 0; got {rate}, {window_s}, {warmup_s}"
        )
    span = block_span(rate, window_s)
    index = -math.ceil(warmup_s / span - 1e-9)
    while True:
        low, high = warmup_s + index * span, warmup_s + (index + 1) * span
        count = block_count(rate, span, index)
        if low < 0:  # the warm-up's first block, cut at the start: its share of the count
            count, low = round(count * high / span), 0.0
        yield from sorted(rng.uniform(low, high) for _ in range(count))
        index += 1

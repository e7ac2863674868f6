"""An HDR-style latency histogram in integer microseconds, mergeable across processes.

Why our own: Locust rounds the latencies it keeps to about two significant digits, which is too
coarse for a P99 against an SLO, and the HdrHistogram package is not worth a dependency for the
hundred lines this takes. The bucketing is HdrHistogram's with 3 significant digits and a lowest
discernible value of 1 us: values below 2048 us have a bucket each; above, every power-of-two
range ``[1024 * 2**e, 2048 * 2**e)`` is split into 1024 buckets of width ``2**e``, so a value is
known to within 1/1024 (< 0.1%) of itself.

A bucket's index is ``(e << 10) + (value >> e)`` with ``e = max(0, value.bit_length() - 11)``:
0..2047 are the exact values, and each later run of 1024 indexes is one power-of-two range. The
exact minimum, maximum and sum are kept besides the buckets, so ``max_us`` and ``mean_us`` are
exact and no percentile is reported above the largest value actually seen.

Pure: standard library only.
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction
from typing import ClassVar

__all__ = ["LatencyHistogram"]

_SUB_BITS = 10  # 1024 sub-buckets per power-of-two range: 3 significant digits
_EXACT_BITS = _SUB_BITS + 1  # values below 2**11 = 2048 us get a bucket each
_META = ("min_us", "max_us", "sum_us")

# Where compact() cuts the distribution, as shares of the observations: a pair per 2% through
# the body, finer in the tail (a p99 rests on its last 1%), and a narrow pair ending exactly at
# the median's and the p99's rank, so that both read back from the pairs within that pair's
# width of the exact figures. 65 pairs at most.
_CUTS = tuple(
    sorted(
        {Fraction(k, 50) for k in range(1, 50)}
        | {Fraction(s) for s in ("0.49", "0.495", "0.499")}
        | {Fraction(s) for s in ("0.985", "0.989", "0.9895", "0.99", "0.991", "0.993")}
        | {Fraction(s) for s in ("0.995", "0.997", "0.998", "0.999", "0.9995", "0.9999", "1")}
    )
)


def _index(value: int) -> int:
    shift = max(0, value.bit_length() - _EXACT_BITS)
    return (shift << _SUB_BITS) + (value >> shift)


def _lowest(index: int) -> int:
    shift = max(0, (index >> _SUB_BITS) - 1)
    return (index - (shift << _SUB_BITS)) << shift


def _highest(index: int) -> int:
    shift = max(0, (index >> _SUB_BITS) - 1)
    return _lowest(index) + (1 << shift) - 1


def _plain_int(value: object, what: str) -> int:
    # bool is an int subclass and floats of whole numbers would pass a value check; neither is
    # what a well-formed dictionary holds.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return value


class LatencyHistogram:
    """HDR-style latency histogram in integer microseconds, mergeable across processes."""

    RESOLUTION: ClassVar[str] = (
        "Latencies are recorded in whole microseconds in an HDR-style histogram (3 significant "
        "digits): exact below 2048 us, within 0.1% above; a percentile is reported as the upper "
        "edge of its bucket, never above the largest latency measured."
    )

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self._count = 0
        self._min = 0
        self._max = 0
        self._sum = 0

    def record(self, micros: int, count: int = 1) -> None:
        """Add ``count`` observations of ``micros`` microseconds (an integer >= 0)."""
        value = operator.index(micros)
        n = operator.index(count)
        if value < 0:
            raise ValueError(f"latency must be >= 0 microseconds, got {value}")
        if n < 1:
            raise ValueError(f"count must be >= 1, got {n}")
        index = _index(value)
        self._counts[index] = self._counts.get(index, 0) + n
        if self._count == 0:
            self._min = self._max = value
        else:
            self._min = min(self._min, value)
            self._max = max(self._max, value)
        self._count += n
        self._sum += value * n

    def merge(self, other: LatencyHistogram) -> None:
        """Add every observation of ``other`` to this histogram (``other`` is left as is)."""
        if other._count == 0:
            return
        for index, n in other._counts.items():
            self._counts[index] = self._counts.get(index, 0) + n
        if self._count == 0:
            self._min, self._max = other._min, other._max
        else:
            self._min = min(self._min, other._min)
            self._max = max(self._max, other._max)
        self._count += other._count
        self._sum += other._sum

    @property
    def count(self) -> int:
        """Observations recorded."""
        return self._count

    @property
    def max_us(self) -> int:
        """Largest latency recorded, exact, in microseconds (0 when empty)."""
        return self._max

    @property
    def min_us(self) -> int:
        """Smallest latency recorded, exact, in microseconds (0 when empty)."""
        return self._min

    def percentile_us(self, q: float) -> float:
        """Latency at percentile ``q`` (0..100) in microseconds; 0.0 when empty.

        As HdrHistogram's ``getValueAtPercentile``: the smallest bucket such that at least q% of
        the observations are in it or below, reported as the bucket's highest value, capped at the
        exact maximum. q = 0 gives the exact minimum.
        """
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 100:
            raise ValueError(f"percentile must be a number in [0, 100], got {q!r}")
        if self._count == 0:
            return 0.0
        if q == 0:
            return float(self._min)
        # Exact arithmetic on the decimal the caller wrote: in binary, 99.9% of 1000 is a hair
        # above 999, and rounding that up would move P99.9 one observation too far.
        rank = max(1, math.ceil(Fraction(repr(float(q))) * self._count / 100))
        seen = 0
        for index in sorted(self._counts):
            seen += self._counts[index]
            if seen >= rank:
                return float(min(_highest(index), self._max))
        raise AssertionError("bucket counts do not add up to the total")  # pragma: no cover

    def mean_us(self) -> float:
        """Mean latency in microseconds, exact (from the sum, not the buckets); 0.0 when empty."""
        return self._sum / self._count if self._count else 0.0

    def compact_us(self) -> list[tuple[float, int]]:
        """The distribution in at most 65 (value_us, count) pairs, by value; [] when empty.

        The observations, in order, are cut at fixed shares (``_CUTS``); each pair is one cut's
        observations: their count and their mean (a bucket's midpoint standing in for its
        values, capped at the exact minimum and maximum), so the pairs' mean is the
        histogram's to within a bucket. Read as an empirical distribution (the smallest value
        with at least q of the counts at or below it), the pairs give a p50 between the exact
        p49.9 and p50 and a p99 between the exact p98.95 and p99: for a latency, within a
        fraction of a percent of them. Why: a report carries a service-time distribution a
        queueing model can draw from without the thousands of buckets of ``to_dict``.
        """
        if self._count == 0:
            return []
        ranks = sorted({math.ceil(q * self._count) for q in _CUTS} - {0})
        buckets = [
            (min(max((_lowest(i) + _highest(i)) / 2, self._min), self._max), self._counts[i])
            for i in sorted(self._counts)
        ]
        pairs: list[tuple[float, int]] = []
        seen, at, left = 0, 0, buckets[0][1]  # observations taken; bucket at; left in it
        for rank in ranks:
            total, n = 0.0, rank - seen
            while seen < rank:
                take = min(left, rank - seen)
                total += buckets[at][0] * take
                seen += take
                left -= take
                if left == 0 and at + 1 < len(buckets):
                    at += 1
                    left = buckets[at][1]
            value = total / n
            if pairs and pairs[-1][0] == value:  # few observations: cuts on the same value
                pairs[-1] = (value, pairs[-1][1] + n)
            else:
                pairs.append((value, n))
        return pairs

    def to_dict(self) -> dict[str, int]:
        """A sparse, JSON-safe form for files and process boundaries.

        One entry per non-empty bucket, keyed by the bucket's lowest value in microseconds as a
        decimal string (readable as is: ``"2048": 3`` is three observations in [2048, 2049]), plus
        ``min_us``, ``max_us`` and ``sum_us``, exact. An empty histogram is ``{}``.
        """
        if self._count == 0:
            return {}
        data = {str(_lowest(i)): n for i, n in sorted(self._counts.items())}
        data.update(min_us=self._min, max_us=self._max, sum_us=self._sum)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> LatencyHistogram:
        """Rebuild a histogram from ``to_dict``'s form; ValueError says what is wrong with it."""
        if not isinstance(data, dict):
            raise ValueError(f"histogram must be a dict, got {type(data).__name__}")
        hist = cls()
        for key, raw in data.items():
            if key in _META:
                continue
            # One spelling per bucket ("7", never "007"), or two keys could name the same bucket.
            if (
                not isinstance(key, str)
                or not key.isascii()
                or not key.isdigit()
                or key != str(int(key))
            ):
                raise ValueError(f"histogram key {key!r} is not a bucket value in microseconds")
            n = _plain_int(raw, f"histogram count for {key!r}")
            if n < 1:
                raise ValueError(f"histogram count for {key!r} must be >= 1, got {n}")
            index = _index(int(key))
            if _lowest(index) != int(key):
                raise ValueError(f"histogram key {key!r} is not the lowest value of a bucket")
            hist._counts[index] = n
            hist._count += n
        present = [k for k in _META if k in data]
        if hist._count == 0:
            if present:
                raise ValueError(f"empty histogram has {', '.join(present)}")
            return hist
        if len(present) != len(_META):
            missing = [k for k in _META if k not in data]
            raise ValueError(f"histogram lacks {', '.join(missing)}")
        low = _plain_int(data["min_us"], "min_us")
        high = _plain_int(data["max_us"], "max_us")
        total = _plain_int(data["sum_us"], "sum_us")
        indexes = sorted(hist._counts)
        if low < 0 or _index(low) != indexes[0]:
            raise ValueError(f"min_us {low} is not in the lowest non-empty bucket")
        if _index(high) != indexes[-1]:
            raise ValueError(f"max_us {high} is not in the highest non-empty bucket")
        if not low * hist._count <= total <= high * hist._count:
            raise ValueError(f"sum_us {total} is impossible for {hist._count} values in [min, max]")
        hist._min, hist._max, hist._sum = low, high, total
        return hist

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LatencyHistogram):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    # Mutable, so unhashable: two histograms equal now may differ after the next record.
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"LatencyHistogram(count={self._count}, min_us={self._min}, max_us={self._max}, "
            f"buckets={len(self._counts)})"
        )

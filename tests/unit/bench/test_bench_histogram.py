"""The latency histogram: percentiles against numpy within the stated resolution, exact small
cases, merging, the dictionary form and its validation."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from sharedserve.bench.histogram import LatencyHistogram

QUANTILES = [0.0, 1.0, 10.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0]


def _hist(values: list[int]) -> LatencyHistogram:
    hist = LatencyHistogram()
    for v in values:
        hist.record(v)
    return hist


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("uniform small, all exact", lambda r: r.integers(0, 2048, 10_007)),
        ("lognormal ~5 ms", lambda r: np.rint(r.lognormal(np.log(5_000), 0.6, 10_007))),
        (
            "lognormal ~80 ms, heavy tail",
            lambda r: np.rint(r.lognormal(np.log(80_000), 1.2, 10_007)),
        ),
        (
            "bimodal 1 ms and 2 s",
            lambda r: r.choice([900, 2_000_000], 10_007) + r.integers(0, 50, 10_007),
        ),
        ("few values", lambda r: r.integers(100_000, 100_010, 13)),
    ],
)
def test_percentiles_match_numpy_within_resolution(
    name: str, make: Callable[[np.random.Generator], Any]
) -> None:
    rng = np.random.default_rng(6)
    data = np.asarray(make(rng), dtype=np.int64)
    hist = _hist([int(v) for v in data])
    assert hist.count == len(data), name
    assert hist.max_us == data.max()
    assert hist.min_us == data.min()
    assert hist.mean_us() == pytest.approx(data.mean(), rel=1e-12)
    for q in QUANTILES:
        # inverted_cdf is the same definition: the smallest value with at least q% at or below it.
        exact = float(np.percentile(data, q, method="inverted_cdf"))
        got = hist.percentile_us(q)
        # Never below the true value (the bucket's top is reported), never a bucket above it.
        assert exact <= got <= max(exact * (1 + 1 / 1024), exact), (name, q, exact, got)
        if exact < 2048:
            assert got == exact, (name, q)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, 0.0),
        ([], 0, 0.0),
        ([0], 50, 0.0),
        ([7], 0, 7.0),
        ([7], 100, 7.0),
        ([1, 2, 3, 4], 25, 1.0),
        ([1, 2, 3, 4], 25.1, 2.0),
        ([1, 2, 3, 4], 50, 2.0),
        ([1, 2, 3, 4], 75, 3.0),
        ([1, 2, 3, 4], 100, 4.0),
        (list(range(1, 1001)), 99.9, 999.0),  # binary 99.9% of 1000 is a hair above 999
        (list(range(1, 1001)), 0.1, 1.0),
        (list(range(1, 101)), 99, 99.0),
        ([5, 1, 3], 0, 1.0),
        # 2049 shares a bucket with 2048; the bucket's top is 2049 and nothing is above max.
        ([2048], 50, 2048.0),
        ([2048, 2049], 50, 2049.0),
        ([4096, 4097, 10_000], 50, 4099.0),
        ([4096, 4097, 10_000], 100, 10_000.0),
        ([1_000_000], 99, 1_000_000.0),
        ([999_936, 2_000_000], 50, 1_000_447.0),
    ],
)
def test_exact_small_cases(values: list[int], q: float, expected: float) -> None:
    assert _hist(values).percentile_us(q) == expected


def test_count_argument_and_empty_values() -> None:
    hist = LatencyHistogram()
    assert (hist.count, hist.max_us, hist.min_us, hist.mean_us()) == (0, 0, 0, 0.0)
    hist.record(10, count=3)
    hist.record(40)
    assert (hist.count, hist.min_us, hist.max_us, hist.mean_us()) == (4, 10, 40, 17.5)
    assert hist.percentile_us(75) == 10.0
    assert hist.percentile_us(75.01) == 40.0
    hist.record(np.int64(2))  # type: ignore[arg-type]  # numpy integers are integers
    assert hist.min_us == 2


def test_merge_equals_recording_everything() -> None:
    rng = np.random.default_rng(1)
    parts = [[int(v) for v in rng.integers(0, 5_000_000, n)] for n in (0, 1, 500, 3000)]
    merged = LatencyHistogram()
    for part in parts:
        merged.merge(_hist(part))
    everything = _hist([v for part in parts for v in part])
    assert merged == everything
    assert merged.to_dict() == everything.to_dict()
    for q in QUANTILES:
        assert merged.percentile_us(q) == everything.percentile_us(q)
    assert merged.mean_us() == everything.mean_us()
    # Merging into an empty histogram and merging an empty one are both identities.
    target = LatencyHistogram()
    target.merge(everything)
    target.merge(LatencyHistogram())
    assert target == everything


def test_merge_leaves_the_other_alone() -> None:
    a, b = _hist([1, 2]), _hist([3])
    a.merge(b)
    assert b.to_dict() == _hist([3]).to_dict()
    assert a.count == 3


def test_round_trip_through_json_is_exact_and_sparse() -> None:
    rng = np.random.default_rng(2)
    values = [int(v) for v in np.rint(rng.lognormal(np.log(20_000), 1.0, 20_000))]
    hist = _hist(values)
    data = json.loads(json.dumps(hist.to_dict()))
    back = LatencyHistogram.from_dict(data)
    assert back == hist
    assert (back.max_us, back.min_us, back.mean_us()) == (hist.max_us, hist.min_us, hist.mean_us())
    for q in QUANTILES:
        assert back.percentile_us(q) == hist.percentile_us(q)
    buckets = {k for k in data if k not in ("min_us", "max_us", "sum_us")}
    assert len(buckets) == len(data) - 3
    assert all(k.isdigit() and data[k] > 0 for k in buckets)  # only non-empty buckets
    assert len(buckets) < len(set(values))


def test_dict_form_is_documented() -> None:
    assert LatencyHistogram().to_dict() == {}
    assert _hist([5, 5, 2049, 2048]).to_dict() == {
        "5": 2,
        "2048": 2,
        "min_us": 5,
        "max_us": 2049,
        "sum_us": 4107,
    }
    assert LatencyHistogram.from_dict({}) == LatencyHistogram()


def test_equality() -> None:
    assert _hist([1, 2]) == _hist([2, 1])
    assert _hist([1, 2]) != _hist([1, 3])
    assert _hist([1]) != "1"
    with pytest.raises(TypeError):
        hash(LatencyHistogram())


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((-1,), ValueError),
        ((5, 0), ValueError),
        ((5, -2), ValueError),
        ((1.5,), TypeError),
        (("7",), TypeError),
    ],
)
def test_record_rejects_bad_input(args: tuple[object, ...], error: type[Exception]) -> None:
    hist = LatencyHistogram()
    with pytest.raises(error):
        hist.record(*args)  # type: ignore[arg-type]
    assert hist.count == 0


@pytest.mark.parametrize("q", [-0.1, 100.01, float("nan"), "50", True])
def test_percentile_rejects_bad_quantiles(q: object) -> None:
    with pytest.raises(ValueError, match="percentile"):
        _hist([1]).percentile_us(q)  # type: ignore[arg-type]


GOOD = {"5": 2, "2048": 1, "min_us": 5, "max_us": 2049, "sum_us": 2059}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "must be a dict"),
        ({"x": 1}, "not a bucket value"),
        ({"-5": 1, "min_us": -5, "max_us": -5, "sum_us": -5}, "not a bucket value"),
        ({"05": 1, "min_us": 5, "max_us": 5, "sum_us": 5}, "not a bucket value"),
        ({"\u00b2": 1, "min_us": 2, "max_us": 2, "sum_us": 2}, "not a bucket value"),
        ({"2049": 1, "min_us": 2049, "max_us": 2049, "sum_us": 2049}, "lowest value of a bucket"),
        ({**GOOD, "5": 0}, "must be >= 1"),
        ({**GOOD, "5": 1.0}, "must be an integer"),
        ({**GOOD, "5": True}, "must be an integer"),
        ({"5": 1}, "lacks min_us, max_us, sum_us"),
        ({"min_us": 0, "max_us": 0, "sum_us": 0}, "empty histogram has"),
        ({**GOOD, "min_us": 6}, "min_us 6 is not in the lowest"),
        ({**GOOD, "max_us": 4000}, "max_us 4000 is not in the highest"),
        ({**GOOD, "max_us": "2049"}, "max_us must be an integer"),
        ({**GOOD, "sum_us": 10}, "sum_us 10 is impossible"),
    ],
)
def test_from_dict_rejects_bad_data(data: object, message: str) -> None:
    assert LatencyHistogram.from_dict(GOOD).count == 3
    with pytest.raises(ValueError, match=message):
        LatencyHistogram.from_dict(data)  # type: ignore[arg-type]


def test_resolution_is_a_sentence() -> None:
    text = LatencyHistogram.RESOLUTION
    assert text.endswith(".") and "2048" in text and "0.1%" in text

"""Table-driven tests of the batching policy: parameters file, settings, merge/split, packing."""

from __future__ import annotations

import numpy as np
import pytest

from sharedserve.errors import ConfigError, InvalidInput, SharedServeError
from sharedserve.server.inference.batching_policy import (
    BatchingSettings,
    batch_key,
    merge,
    parse_batching_parameters,
    request_rows,
    split,
    take_batch,
)

TF_SERVING_EXAMPLE = """\
max_batch_size { value: 128 }
batch_timeout_micros { value: 0 }
max_enqueued_batches { value: 1000000 }
num_batch_threads { value: 8 }
"""


def strings(*values: bytes) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(TF_SERVING_EXAMPLE, BatchingSettings(128, 0, 1_000_000, 8), id="tf-serving"),
        pytest.param("", BatchingSettings(), id="empty-keeps-defaults"),
        pytest.param(
            "# tuned for the T4\nmax_batch_size { value: 64 }  # rows\n\n",
            BatchingSettings(max_batch_size=64),
            id="comments",
        ),
        pytest.param(
            "max_batch_size {\n  value: 16\n}\nbatch_timeout_micros: < value: 5000 >",
            BatchingSettings(max_batch_size=16, batch_timeout_micros=5000),
            id="multiline-colon-and-angle-brackets",
        ),
        pytest.param(
            "max_batch_size { value: 0x20 }, num_batch_threads { value: 2 };",
            BatchingSettings(max_batch_size=32, num_batch_threads=2),
            id="hex-and-separators",
        ),
        pytest.param(
            'thread_pool_name { value: "batch_threads" }\npad_variable_length_inputs: false\n'
            "enable_large_batch_splitting { value: false }",
            BatchingSettings(),
            id="ignored-and-off-fields",
        ),
        pytest.param("batch_timeout_micros {}", BatchingSettings(), id="empty-wrapper-is-zero"),
    ],
)
def test_parse_valid(text: str, expected: BatchingSettings) -> None:
    assert parse_batching_parameters(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "max_batch_size { value: 8 }\nmax_batch_sise { value: 8 }\nfoo: 1",
            'line 2: Message type "sharedserve.tfserving.BatchingParameters" has no field named '
            '"max_batch_sise"',  # protobuf's parser stops at the first
            id="unknown-fields-named",
        ),
        pytest.param(
            "allowed_batch_sizes: 8\nallowed_batch_sizes: 16",
            "line 1: allowed_batch_sizes is not supported",
            id="allowed-batch-sizes",
        ),
        pytest.param(
            "pad_variable_length_inputs: true",
            "line 1: pad_variable_length_inputs is not supported",
            id="padding-on",
        ),
        pytest.param(
            "\nenable_large_batch_splitting { value: true }",
            "line 2: enable_large_batch_splitting is not supported",
            id="splitting-on",
        ),
        pytest.param(
            "max_batch_size {\n value: 8\n",
            'line 2: Expected "}"',
            id="unclosed",
        ),
        pytest.param(
            "\n\nmax_batch_size 8", "line 3: 'max_batch_size 8': Expected \"{\"", id="no-colon"
        ),
        pytest.param(
            "max_batch_size {\n value: }",
            "line 2: ' value: }': Couldn't parse integer",
            id="no-value",
        ),
        pytest.param("}", "line 1: '}': Expected identifier or number, got }", id="stray-brace"),
        pytest.param("\nmax_batch_size { value: 8 } $", "line 2: ", id="bad-char"),
        pytest.param(
            "max_batch_size: 8",
            "line 1: 'max_batch_size: 8': Expected \"{\" (column 17); TF Serving's fields are "
            "google.protobuf wrappers: write 'max_batch_size { value: 8 }'",
            id="unwrapped-int",
        ),
        pytest.param(
            "max_batch_size { count: 8 }",
            'line 1: Message type "google.protobuf.Int64Value" has no field named "count"',
            id="no-wrapped-value",
        ),
        pytest.param(
            "max_batch_size { value: 8 value: 9 }",
            'should not have multiple "value" fields',
            id="two-values",
        ),
        pytest.param(
            "max_batch_size { value: 8 }\n\nmax_batch_size { value: 9 }",
            'line 3: Message type "sharedserve.tfserving.BatchingParameters" should not have '
            'multiple "max_batch_size" fields',
            id="duplicate",
        ),
    ],
)
def test_parse_malformed(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_batching_parameters(text)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_batch_size { value: 1.5 }", "line 1: .*Couldn't parse integer: 1.5"),
        ('num_batch_threads { value: "4" }', 'line 1: .*Couldn\'t parse integer: "4"'),
        ("num_batch_threads { value: true }", "Couldn't parse integer: true"),
        ("max_batch_size { value: 99999999999999999999 }", "Value out of range"),
        ("max_batch_size { value: 0 }", "max_batch_size must be an integer >= 1, got 0"),
        ("batch_timeout_micros { value: -1 }", "batch_timeout_micros must be an integer >= 0"),
        ("max_enqueued_batches { value: 0 }", "max_enqueued_batches must be an integer >= 1"),
        ("num_batch_threads { value: 0 }", "num_batch_threads must be an integer >= 1"),
    ],
)
def test_parse_bad_values(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_batching_parameters(text)


def test_defaults_are_tf_servings() -> None:
    settings = BatchingSettings()
    assert (settings.max_batch_size, settings.batch_timeout_micros) == (1000, 0)
    assert settings.max_enqueued_batches == 10
    settings.validate()


@pytest.mark.parametrize(
    ("settings", "problems"),
    [
        (BatchingSettings(max_batch_size=0), ["max_batch_size"]),
        (BatchingSettings(batch_timeout_micros=-5), ["batch_timeout_micros"]),
        (BatchingSettings(max_enqueued_batches=-1, num_batch_threads=0), ["max_enq", "num_b"]),
        (BatchingSettings(max_batch_size=True), ["max_batch_size must be an integer"]),
        (BatchingSettings(num_batch_threads=2.0), ["num_batch_threads"]),  # type: ignore[arg-type]
    ],
)
def test_validate_names_every_problem(settings: BatchingSettings, problems: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        settings.validate()
    for problem in problems:
        assert problem in str(info.value)


F32 = np.zeros((2, 3), np.float32)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (("s", {"x": F32}), ("s", {"x": np.ones((5, 3), np.float32)}), True),
        (("s", {"x": F32}), ("t", {"x": F32}), False),
        (("s", {"x": F32}), ("s", {"x": F32.astype(np.float64)}), False),
        (("s", {"x": F32}), ("s", {"x": np.zeros((2, 4), np.float32)}), False),
        (("s", {"x": F32}), ("s", {"x": np.zeros((2, 3, 1), np.float32)}), False),
        (("s", {"x": F32}), ("s", {"y": F32}), False),
        (("s", {"x": F32}), ("s", {"x": F32, "y": F32}), False),
        (("s", {"a": F32, "b": F32[:, :1]}), ("s", {"b": F32[:, :1], "a": F32}), True),
        (("s", {"x": np.array(["a"])}), ("s", {"x": np.array(["abcdef"])}), True),
        (("s", {"x": np.array(["a"])}), ("s", {"x": np.array([b"a"])}), False),
        (("s", {"x": strings(b"a")}), ("s", {"x": strings(b"abc", b"d")}), True),
    ],
)
def test_batch_key(
    a: tuple[str, dict[str, np.ndarray]], b: tuple[str, dict[str, np.ndarray]], same: bool
) -> None:
    assert (batch_key(*a) == batch_key(*b)) is same
    hash(batch_key(*a))


@pytest.mark.parametrize(
    "requests",
    [
        pytest.param([{"x": np.arange(6, dtype=np.float32).reshape(3, 2)}], id="one"),
        pytest.param([{"x": np.full((n, 2), n, np.float32)} for n in (1, 3, 2)], id="float-uneven"),
        pytest.param([{"x": np.arange(n, dtype=np.int64)} for n in (4, 0, 1)], id="int-empty"),
        pytest.param(
            [{"s": strings(b"a", b"bc")}, {"s": strings(b"")}, {"s": strings(b"\xff" * 3)}],
            id="string-object",
        ),
        pytest.param(
            [
                {"img": np.ones((n, 2, 2), np.uint8) * n, "id": np.arange(n, dtype=np.int32)}
                for n in (2, 1)
            ],
            id="multi-input",
        ),
    ],
)
def test_merge_split_round_trip(requests: list[dict[str, np.ndarray]]) -> None:
    merged, sizes = merge(requests)
    assert sizes == [request_rows(r) for r in requests]
    for name, array in merged.items():
        assert array.shape[0] == sum(sizes)
        assert array.dtype == requests[0][name].dtype
    back = split(merged, sizes)
    assert len(back) == len(requests)
    for got, sent in zip(back, requests, strict=True):
        assert got.keys() == sent.keys()
        for name in sent:
            assert got[name].dtype == sent[name].dtype
            np.testing.assert_array_equal(got[name], sent[name])


def test_split_outputs_differ_from_inputs() -> None:
    outputs = {"y": np.arange(5) * 10, "label": strings(b"a", b"b", b"c", b"d", b"e")}
    first, second = split(outputs, [2, 3])
    np.testing.assert_array_equal(first["y"], [0, 10])
    assert list(second["label"]) == [b"c", b"d", b"e"]


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ([{"x": F32, "y": np.zeros(3)}], "disagree on the batch size"),
        ([{"x": np.float32(1.0) * np.ones(())}], "is a scalar"),
        ([{}], "at least one input"),
        ([{"x": F32}, {"x": np.zeros((1, 4), np.float32)}], "cannot be batched"),
        ([{"x": F32}, {"x": F32.astype(np.int64)}], "cannot be batched"),
        ([{"x": F32}, {"z": F32}], "cannot be batched"),
    ],
)
def test_merge_refuses(requests: list[dict[str, np.ndarray]], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        merge(requests)


@pytest.mark.parametrize(
    "outputs",
    [{"y": np.zeros(4)}, {"y": np.zeros(5), "z": np.float32(0.0) * np.ones(())}],
)
def test_split_refuses_output_without_the_batch(outputs: dict[str, np.ndarray]) -> None:
    with pytest.raises(SharedServeError, match="had 5 rows"):
        split(outputs, [2, 3])


@pytest.mark.parametrize(
    ("sizes", "limit", "taken"),
    [
        ([], 8, 0),
        ([3], 8, 1),
        ([3, 5], 8, 2),
        ([3, 5, 1], 8, 2),
        ([3, 6, 1], 8, 1),  # FIFO: the 1 behind the 6 does not jump the queue
        ([1] * 20, 8, 8),
        ([0, 0, 8], 8, 3),
        ([9, 1], 8, 1),  # over the limit: alone (the batcher refuses these earlier)
    ],
)
def test_take_batch(sizes: list[int], limit: int, taken: int) -> None:
    assert take_batch(sizes, limit) == taken

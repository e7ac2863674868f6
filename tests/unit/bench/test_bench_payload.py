"""Requests built from model metadata, and how many load-generator processes a density gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from sharedserve.bench.launch import loadgen_processes
from sharedserve.bench.offered import ReplicaRef, offered_load
from sharedserve.bench.payload import InputSpec, random_inputs, rest_body, signature_inputs
from sharedserve.config import BenchSettings, LoadPattern
from sharedserve.errors import ConfigError


def metadata(inputs: dict[str, Any]) -> dict[str, Any]:
    signature = {"inputs": inputs, "outputs": {}, "method_name": "tensorflow/serving/predict"}
    return {"metadata": {"signature_def": {"signature_def": {"serving_default": signature}}}}


def tensor(dtype: str, *sizes: int, unknown_rank: bool = False) -> dict[str, Any]:
    dims = [{"size": str(s), "name": ""} for s in sizes]
    return {"dtype": dtype, "tensor_shape": {"dim": dims, "unknown_rank": unknown_rank}}


def test_batch_one_shapes_and_dtypes_from_the_signature() -> None:
    specs = signature_inputs(
        metadata({"images": tensor("DT_FLOAT", -1, 224, 224, 3), "ids": tensor("DT_INT64", -1, -1)})
    )
    assert specs == [
        InputSpec("ids", "DT_INT64", (1, 1)),
        InputSpec("images", "DT_FLOAT", (1, 224, 224, 3)),
    ]
    arrays = random_inputs(specs, seed=3)
    assert arrays["images"].dtype == np.float32 and arrays["images"].shape == (1, 224, 224, 3)
    assert arrays["ids"].dtype == np.int64
    assert np.array_equal(random_inputs(specs, seed=3)["images"], arrays["images"])
    body = orjson.loads(rest_body(arrays))
    assert np.asarray(body["inputs"]["images"]).shape == (1, 224, 224, 3)


def test_strings_and_bools_are_filled() -> None:
    specs = signature_inputs(
        metadata({"s": tensor("DT_STRING", -1), "b": tensor("DT_BOOL", -1, 2)})
    )
    body = orjson.loads(rest_body(random_inputs(specs, seed=0)))
    assert body["inputs"]["s"] == ["sharedserve"]
    assert all(isinstance(v, bool) for v in body["inputs"]["b"][0])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "no signature"),
        (metadata({}), "has no inputs"),
        (metadata({"x": tensor("DT_COMPLEX64", -1)}), "cannot fill"),
        (metadata({"x": tensor("DT_FLOAT", unknown_rank=True)}), "unknown rank"),
    ],
)
def test_unusable_metadata_is_refused(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        signature_inputs(data)


@pytest.mark.parametrize(
    ("pattern", "concurrency", "rate", "density", "workers", "expected"),
    [
        (LoadPattern.SEQUENTIAL, 10, 10.0, 8, None, 0),  # 8 users: the master runs them
        (LoadPattern.PARALLEL, 10, 10.0, 1, None, 0),
        (LoadPattern.PARALLEL, 10, 10.0, 4, None, 0),  # 40 users: still one process
        (LoadPattern.PARALLEL, 10, 10.0, 8, None, 2),  # 80 users: two workers
        (LoadPattern.POISSON, 10, 3000.0, 2, None, 2),  # 6000 req/s offered
        (LoadPattern.POISSON, 10, 500.0, 4, None, 0),
        (LoadPattern.PARALLEL, 10, 10.0, 8, 3, 3),  # explicit wins
    ],
)
def test_loadgen_processes_follow_the_offered_load(
    pattern: LoadPattern,
    concurrency: int,
    rate: float,
    density: int,
    workers: int | None,
    expected: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    settings = BenchSettings(
        out_dir=Path("out"),
        targets_file=Path("t.json"),
        pattern=pattern,
        concurrency=concurrency,
        rate=rate,
        loadgen_workers=workers,
    )
    replicas = [ReplicaRef(f"tiny-{i}", "tiny", 1.0) for i in range(density)]
    offered = offered_load(replicas, pattern, concurrency=concurrency, rate=rate, scale=density)
    assert loadgen_processes(settings, offered) == expected

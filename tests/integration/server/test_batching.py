"""Dynamic batching in a real server: concurrent requests merge, callers get their own rows,
and a full queue is refused at once (503 / RESOURCE_EXHAUSTED) while the server lives on."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from tensorflow_serving.apis import prediction_service_pb2_grpc

from tests.support.protos import predict_request
from tests.support.servers import Server

pytestmark = [pytest.mark.tensorflow]

BATCHING = ["--enable-batching", "--max-batch-size", "16", "--batch-timeout-micros", "50000"]


@pytest.fixture(scope="module")
def batching_server(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(models_dir / "tiny", tmp_path_factory.mktemp("logs") / "b.log", BATCHING)
    server.wait_available("tiny")
    yield server
    assert server.stop() == 0, server.log()


def _metric(text: str, name: str) -> float:
    match = re.search(rf'^{name}{{model="tiny"}} (\S+)$', text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def test_concurrent_requests_merge_and_each_caller_gets_its_rows(
    batching_server: Server, tiny_server: Server
) -> None:
    rng = np.random.default_rng(7)
    inputs = [rng.random((1 + i % 3, 8)).round(3).tolist() for i in range(48)]
    # The reference answers come from the unbatched server, one request each.
    expected = [
        tiny_server.client.post("/v1/models/tiny:predict", json={"instances": x}).json()
        for x in inputs
    ]

    def call(x: list[list[float]]) -> dict[str, object]:
        with httpx.Client(base_url=batching_server.base, timeout=60) as client:
            return client.post("/v1/models/tiny:predict", json={"instances": x}).json()

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(call, inputs))
    for got, want in zip(answers, expected, strict=True):
        np.testing.assert_allclose(got["predictions"], want["predictions"], rtol=1e-5)

    metrics = batching_server.client.get("/metrics").text
    batches = _metric(metrics, "sharedserve_batch_size_count")
    rows = _metric(metrics, "sharedserve_batch_size_sum")
    total_rows = sum(len(x) for x in inputs)
    assert rows >= total_rows  # warm-up aside, every row went through a batch
    assert batches < len(inputs)  # ...and fewer model calls than requests: they were merged
    limits = batching_server.client.get("/sharedserve/v1/limits").json()
    assert limits["batching"]["enabled"] is True
    assert limits["batching"]["max_batch_size"] == 16


def test_grpc_requests_are_batched_too(batching_server: Server) -> None:
    with grpc.insecure_channel(batching_server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

        def call(i: int) -> np.ndarray:
            request = predict_request("tiny", {"x": np.full((1, 8), i / 10)})
            out = stub.Predict(request, timeout=60).outputs["probabilities"]
            return np.frombuffer(out.tensor_content, np.float32)

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(call, range(16)))
    assert all(r.shape == (4,) for r in results)
    assert len({r.tobytes() for r in results}) == 16  # different inputs, different rows back


def test_oversized_request_is_400(batching_server: Server) -> None:
    body = {"instances": [[0.0] * 8] * 17}  # max_batch_size is 16
    response = batching_server.client.post("/v1/models/tiny:predict", json=body)
    assert response.status_code == 400
    ok = batching_server.client.post("/v1/models/tiny:predict", json={"instances": [[0.0] * 8]})
    assert ok.status_code == 200


def test_full_queue_is_refused_at_once(models_dir: Path, tmp_path: Path) -> None:
    args = ["--enable-batching", "--max-batch-size", "1", "--max-enqueued-batches", "1"]
    server = Server(models_dir / "edge", tmp_path / "edge.log", args)
    try:
        server.wait_available("edge")
        slow = {"signature_name": "alloc", "inputs": {"n": [150_000_000]}}  # ~0.6 GB of ones

        def call(_: int) -> int:
            with httpx.Client(base_url=server.base, timeout=120) as client:
                return client.post("/v1/models/edge:predict", json=slow).status_code

        with ThreadPoolExecutor(max_workers=8) as pool:
            codes = list(pool.map(call, range(8)))
        assert 200 in codes
        assert 503 in codes  # refused while the one allowed batch was busy
        refused = server.client.post("/v1/models/edge:predict", json=slow)
        assert refused.status_code == 200  # and served again once the queue drained
    finally:
        assert server.stop() == 0, server.log()

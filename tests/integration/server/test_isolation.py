"""Isolation between models in one process: the shared scheduler's fair turns and each model's
``max_inflight``, so that one model driven past saturation cannot starve its neighbours.

One registry serves ``aggressor`` and ``victim`` (both TensorFlow ``tiny``) over REST and gRPC
in this process, with 2 model-call threads and ``aggressor``'s ``max_inflight`` at 6.
``aggressor``'s model calls wait at a gate the test opens, so its backlog is built without any
race against time: 2 calls hold both threads, 4 more queue, a 7th request is refused at once.
A ``victim`` request is then answered while the gate is still shut: a model with no call running
takes a spare thread, and the aggressor's backlog takes none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import prediction_service_pb2_grpc

from sharedserve.server.process.model_server import ModelServer
from sharedserve.server.repository import VersionToServe
from sharedserve.server.version import ModelSettings, ModelSource, Signature, find_model
from sharedserve.server.version.backends.tensorflow import TensorFlowBackend
from tests.support import protos
from tests.support.in_process import loopback_settings, serving_in_process

pytestmark = [pytest.mark.tensorflow]

ROWS = [[0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0]]
LIMIT = 6
SLOTS = 2


class GatedPredictBackend(TensorFlowBackend):
    """The real TensorFlow backend whose predictions wait until the test opens the gate."""

    def __init__(self, path: Path, gate: threading.Event) -> None:
        super().__init__(path)
        self.gate = gate

    def predict(self, signature: Signature, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.gate.wait(120)
        return super().predict(signature, inputs)


@dataclass
class Served:
    client: httpx.Client
    grpc_target: str
    server: ModelServer
    gate: threading.Event

    def inflight(self, name: str) -> int:
        """The model's requests in flight: its versions' counts."""
        versions = self.server.registry.versions_by_number(name).values()
        return sum(version.inflight for version in versions)


def _until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def served(models_dir: Path) -> Iterator[Served]:
    gate = threading.Event()
    gate.set()  # open for the warm-up; the test closes it
    sources = [find_model(models_dir / "tiny" / "1", n) for n in ("aggressor", "victim")]
    entries = [
        VersionToServe(sources[0], ModelSettings(max_inflight=LIMIT)),
        VersionToServe(sources[1]),
    ]

    def backend(source: ModelSource) -> TensorFlowBackend:
        if source.name == "aggressor":
            return GatedPredictBackend(source.path, gate)
        return TensorFlowBackend(source.path)

    # One whole core: 2 model-call threads (model_call_slots' floor).
    settings = loopback_settings(cpu_limit_cores=1.0, max_request_elements=1 << 20)
    try:
        with (
            serving_in_process(entries, settings, backends=backend) as served,
            httpx.Client(base_url=served.base, timeout=60) as client,
        ):
            _until(lambda: client.get("/v2/health/ready").status_code == 200, "ready")
            yield Served(client, served.grpc_target, served.server, gate)
    finally:
        gate.set()


def _predict(served: Served, model: str) -> httpx.Response:
    return served.client.post(f"/v1/models/{model}:predict", json={"instances": ROWS})


def _queue_depth(served: Served, model: str) -> float:
    for family in text_string_to_metric_families(served.client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "sharedserve_queue_depth" and sample.labels["model"] == model:
                return sample.value
    raise AssertionError(f"no queue depth series for {model}")


def test_a_victim_is_served_while_an_aggressor_holds_every_slot_and_the_limit_refuses(
    served: Served,
) -> None:
    server, scheduler = served.server, served.server.path.scheduler
    assert _predict(served, "victim").status_code == 200  # warm, and not gated
    served.gate.clear()
    with ThreadPoolExecutor(LIMIT + 1) as pool:
        backlog = [pool.submit(_predict, served, "aggressor") for _ in range(LIMIT)]
        _until(
            lambda: served.inflight("aggressor") == LIMIT, f"{LIMIT} aggressor requests in flight"
        )
        _until(lambda: scheduler.running == SLOTS, "both threads held by the aggressor")
        assert _queue_depth(served, "aggressor") == LIMIT - SLOTS
        assert _queue_depth(served, "victim") == 0

        # Past its max_inflight the aggressor is refused at once on every protocol...
        refused = _predict(served, "aggressor")
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] == (
            f"model 'aggressor' has {LIMIT} requests in flight, its limit "
            f"(max_inflight {LIMIT}); retry later"
        )
        tensor = {"name": "x", "datatype": "FP32", "shape": [1, 8], "data": ROWS}
        oip = served.client.post("/v2/models/aggressor/infer", json={"inputs": [tensor]})
        assert oip.status_code == 503 and "max_inflight 6" in oip.json()["error"]
        with grpc.insecure_channel(served.grpc_target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            request = protos.predict_request("aggressor", {"x": np.asarray(ROWS, np.float32)})
            with pytest.raises(grpc.RpcError) as info:
                stub.Predict(request, timeout=30)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "model 'aggressor'" in str(info.value.details())
        assert "max_inflight 6" in str(info.value.details())

        # ...while the victim, with no call of its own running, is served now, on a spare
        # thread, though the aggressor's calls hold both slots and its backlog waits.
        mark = len(scheduler.started)
        assert _predict(served, "victim").status_code == 200
        assert list(scheduler.started)[mark:] == ["victim"]
        assert scheduler.running == SLOTS and scheduler.running_of("aggressor") == SLOTS
        assert _queue_depth(served, "aggressor") == LIMIT - SLOTS  # no spare thread for a backlog
        served.gate.set()
        assert [f.result(60).status_code for f in backlog] == [200] * LIMIT
    assert list(scheduler.started)[mark + 1 :] == ["aggressor"] * (LIMIT - SLOTS)
    assert served.inflight("aggressor") == 0
    assert _predict(served, "aggressor").status_code == 200  # room again
    aggressor_report = server.report()["models"]["aggressor"]
    assert (aggressor_report["weight"], aggressor_report["max_inflight"]) == (1.0, LIMIT)


def test_queue_wait_is_recorded_per_model(served: Served) -> None:
    assert _predict(served, "victim").status_code == 200
    counts = {
        sample.labels["model"]: sample.value
        for family in text_string_to_metric_families(served.client.get("/metrics").text)
        for sample in family.samples
        if sample.name == "sharedserve_queue_wait_seconds_count"
    }
    assert counts.keys() == {"aggressor", "victim"}
    assert counts["victim"] >= 1

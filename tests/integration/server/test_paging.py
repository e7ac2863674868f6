"""Many models in one process under a memory cap smaller than all of them: with ``--paging
lru`` the least recently used idle models move out and come back on their next request with the
same answers; a pinned model and a model with requests in flight never move; a request whose
model cannot come back in time gets 503 with Retry-After (gRPC UNAVAILABLE with the pushback
trailer). In this process, with real TorchScript and TensorFlow models over REST
and gRPC: the test holds two models busy through a gate on their backend, so "busy" is a state
the test sets, not a race it hopes to win.

No GPU here: the accounting runs against the recorded cap, as it does on a GPU; only the device
copy of a torch page-in is a no-op.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tensorflow as tf
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from sharedserve.config import CapSource, GpuCapRequest, GpuSettings
from sharedserve.enums import Paging
from sharedserve.server.memory import Memory, paging
from sharedserve.server.process.model_server import ModelServer
from sharedserve.server.repository import VersionToServe
from sharedserve.server.version import (
    MIB,
    MOVES,
    Backend,
    ModelSettings,
    ModelSource,
    ModelVersion,
    VersionState,
    collect,
    find_model,
    freeze_process,
    make_backend,
)
from sharedserve.server.version.backends.torch import TorchBackend
from tests.support.in_process import loopback_settings, serving_in_process

pytestmark = [
    pytest.mark.tensorflow,
    pytest.mark.torch,
    pytest.mark.filterwarnings("ignore:`torch.jit"),
]

ROW = [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0]
CAPACITY = 3  # MiB: the pinned model and two others, each with a budget of 1 MiB


class GatedTorch(TorchBackend):
    """The real torch backend whose predict waits while the test holds its gate shut."""

    def __init__(self, path: Path, gate: threading.Event) -> None:
        super().__init__(path)
        self.gate = gate

    def predict(self, signature, inputs):  # type: ignore[no-untyped-def]
        assert self.gate.wait(60)
        return super().predict(signature, inputs)


@dataclass
class Served:
    server: ModelServer
    client: httpx.Client
    grpc_target: str
    gate: threading.Event
    expected: dict[str, list[float]]  # framework -> the model's answer to ROW, loaded alone


def _answer(source: ModelSource) -> Any:
    backend = make_backend(source)
    backend.load()
    signature = backend.signatures()["serving_default"]
    outputs = backend.predict(signature, {next(iter(signature.inputs)): np.array([ROW], "f4")})
    return next(iter(outputs.values())).tolist()


@pytest.fixture(scope="module")
def served(models_dir: Path, torch_models_dir: Path) -> Iterator[Served]:
    torch_tiny, tf_tiny = torch_models_dir / "tiny" / "1", models_dir / "tiny" / "1"
    gate = threading.Event()
    gate.set()
    names = {"pinned": torch_tiny, "a": torch_tiny, "b": torch_tiny, "tf": tf_tiny}
    names |= {"g1": torch_tiny, "g2": torch_tiny}
    sources = [find_model(path, name) for name, path in names.items()]
    entries = [
        VersionToServe(s, ModelSettings(gpu_memory_mib=1, pinned=s.name == "pinned"))
        for s in sources
    ]

    def backend(source: ModelSource) -> Backend:
        if source.name.startswith("g"):
            return GatedTorch(source.path, gate)
        return make_backend(source)

    settings = loopback_settings(
        gpu=GpuSettings(cap=GpuCapRequest.of(CapSource.FLAG, mib=CAPACITY)),
        paging=Paging.LRU,
        page_in_timeout_s=60.0,
        max_request_elements=1 << 20,
    )
    # Each loaded, measured and counted in turn; the oldest paged out for the next.
    with (
        serving_in_process(entries, settings, backends=backend) as served,
        httpx.Client(base_url=served.base, timeout=120) as client,
    ):
        expected = {"torch": _answer(sources[0]), "tf": _answer(sources[3])}
        yield Served(served.server, client, served.grpc_target, gate, expected)
    gate.set()


def _states(server: ModelServer) -> dict[str, VersionState]:
    versions = server.registry.versions_by_number
    return {name: versions(name)[1].state for name in server.registry.served()}


def _predict(served: Served, name: str) -> httpx.Response:
    return served.client.post(f"/v1/models/{name}:predict", json={"instances": [ROW]})


Labels = tuple[tuple[str, str], ...]


def _samples(served: Served, metric: str) -> dict[Labels, float]:
    text = served.client.get("/metrics").text
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == metric
    }


def test_start_up_fills_the_cap_and_pages_out_the_oldest(served: Served) -> None:
    states = _states(served.server)
    resident = [n for n, s in states.items() if s is VersionState.AVAILABLE]
    assert len(resident) == CAPACITY and "pinned" in resident, states
    assert served.server.memory.held == CAPACITY * MIB
    limits = served.client.get("/sharedserve/v1/limits").json()
    timings = limits["memory"].pop("timings")
    assert limits["memory"] == {
        "capacity_mib": CAPACITY,
        "held_mib": CAPACITY,
        "paging": "lru",
        "page_in_timeout_s": 60,
    }
    loads = timings["load"]  # each model loaded once from disk at start, then some paged out
    assert loads["count"] == len(states) and 0 < loads["p50_s"] <= loads["p99_s"]
    version = limits["models"]["a"]["versions"]["1"]
    assert version["budget_mib"] == 1 and version["pinned"] is False
    assert version["state"] in {"resident", "paged_out"}


def test_every_model_pages_in_with_its_own_answers(served: Served) -> None:
    for _ in range(2):  # each round pages in every model the last one paged out
        for name in ("a", "tf", "b", "g1", "pinned", "g2"):
            response = _predict(served, name)
            assert response.status_code == 200, response.text
            framework = "tf" if name == "tf" else "torch"
            np.testing.assert_allclose(
                response.json()["predictions"], served.expected[framework], rtol=1e-5
            )
            assert served.server.memory.held <= CAPACITY * MIB
    page_ins = _samples(served, "sharedserve_model_page_ins_total")
    assert page_ins[(("how", "reload"), ("model", "tf"))] >= 1  # TensorFlow: from disk
    assert page_ins[(("how", "device_copy"), ("model", "a"))] >= 1  # torch: from host memory
    timings = served.client.get("/sharedserve/v1/limits").json()["memory"]["timings"]
    counted = {how: timings[how]["count"] for how in ("reload", "device_copy")}
    assert counted == {
        "reload": page_ins[(("how", "reload"), ("model", "tf"))],
        "device_copy": sum(n for key, n in page_ins.items() if ("how", "device_copy") in key),
    }
    assert timings["reload"]["p99_s"] >= timings["reload"]["p50_s"] > 0
    cold = _samples(served, "sharedserve_model_cold_starts_total")
    assert cold[(("model", "tf"),)] >= 2  # its load at start, then a reload per page-in
    assert cold[(("model", "a"),)] == 1  # a device copy is no cold start
    # The pinned model was never moved, however long it sat unused.
    outs = _samples(served, "sharedserve_model_page_outs_total")
    assert (("model", "pinned"),) not in outs and outs[(("model", "a"),)] >= 1
    assert _states(served.server)["pinned"] is VersionState.AVAILABLE


def _tf_loaded(served: Served) -> Any:
    """The loaded TensorFlow model of ``tf`` (resident): what its page-out lets go of."""
    (version,) = served.server.registry.versions_by_number("tf").values()
    return version.backend._loaded  # type: ignore[attr-defined]


def test_a_page_outs_collection_frees_the_model_and_leaves_the_frozen_framework_alone(
    served: Served,
) -> None:
    # The server froze the framework's objects before any model loaded: the collection that
    # frees a paged-out model walks the models' objects, not those (unfrozen and frozen again,
    # they would be counted anew).
    for name in ("tf", "a"):
        assert _predict(served, name).status_code == 200  # tf resident, then a used after it
    model = weakref.ref(_tf_loaded(served))
    frozen = gc.get_freeze_count()
    assert frozen > 100_000  # the framework's, and the test session's own
    assert _predict(served, "b").status_code == 200  # no room: tf, least recent, goes
    assert _states(served.server)["tf"] is VersionState.PAGED_OUT
    served.server.memory.settle()  # its collection, off the page-in's path: run by now
    assert model() is None, "tf's page-out left its model in memory"
    assert gc.get_freeze_count() == frozen


def test_a_tensorflow_model_made_before_a_freeze_is_freed_when_paged_out(served: Served) -> None:
    # Another server started in this process freezes what is there, this one's models too: a
    # TensorFlow model is objects in cycles, which a collection that skips the frozen ones
    # would leave in memory for good.
    for name in ("tf", "a"):
        assert _predict(served, name).status_code == 200  # tf resident, then a used after it
    model = weakref.ref(_tf_loaded(served))
    freeze_process()
    frozen = gc.get_freeze_count()
    assert _predict(served, "b").status_code == 200  # no room: tf, least recent, goes
    assert _states(served.server)["tf"] is VersionState.PAGED_OUT
    served.server.memory.settle()
    assert model() is None, "tf's page-out left its frozen model in memory"
    freed = frozen - gc.get_freeze_count()
    assert freed > 1000, f"only {freed} frozen objects were freed by tf's page-out"


def test_busy_models_stay_and_a_waiting_request_gets_503_with_retry_after(
    served: Served,
) -> None:
    memory = served.server.memory
    for name in ("g1", "g2"):  # resident, and about to be held busy
        assert _predict(served, name).status_code == 200
    served.gate.clear()
    memory.page_in_timeout_s = 1.0  # no room can come while the gate is shut
    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(_predict, served, name) for name in ("g1", "g2")]
        try:
            _wait_busy(memory, ("g1", "g2"))
            refused = _predict(served, "a")  # paged out: g1, g2 busy, the third place pinned
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"] == "1"
            assert "could not be paged in" in refused.json()["error"]
            with grpc.insecure_channel(served.grpc_target) as channel:
                request = predict_pb2.PredictRequest()
                request.model_spec.name = "b"
                request.inputs["x"].CopyFrom(_tensor())
                with pytest.raises(grpc.RpcError) as caught:
                    prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
                        request, timeout=30
                    )
            assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
            trailers = dict(caught.value.trailing_metadata() or ())
            assert trailers["grpc-retry-pushback-ms"] == "1000"
            assert _states(served.server)["g1"] is VersionState.AVAILABLE
        finally:
            served.gate.set()
            memory.page_in_timeout_s = 60
        assert [f.result().status_code for f in held] == [200, 200]
    assert _predict(served, "a").status_code == 200  # room again: a pages in


def _tensor() -> Any:
    return tf.make_tensor_proto(np.array([ROW], "f4"))


def _wait_busy(memory: Memory, names: tuple[str, ...]) -> None:
    deadline = time.monotonic() + 60
    while not all(memory.versions_of(n)[0].inflight for n in names):
        assert time.monotonic() < deadline, "the held requests never reached their models"
        time.sleep(0.01)


class _NoPoll:
    """The paging module's ``asyncio`` and ``time``, but for ``sleep``: a poll fails the test."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def sleep(self, *_: object) -> None:
        raise AssertionError("a poll: a blocked page-in must wake on the move that unblocks it")


def test_a_blocked_page_in_wakes_on_the_move_not_on_a_poll(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    monkeypatch.setattr(paging, "asyncio", _NoPoll(asyncio))
    monkeypatch.setattr(paging, "time", _NoPoll(time))
    memory = served.server.memory
    for name in ("g1", "g2"):  # resident, then held busy: no room for a until they end
        assert _predict(served, name).status_code == 200
    assert _states(served.server)["a"] is VersionState.PAGED_OUT
    served.gate.clear()
    with ThreadPoolExecutor(3) as pool:
        held = [pool.submit(_predict, served, name) for name in ("g1", "g2")]
        try:
            _wait_busy(memory, ("g1", "g2"))
            waiting = pool.submit(_predict, served, "a")
            _wait_until(lambda: MOVES.waiting == 1, "the page-in never blocked for room")
            assert _states(served.server)["a"] is VersionState.PAGED_OUT
        finally:
            served.gate.set()  # g1 and g2 end: the move that wakes a's page-in
        assert [f.result().status_code for f in held] == [200, 200]
        response = waiting.result()
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(response.json()["predictions"], served.expected["torch"], rtol=1e-5)


def test_a_tensorflow_page_out_leaves_its_collection_off_the_next_page_in(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, entered = threading.Event(), threading.Event()

    def held_collection(versions: list[ModelVersion]) -> None:  # tf's, held while b pages in
        entered.set()
        assert gate.wait(60)
        collect(versions)

    monkeypatch.setattr(paging, "collect", held_collection)
    for name in ("tf", "a"):  # tf resident and least recent: the next page-in evicts it
        assert _predict(served, name).status_code == 200
    assert _states(served.server)["b"] is VersionState.PAGED_OUT
    try:
        with ThreadPoolExecutor(1) as pool:
            # The page-in completes, and answers, while tf's collection is still held.
            response = pool.submit(_predict, served, "b").result(timeout=30)
            assert response.status_code == 200, response.text
            assert _states(served.server)["tf"] is VersionState.PAGED_OUT
            assert _states(served.server)["b"] is VersionState.AVAILABLE
            assert entered.wait(30), "tf's page-out owed no collection"
    finally:
        gate.set()
    served.server.memory.settle()  # the held one has run; nothing is owed any more
    assert _predict(served, "tf").status_code == 200  # and tf pages back in


def _wait_until(done: Any, why: str) -> None:
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, why
        time.sleep(0.01)

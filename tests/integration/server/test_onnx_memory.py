"""ONNX models in memory, through the real ``serve`` of a model repository: beside a SavedModel
and a TorchScript model under a cap that holds two of the three, paged out and in (a session
made again from the bytes kept in host memory) with the same answers; and a budget that
onnxruntime itself enforces, as the cap of the session's CPU memory arena: a request that needs
more gets 503 / RESOURCE_EXHAUSTED, while its neighbour's, sent with it, gets its answer.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import prediction_service_pb2_grpc

from tests.support.onnx_models import WIDE_IN, export_wide
from tests.support.protos import predict_request
from tests.support.servers import Server

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow, pytest.mark.torch, pytest.mark.onnx]

ROW = [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0]
BUDGET = "gpu_memory_mib: 1\n"


@pytest.fixture(scope="module")
def mixed(
    models_dir: Path,
    torch_models_dir: Path,
    onnx_models_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("mixed") / "models"
    for name, built in (("tf", models_dir), ("torch", torch_models_dir), ("onnx", onnx_models_dir)):
        shutil.copytree(built / "tiny", root / name)
        (root / name / "sharedserve.yaml").write_text(BUDGET)
    args = ["--model-repository", str(root), "--gpu-memory-mib", "2", "--paging", "lru"]
    server = Server(None, root.parent / "serve.log", args)
    try:
        for name in ("tf", "torch", "onnx"):
            server.wait_available(name)
        yield server
    finally:
        assert server.stop() == 0, server.log()


def _predict(server: Server, name: str) -> list[float]:
    response = server.client.post(f"/v1/models/{name}:predict", json={"instances": [ROW]})
    assert response.status_code == 200, response.text
    (row,) = response.json()["predictions"]
    return list(row)


def _page_ins(server: Server, name: str) -> dict[str, float]:
    text = server.client.get("/metrics").text
    return {
        s.labels["how"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "sharedserve_model_page_ins_total" and s.labels["model"] == name
    }


def test_three_frameworks_take_turns_under_a_cap_for_two(mixed: Server) -> None:
    first = {name: _predict(mixed, name) for name in ("tf", "torch", "onnx")}
    # The same torch module, the same seed: TorchScript and ONNX answer alike.
    np.testing.assert_allclose(first["onnx"], first["torch"], rtol=1e-5, atol=1e-6)
    for _ in range(2):  # each request pages out the least recently used of the other two
        for name in ("tf", "torch", "onnx"):
            assert _predict(mixed, name) == pytest.approx(first[name], rel=1e-6)
    states = {
        name: v["versions"]["1"]["state"]
        for name, v in mixed.client.get("/sharedserve/v1/limits").json()["models"].items()
    }
    assert sorted(states.values()) == ["paged_out", "resident", "resident"], states
    assert _page_ins(mixed, "onnx").get("reload", 0) >= 2  # a new session each time
    assert _page_ins(mixed, "torch").get("device_copy", 0) >= 2
    onnx = mixed.client.get("/sharedserve/v1/limits").json()["models"]["onnx"]["versions"]["1"]
    assert onnx["page_in_from"] == "mapped_file" and onnx["budget_mib"] == 1
    assert onnx["enforced"] is True  # its budget is its arena's cap


# The budget and two batches around it: 8 rows hold 256 KiB between the layers; 1,024 hold
# 32 MiB, past it, though their inputs and outputs (all that a footprint on a host counts per
# row) take under 300 KiB, so the budget's estimate lets the request through to the runtime.
CAPPED_MIB, FITS, PAST = 16, 8, 1024


@pytest.fixture(scope="module")
def capped(
    onnx_models_dir: Path, without_tf_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("capped") / "models"
    export_wide(root / "wide" / "1")
    (root / "wide" / "sharedserve.yaml").write_text(f"gpu_memory_mib: {CAPPED_MIB}\n")
    shutil.copytree(onnx_models_dir / "tiny", root / "neighbour")
    args = ["--model-repository", str(root), "--max-request-elements", str(1 << 20)]
    server = Server(None, root.parent / "serve.log", args, env=without_tf_env)
    try:
        server.wait_available("wide")
        server.wait_available("neighbour")
        yield server
    finally:
        assert server.stop() == 0, server.log()


def _wide(rows: int) -> dict[str, list[list[float]]]:
    return {"instances": np.full((rows, WIDE_IN), 0.5).tolist()}


def test_limits_say_the_runtime_enforces_the_budget(capped: Server) -> None:
    models = capped.client.get("/sharedserve/v1/limits").json()["models"]
    wide, neighbour = models["wide"]["versions"]["1"], models["neighbour"]["versions"]["1"]
    assert (wide["enforced"], wide["budget_mib"]) == (True, CAPPED_MIB)
    assert (neighbour["enforced"], neighbour["budget_mib"]) == (False, None)


def test_a_request_past_the_arena_cap_gets_503_and_its_neighbour_an_answer(
    capped: Server,
) -> None:
    assert capped.client.post("/v1/models/wide:predict", json=_wide(FITS)).status_code == 200

    def neighbour() -> httpx.Response:
        return capped.client.post("/v1/models/neighbour:predict", json={"instances": [ROW]})

    def past() -> httpx.Response:
        return capped.client.post("/v1/models/wide:predict", json=_wide(PAST))

    with ThreadPoolExecutor(2) as pool:
        refused, answered = pool.submit(past), pool.submit(neighbour)
        refused_response, answered_response = refused.result(), answered.result()
    assert refused_response.status_code == 503, refused_response.text
    error = refused_response.json()["error"]
    assert error.startswith("out of memory running the model (its arena is capped"), error
    assert "is smaller than requested bytes" in error
    assert answered_response.status_code == 200, answered_response.text
    # Refused, not broken: the model serves what fits in its arena after.
    assert capped.client.post("/v1/models/wide:predict", json=_wide(FITS)).status_code == 200


def test_grpc_says_resource_exhausted(capped: Server) -> None:
    request = predict_request("wide", {"x": np.full((PAST, WIDE_IN), 0.5)})
    with grpc.insecure_channel(capped.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Predict(request, timeout=30)
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "out of memory running the model" in (refused.value.details() or "")

"""A ``torch.export`` ``tiny`` (``model.pt2``) built by the CLI from the torch module, served by
the real server over every API, answering as the TorchScript ``tiny`` it came from (same seed,
same weights) to float tolerance; a malformed ``model.pt2`` beside a good model: a clear load
error, the other model serving; and a repository of all four formats (SavedModel, TorchScript,
ONNX, ``torch.export``) in one process under one cap, paging.

The export server runs with TensorFlow hidden, as the TorchScript one (``torch_server``); the
test process keeps it, to be TF Serving's own gRPC client.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.servers import Server, serving
from tests.support.tiny_apis import APIS, ROWS, TOLERANCE, assert_answers_as, rest

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow, pytest.mark.torch, pytest.mark.onnx]


@pytest.fixture(scope="module")
def export_server(
    export_models_dir: Path,
    without_tf_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("logs") / "export.log"
    args = ["--cpu-limit", "1"]
    yield from serving(export_models_dir / "tiny", log, args, env=without_tf_env)


@pytest.mark.parametrize("api", APIS, ids=lambda f: f.__name__)
def test_every_api_answers_as_the_torchscript_model_it_came_from(
    api: Callable[[Server], np.ndarray], export_server: Server, torch_server: Server
) -> None:
    assert_answers_as(api(export_server), api(torch_server))


def test_metadata_and_limits_say_what_serves_it(export_server: Server) -> None:
    metadata = export_server.client.get("/v1/models/tiny/metadata").json()
    signature = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]
    x = signature["inputs"]["x"]
    assert [d["size"] for d in x["tensor_shape"]["dim"]] == ["-1", "8"]  # exported dynamic
    assert list(signature["outputs"]) == ["probabilities"]  # signature.json's name
    model = export_server.client.get("/v2/models/tiny").json()
    assert model["platform"] == "pytorch_export"
    limits = export_server.client.get("/sharedserve/v1/limits").json()
    assert limits["intra_op_threads"] == 1
    version = limits["models"]["tiny"]["versions"]["1"]
    assert version["page_in_from"] == "host_memory"  # a device copy, as TorchScript's
    bad = export_server.client.post("/v1/models/tiny:predict", json={"instances": [[1.0, 2.0]]})
    assert bad.status_code == 400 and "expected shape [-1, 8]" in bad.json()["error"]


@pytest.fixture(scope="module")
def with_malformed(
    export_models_dir: Path,
    without_tf_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("malformed") / "models"
    shutil.copytree(export_models_dir / "tiny", root / "good")
    (root / "broken" / "1").mkdir(parents=True)
    (root / "broken" / "1" / "model.pt2").write_bytes(b"this is not a PT2 archive\n" * 4)
    server = Server(None, root.parent / "serve.log", ["--model-repository", str(root)])
    try:
        server.wait_available("good")
        yield server
    finally:
        assert server.stop() == 0, server.log()


def test_a_malformed_file_fails_to_load_with_its_reason_and_the_other_model_serves(
    with_malformed: Server, torch_server: Server
) -> None:
    np.testing.assert_allclose(rest(with_malformed, "good"), rest(torch_server), **TOLERANCE)
    (status,) = with_malformed.client.get("/v1/models/broken").json()["model_version_status"]
    message = status["status"]["error_message"]
    assert status["state"] == "END", status
    assert "broken/1/model.pt2 is not a PT2 archive" in message, message
    refused = with_malformed.client.post(
        "/v1/models/broken:predict", json={"instances": ROWS.tolist()}
    )
    assert refused.status_code == 503 and "failed to load" in refused.json()["error"]


FORMATS = ("tf", "torch", "onnx", "export")


@pytest.fixture(scope="module")
def mixed(
    models_dir: Path,
    torch_models_dir: Path,
    onnx_models_dir: Path,
    export_models_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("mixed") / "models"
    dirs = (models_dir, torch_models_dir, onnx_models_dir, export_models_dir)
    built = dict(zip(FORMATS, dirs, strict=True))
    for name in FORMATS:
        shutil.copytree(built[name] / "tiny", root / name)
        (root / name / "sharedserve.yaml").write_text("gpu_memory_mib: 1\n")
    # Room for two of the four: every request below pages one in and another out.
    args = ["--model-repository", str(root), "--gpu-memory-mib", "2", "--paging", "lru"]
    server = Server(None, root.parent / "serve.log", args)
    try:
        for name in FORMATS:
            server.wait_available(name)
        yield server
    finally:
        assert server.stop() == 0, server.log()


def _page_ins(server: Server, name: str) -> dict[str, float]:
    text = server.client.get("/metrics").text
    return {
        s.labels["how"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "sharedserve_model_page_ins_total" and s.labels["model"] == name
    }


def test_four_formats_take_turns_under_one_cap(mixed: Server) -> None:
    first = {name: rest(mixed, name) for name in FORMATS}
    for name in ("onnx", "export"):  # the same torch module, the same seed
        np.testing.assert_allclose(first[name], first["torch"], **TOLERANCE)
    for _ in range(2):
        for name in FORMATS:
            np.testing.assert_allclose(rest(mixed, name), first[name], rtol=1e-6)
    models = mixed.client.get("/sharedserve/v1/limits").json()["models"]
    states = sorted(v["versions"]["1"]["state"] for v in models.values())
    assert states == ["paged_out", "paged_out", "resident", "resident"], states
    assert _page_ins(mixed, "export").get("device_copy", 0) >= 2
    assert models["export"]["versions"]["1"]["page_in_from"] == "host_memory"

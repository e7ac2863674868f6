"""TF Serving's ways of changing the served models of `sharedserve serve --model-config-file`:
``ModelService.HandleReloadConfigRequest`` with TF Serving's own client, and
``--model-config-file-poll-wait-seconds`` re-reading the file.

One server, its config file polled every 0.2 s: a reload's config stands until the file
changes (the poll applies a changed file only).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import text_format
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
)

from tests.support.servers import Server, clean_env

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

BODY = {"instances": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]}


def _config(*models: str) -> str:
    return "model_config_list {\n" + "".join(f"  config {{ {m} }}\n" for m in models) + "}\n"


@pytest.fixture(scope="module")
def paths(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("reload")
    two = work / "two"  # tiny as versions 1 and 2
    shutil.copytree(models_dir / "tiny" / "1", two / "1")
    shutil.copytree(models_dir / "tiny" / "1", two / "2")
    return {"work": work, "tiny": models_dir / "tiny", "two": two}


@pytest.fixture(scope="module")
def server(paths: dict[str, Path]) -> Iterator[Server]:
    config = paths["work"] / "models.config"
    config.write_text(_config(f"name: 'a' base_path: '{paths['tiny']}'"))
    args = ["--model-config-file", str(config), "--model-config-file-poll-wait-seconds", "0.2"]
    # Reloads name models of the work directory besides the file's: both roots allowed.
    args += [
        "--allowed-model-roots",
        str(paths["work"]),
        "--allowed-model-roots",
        str(paths["tiny"]),
    ]
    served = Server(None, paths["work"] / "serve.log", args)
    try:
        served.wait_available("a")
        yield served
    finally:
        served.stop()


def _wait(done: Any, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"waited in vain for {what}"
        time.sleep(0.05)


def _versions(server: Server, name: str) -> dict[str, str]:
    answer = server.client.get(f"/v1/models/{name}")
    if answer.status_code == 404:
        return {}
    return {s["version"]: s["state"] for s in answer.json()["model_version_status"]}


def _reload(server: Server, text: str) -> Any:
    request = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(text, request.config)
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        return stub.HandleReloadConfigRequest(request, timeout=120)


def test_handle_reload_config_adds_removes_and_changes_models(
    server: Server, paths: dict[str, Path]
) -> None:
    tiny, two = paths["tiny"], paths["two"]
    both = _config(f"name: 'a' base_path: '{tiny}'", f"name: 'b' base_path: '{two}'")
    answer = _reload(server, both)
    assert (answer.status.error_code, answer.status.error_message) == (0, "")
    assert _versions(server, "b") == {"2": "AVAILABLE"}  # the latest, by default
    assert _versions(server, "a") == {"1": "AVAILABLE"}
    assert server.client.post("/v1/models/b:predict", json=BODY).status_code == 200

    policy = (
        f"name: 'b' base_path: '{two}' model_version_policy {{ all {{}} }} "
        "version_labels { key: 'stable' value: 1 }"
    )
    answer = _reload(server, _config(policy))  # a removed; b's versions and labels changed
    assert answer.status.error_code == 0, answer.status.error_message
    assert _versions(server, "a") == {}
    assert _versions(server, "b") == {"1": "AVAILABLE", "2": "AVAILABLE"}
    stable = server.client.post("/v1/models/b/labels/stable:predict", json=BODY)
    assert stable.status_code == 200, stable.text
    with grpc.insecure_channel(server.grpc_target) as channel:
        status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = "a"
        with pytest.raises(grpc.RpcError) as gone:
            status(request, timeout=30)
        assert gone.value.code() is grpc.StatusCode.NOT_FOUND

    broken = paths["work"] / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "1" / "saved_model.pb").write_bytes(b"not a SavedModel")
    answer = _reload(server, _config(policy, f"name: 'c' base_path: '{broken}'"))
    assert answer.status.error_code == 3  # INVALID_ARGUMENT, naming the model
    assert "'c'" in answer.status.error_message
    assert _versions(server, "b") == {"1": "AVAILABLE", "2": "AVAILABLE"}  # unharmed

    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        request = model_management_pb2.ReloadConfigRequest()
        request.config.custom_model_config.type_url = "x"
        with pytest.raises(grpc.RpcError) as refused:
            stub.HandleReloadConfigRequest(request, timeout=30)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_the_polled_config_file_is_applied_and_a_bad_one_ignored(
    server: Server, paths: dict[str, Path]
) -> None:
    config = paths["work"] / "models.config"
    tiny = paths["tiny"]
    config.write_text(_config(f"name: 'a' base_path: '{tiny}'", f"name: 'd' base_path: '{tiny}'"))
    _wait(lambda: _versions(server, "d") == {"1": "AVAILABLE"}, "d to load from the file")
    _wait(lambda: _versions(server, "a") == {"1": "AVAILABLE"}, "a to be served")
    config.write_text("model_config_list { config { name: 'a' base_pa")
    _wait(lambda: "model config file not applied" in server.log(), "the bad file to be logged")
    assert _versions(server, "d") == {"1": "AVAILABLE"}
    assert server.client.post("/v1/models/d:predict", json=BODY).status_code == 200
    config.write_text(_config(f"name: 'd' base_path: '{tiny}'"))
    _wait(lambda: _versions(server, "a") == {}, "a to be unloaded")
    assert _versions(server, "d") == {"1": "AVAILABLE"}


def _write(path: Path, text: str) -> None:
    """Whole or not at all, as an editor saves: a poll never reads half a file."""
    part = path.with_suffix(".part")
    part.write_text(text)
    part.replace(path)


def test_a_bad_polled_config_file_is_logged_once_per_change(
    paths: dict[str, Path], tmp_path: Path
) -> None:
    config = tmp_path / "models.config"
    good = _config(f"name: 'a' base_path: '{paths['tiny']}'")
    _write(config, good)
    args = ["--model-config-file", str(config), "--model-config-file-poll-wait-seconds", "0.02"]
    # At debug level each poll says so: the polls are counted, not waited for.
    server = Server(
        None, tmp_path / "serve.log", args, env=clean_env(SHAREDSERVE_LOG_LEVEL="debug")
    )

    def polls(refused: bool) -> int:
        lines = server.log().splitlines()
        mark = f"model config file {config} polled"
        return sum(line.endswith(mark) != refused and mark in line for line in lines)

    def logged() -> int:
        return server.log().count("model config file not applied")

    def after(text: str, refused: bool = True, polled: int = 10) -> None:
        before = polls(refused)
        _write(config, text)
        _wait(lambda: polls(refused) >= before + polled, f"{polled} more polls")

    try:
        server.wait_available("a")
        after("model_config_list { config { name: 'a' base_pa")
        assert logged() == 1, server.log()
        after("model_config_list { config { nmae: 'a' } }")  # another error: said again
        assert logged() == 2
        after(good, refused=False, polled=1)
        after("model_config_list { config { nmae: 'a' } }")  # broken anew: said again
        assert logged() == 3
        assert _versions(server, "a") == {"1": "AVAILABLE"}  # served as before throughout
    finally:
        assert server.stop() == 0, server.log()

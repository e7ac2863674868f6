"""Loads stay inside the directories the operator configured: a model repository's loads (the
OIP repository API) and TF Serving's HandleReloadConfigRequest (its own client) are refused,
403 / PERMISSION_DENIED, where a path or a symlink leads elsewhere; what serves stays as it
was. Table-driven: absolute paths out, ``..``, symlinks out (model, version, file) and in.

Two servers in this process, on one layout under a temporary directory:
``repo/`` (the repository: ``tiny``), ``elsewhere/`` (a ``tiny`` no client may name) and
``config/`` (a model config file's ``a``, at ``config/models/a``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf import text_format
from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc

from sharedserve.server.repository import (
    ConfigCatalog,
    RepositoryCatalog,
    read_model_config_file,
)
from tests.support.in_process import InProcess, loopback_settings, serving_in_process

pytestmark = [pytest.mark.tensorflow]

BODY = {"instances": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]}


@pytest.fixture(scope="module")
def layout(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    top = tmp_path_factory.mktemp("roots")
    tiny = models_dir / "tiny"
    shutil.copytree(tiny, top / "repo" / "tiny")
    shutil.copytree(tiny, top / "elsewhere" / "tiny")
    shutil.copytree(tiny, top / "config" / "models" / "a")
    shutil.copytree(tiny, top / "config" / "models" / "b")  # beside a: not a root by default
    (top / "config" / "models.config").write_text(
        f"model_config_list {{ config {{ name: 'a' base_path: '{top}/config/models/a' }} }}\n"
    )
    return top


@pytest.fixture(scope="module")
def repository(layout: Path) -> Iterator[InProcess]:
    root = layout / "repo"
    settings = loopback_settings(model_repository=root)
    with serving_in_process(RepositoryCatalog(root, None), settings) as served:
        yield served


@pytest.fixture(scope="module")
def configured(layout: Path) -> Iterator[InProcess]:
    config = layout / "config" / "models.config"
    entries = read_model_config_file(config)
    settings = loopback_settings(model_config_file=config)
    with serving_in_process(ConfigCatalog(entries, None), settings) as served:
        yield served


def _served(server: InProcess) -> dict[str, list[int]]:
    return server.server.registry.served()


def _symlink(link: Path, target: Path) -> None:
    if link.is_symlink():
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=target.is_dir())


def _file_symlink_out(top: Path) -> None:
    """``repo/fout``: a real model directory whose graph file is a symlink to elsewhere's."""
    shutil.copytree(top / "repo" / "tiny", top / "repo" / "fout", dirs_exist_ok=True)
    graph = top / "repo" / "fout" / "1" / "saved_model.pb"
    graph.unlink()
    _symlink(graph, top / "elsewhere" / "tiny" / "1" / "saved_model.pb")


# Each case: a model directory made in the repository, and whether loading it is refused.
REPOSITORY_CASES: dict[str, tuple[Callable[[Path], None], bool]] = {
    "symlink-out": (lambda top: _symlink(top / "repo" / "out", top / "elsewhere" / "tiny"), True),
    "version-symlink-out": (
        lambda top: _symlink(top / "repo" / "vout" / "1", top / "elsewhere" / "tiny" / "1"),
        True,
    ),
    "file-symlink-out": (_file_symlink_out, True),
    "dotdot-symlink-out": (
        lambda top: _symlink(top / "repo" / "dots", Path("..") / "elsewhere" / "tiny"),
        True,
    ),
    "symlink-in": (lambda top: _symlink(top / "repo" / "alias", top / "repo" / "tiny"), False),
}


@pytest.mark.parametrize("case", list(REPOSITORY_CASES))
def test_a_repository_load_stays_inside_the_repository(
    case: str, repository: InProcess, layout: Path
) -> None:
    make, refused = REPOSITORY_CASES[case]
    make(layout)
    name = {
        "symlink-out": "out",
        "version-symlink-out": "vout",
        "file-symlink-out": "fout",
        "dotdot-symlink-out": "dots",
        "symlink-in": "alias",
    }[case]
    before = _served(repository)
    with httpx.Client(base_url=repository.base, timeout=120) as client:
        answer = client.post(f"/v2/repository/models/{name}/load")
        if refused:
            assert answer.status_code == 403, answer.text
            message = answer.json()["error"]
            assert "outside the directories this server loads models from" in message
            assert str(layout / "elsewhere") not in message  # where it leads is not told
            assert _served(repository) == before
            assert client.post(f"/v1/models/{name}:predict", json=BODY).status_code == 404
        else:
            assert answer.status_code == 200, answer.text
            assert client.post(f"/v1/models/{name}:predict", json=BODY).status_code == 200
        # What served before serves still.
        assert client.post("/v1/models/tiny:predict", json=BODY).status_code == 200


def _reload(server: InProcess, config: str) -> tuple[grpc.StatusCode, str]:
    request = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(config, request.config)
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        try:
            response = stub.HandleReloadConfigRequest(request, timeout=120)
        except grpc.RpcError as e:
            return e.code(), e.details() or ""
    return grpc.StatusCode.OK, response.status.error_message


def _config(**models: Path | str) -> str:
    return (
        "model_config_list { "
        + " ".join(f"config {{ name: '{n}' base_path: '{p}' }}" for n, p in models.items())
        + " }"
    )


# Each case: the reload's base path for a new model 'x' (beside the served 'tiny'), refused?
RELOAD_CASES: dict[str, tuple[Callable[[Path], Path | str], bool]] = {
    "absolute-out": (lambda top: top / "elsewhere" / "tiny", True),
    "dotdot-out": (lambda top: f"{top}/repo/../elsewhere/tiny", True),
    "symlink-out": (lambda top: top / "repo" / "out", True),
    "root-itself-parent": (lambda top: top / "repo" / "..", True),
    "inside": (lambda top: top / "repo" / "tiny", False),
    "symlink-in": (lambda top: top / "repo" / "alias", False),
}


@pytest.mark.parametrize("case", list(RELOAD_CASES))
def test_a_reloaded_config_stays_inside_the_repository(
    case: str, repository: InProcess, layout: Path
) -> None:
    _symlink(layout / "repo" / "out", layout / "elsewhere" / "tiny")
    _symlink(layout / "repo" / "alias", layout / "repo" / "tiny")
    where, refused = RELOAD_CASES[case]
    served = set(_served(repository))
    code, message = _reload(repository, _config(tiny=layout / "repo" / "tiny", x=where(layout)))
    if refused:
        assert code is grpc.StatusCode.PERMISSION_DENIED, (code, message)
        assert "outside the directories this server loads models from" in message
        assert set(_served(repository)) == served  # nothing unloaded, nothing added
    else:
        assert (code, message) == (grpc.StatusCode.OK, "")
        assert "x" in _served(repository)


def test_a_config_file_server_allows_its_models_directories_only(
    configured: InProcess, layout: Path
) -> None:
    models = layout / "config" / "models"
    code, message = _reload(configured, _config(a=models / "a", b=models / "b"))
    assert code is grpc.StatusCode.PERMISSION_DENIED, message
    assert "'b'" in message and "--allowed-model-roots" in message
    assert set(_served(configured)) == {"a"}
    # A new version under a's own base path is inside: a version directory is a model's.
    code, message = _reload(configured, _config(a=models / "a"))
    assert (code, message) == (grpc.StatusCode.OK, "")


def test_allowed_model_roots_widen_what_a_reload_may_name(layout: Path) -> None:
    config = layout / "config" / "models.config"
    settings = loopback_settings(
        model_config_file=config, allowed_model_roots=(layout / "config" / "models",)
    )
    catalog = ConfigCatalog(read_model_config_file(config), None)
    with serving_in_process(catalog, settings) as served:
        models = layout / "config" / "models"
        code, message = _reload(served, _config(a=models / "a", b=models / "b"))
        assert (code, message) == (grpc.StatusCode.OK, "")
        assert set(_served(served)) == {"a", "b"}
        code, _ = _reload(served, _config(a=models / "a", c=layout / "elsewhere" / "tiny"))
        assert code is grpc.StatusCode.PERMISSION_DENIED
        assert set(_served(served)) == {"a", "b"}  # refused whole: b was not unloaded


def test_a_symlink_out_in_the_repository_at_start_is_refused_and_the_rest_serve(
    models_dir: Path, tmp_path: Path
) -> None:
    root = tmp_path / "repo"
    shutil.copytree(models_dir / "tiny", root / "tiny")
    shutil.copytree(models_dir / "tiny", tmp_path / "elsewhere" / "tiny")
    os.symlink(tmp_path / "elsewhere" / "tiny", root / "out")
    settings = loopback_settings(model_repository=root)
    with serving_in_process(RepositoryCatalog(root, None), settings) as served:
        with httpx.Client(base_url=served.base, timeout=60) as client:
            assert client.post("/v1/models/tiny:predict", json=BODY).status_code == 200
            rows = {r["name"]: r for r in client.post("/v2/repository/index").json()}
            assert rows["out"]["state"] == "UNAVAILABLE"
            assert "outside the directories" in rows["out"]["reason"]
        assert "out" not in _served(served) or not any(
            v.serving for v in served.server.registry.versions_by_number("out").values()
        )

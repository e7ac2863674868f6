"""``models convert`` through the real CLI: the TorchScript ``tiny`` and the SavedModel ``tiny``
written again as ONNX, served by the real server in one process, each answering as the model it
came from to float tolerance; and the converters that do not exist (a ``torch.export`` program's,
a SavedModel's without tf2onnx) refused in one line that says what would be needed."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.servers import Server, run_cli, without_tf2onnx
from tests.support.tiny_apis import APIS, TOLERANCE

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow, pytest.mark.torch, pytest.mark.onnx]


@pytest.fixture(scope="module")
def converted(
    models_dir: Path, torch_models_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    out = tmp_path_factory.mktemp("converted")
    for built, name in ((torch_models_dir, "from_torch"), (models_dir, "from_tf")):
        result = run_cli("models", "convert", str(built / "tiny"), "--out", str(out / name))
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(out / name / "tiny" / "1")
    root = out / "repository"
    root.mkdir()
    for name in ("from_torch", "from_tf"):
        shutil.copytree(out / name / "tiny", root / name)
        assert (root / name / "1" / "model.onnx").is_file()
    server = Server(None, out / "serve.log", ["--model-repository", str(root)])
    try:
        server.wait_available("from_torch")
        server.wait_available("from_tf")
        yield server
    finally:
        assert server.stop() == 0, server.log()


@pytest.mark.parametrize("api", APIS, ids=lambda f: f.__name__)
def test_each_converted_model_answers_as_the_model_it_came_from(
    api: Callable[..., np.ndarray], converted: Server, torch_server: Server, tiny_server: Server
) -> None:
    for name, original in (("from_torch", torch_server), ("from_tf", tiny_server)):
        np.testing.assert_allclose(api(converted, name), api(original), **TOLERANCE)
    assert converted.client.get("/v2/models/from_tf").json()["platform"] == "onnxruntime_onnx"


def test_what_has_no_converter_is_refused_in_one_line(
    models_dir: Path, export_models_dir: Path, tmp_path: Path
) -> None:
    program = run_cli("models", "convert", str(export_models_dir / "tiny"), "--out", str(tmp_path))
    assert program.returncode == 2
    (line,) = program.stderr.strip().splitlines()
    assert line.startswith("error: cannot convert ") and "needs onnxscript" in line, line
    env = without_tf2onnx(tmp_path / "hide")
    saved = run_cli("models", "convert", str(models_dir / "tiny"), "--out", str(tmp_path), env=env)
    assert saved.returncode == 2
    assert saved.stderr.strip().splitlines() == [
        "error: converting a SavedModel to ONNX needs tf2onnx, which is not installed: "
        "pip install 'sharedserve[convert]'"
    ]
    assert list(tmp_path.iterdir()) == [tmp_path / "hide"]  # nothing half-written

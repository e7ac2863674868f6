"""Session fixtures: real example models built once, real servers shared by many tests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import gpus
from tests.support.servers import (
    Server,
    first_run_env,
    free_port,
    run_cli,
    serving,
    without_tensorflow,
)
from tests.support.stub_server import StubServer, two_level_law

SUPPORT = Path(__file__).parent / "support"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each API operation's schemathesis test gets a node id of its own, from its label.

    schemathesis (4.32, on pytest 9) names each operation's test ``test_x[GET /path]`` but
    leaves them all one node id, ``test_x``; pytest-xdist, which ``make test`` runs under,
    schedules by node id and so ran one operation of thirty, silently. Two items with one id
    are refused outright."""
    for item in items:
        label = getattr(item, "operation_label", None)
        if label and not item.nodeid.endswith("]"):
            # pytest 9 keeps the id as a NodeId (private ``_id``) built from ``originalname``,
            # which schemathesis sets to the bare function name; its params are the label.
            item._id = item._id.with_params(label)  # type: ignore[attr-defined]
    ids = [item.nodeid for item in items]
    if len(set(ids)) != len(ids):  # never again one test standing for thirty
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise pytest.UsageError(f"tests share a node id, so xdist would run one of each: {twice}")


@pytest.fixture(scope="session")
def tiny_build(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """The real ``sharedserve models build tiny`` as a user's first run makes it (a shell without
    the frameworks' log switches), once: every test reads the model, and test_first_run.py reads
    what the build printed."""
    out = tmp_path_factory.mktemp("models")
    result = run_cli("models", "build", "tiny", "--out", str(out), env=first_run_env())
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="session")
def models_dir(tiny_build: subprocess.CompletedProcess[str]) -> Path:
    """``tiny`` built by the real ``sharedserve models build``, and the test-only edge model."""
    out = Path(tiny_build.args[tiny_build.args.index("--out") + 1])
    subprocess.run(
        [sys.executable, str(SUPPORT / "edge_model.py"), str(out / "edge" / "1")],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def without_tf_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A child's environment in which TensorFlow is missing, as in a ``[torch]``-only install."""
    return without_tensorflow(tmp_path_factory.mktemp("no-tensorflow"))


@pytest.fixture(scope="session")
def torch_models_dir(
    tmp_path_factory: pytest.TempPathFactory, without_tf_env: dict[str, str]
) -> Path:
    """``tiny`` built as TorchScript by the real ``models build``, with TensorFlow hidden: the
    build a ``[torch]``-only install makes, and a third framework for mixes."""
    out = tmp_path_factory.mktemp("torch-models")
    build = ("models", "build", "tiny", "--framework", "torch", "--out", str(out))
    result = run_cli(*build, env=without_tf_env)
    assert result.returncode == 0, result.stderr
    assert (out / "tiny" / "1" / "model.pt").is_file()
    return out


@pytest.fixture(scope="session")
def onnx_models_dir(
    tmp_path_factory: pytest.TempPathFactory, without_tf_env: dict[str, str]
) -> Path:
    """``tiny`` exported to ONNX by the real ``models build`` from the torch module, with the
    same seed as ``torch_models_dir``'s, so the same weights; TensorFlow hidden, as there."""
    out = tmp_path_factory.mktemp("onnx-models")
    build = ("models", "build", "tiny", "--framework", "onnx", "--out", str(out))
    result = run_cli(*build, env=without_tf_env)
    assert result.returncode == 0, result.stderr
    assert (out / "tiny" / "1" / "model.onnx").is_file()
    return out


@pytest.fixture(scope="session")
def export_models_dir(
    tmp_path_factory: pytest.TempPathFactory, without_tf_env: dict[str, str]
) -> Path:
    """``tiny`` as a ``torch.export`` program by the real ``models build`` from the torch module,
    with the same seed as ``torch_models_dir``'s, so the same weights; TensorFlow hidden."""
    out = tmp_path_factory.mktemp("export-models")
    build = ("models", "build", "tiny", "--framework", "export", "--out", str(out))
    result = run_cli(*build, env=without_tf_env)
    assert result.returncode == 0, result.stderr
    assert (out / "tiny" / "1" / "model.pt2").is_file()
    return out


@pytest.fixture(scope="session")
def tiny_server(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One ``tiny`` server for the whole session, with a small body limit to test 413."""
    log = tmp_path_factory.mktemp("logs") / "tiny.log"
    yield from serving(models_dir / "tiny", log, ["--max-body-bytes", "65536"])


@pytest.fixture(scope="session")
def torch_server(
    torch_models_dir: Path, without_tf_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The TorchScript ``tiny`` served with TensorFlow hidden and a 1-core CPU limit, for every
    test that only talks to it (TF Serving's and the Open Inference Protocol's clients)."""
    log = tmp_path_factory.mktemp("logs") / "torch.log"
    yield from serving(torch_models_dir / "tiny", log, ["--cpu-limit", "1"], env=without_tf_env)


@pytest.fixture(scope="session")
def edge_server(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(models_dir / "edge", tmp_path_factory.mktemp("logs") / "edge.log")


@pytest.fixture
def fake_gpus(tmp_path: Path) -> Path:
    """One simulated healthy 16 GiB GPU, for ``--fake-gpus``."""
    return gpus.fake_gpu_file(tmp_path, [16384])


@pytest.fixture
def stub_targets(tmp_path: Path) -> Iterator[Path]:
    """A targets file naming one fast stub server (no model to load: quick runs)."""
    port = free_port()
    server = StubServer(port, two_level_law(base_ms=1.0, slow_ms=3.0, slow_every=50))
    server.start()
    targets = tmp_path / "targets.json"
    body = {"targets": [{"name": "stub-0", "model": "stub", "rest": f"http://127.0.0.1:{port}"}]}
    targets.write_text(json.dumps(body))
    yield targets
    server.stop()

"""Session fixtures: real example models built once, real servers shared by many tests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import Server, run_cli, serving

SUPPORT = Path(__file__).parent / "support"


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny`` built by the real ``sharedserve models build``, and the test-only edge model."""
    out = tmp_path_factory.mktemp("models")
    result = run_cli("models", "build", "tiny", "--out", str(out))
    assert result.returncode == 0, result.stderr
    subprocess.run(
        [sys.executable, str(SUPPORT / "edge_model.py"), str(out / "edge" / "1")],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def torch_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny`` built as TorchScript by the real ``models build``: a third framework for mixes."""
    out = tmp_path_factory.mktemp("torch-models")
    result = run_cli("models", "build", "tiny", "--framework", "torch", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="session")
def tiny_server(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One ``tiny`` server for the whole session, with a small body limit to test 413."""
    log = tmp_path_factory.mktemp("logs") / "tiny.log"
    yield from serving(models_dir / "tiny", log, ["--max-body-bytes", "65536"])


@pytest.fixture(scope="session")
def edge_server(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(models_dir / "edge", tmp_path_factory.mktemp("logs") / "edge.log")


@pytest.fixture
def fake_gpus(tmp_path: Path) -> Path:
    path = tmp_path / "gpus.json"
    gpu = {"uuid": "GPU-0a1b2c3d-0000-0000-0000-000000000000", "index": 0}
    gpu |= {"name": "Tesla K80", "memory_mib": 16384, "numa_node": 0, "healthy": True}
    path.write_text(json.dumps({"gpus": [gpu]}))
    return path

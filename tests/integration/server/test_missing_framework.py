"""A framework that is not installed is one line saying what to install, never a traceback.

After ``make demo`` (TensorFlow only) a reader's first torch block is ``models build
--framework torch``, then ``serve`` and ``pack`` on the TorchScript model; a ``[torch]``-only
install meets the same with a SavedModel. Each runs as a real child process in which the
framework cannot be imported (a package of its name first on ``PYTHONPATH`` that fails to).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.servers import (
    free_port,
    run_cli,
    without_onnx,
    without_tensorflow,
    without_torch,
)

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow, pytest.mark.torch]

TORCH_LINE = (
    "error: TorchScript models need PyTorch, which is not installed: "
    "pip install 'sharedserve[torch]'"
)
ONNX_LINE = (
    "error: ONNX models need onnxruntime, which is not installed: pip install 'sharedserve[onnx]'"
)
TF_LINE = (
    "error: SavedModels need TensorFlow, which is not installed: "
    "pip install 'sharedserve[tensorflow]'"
)


def _ports() -> list[str]:
    return ["--rest-port", str(free_port()), "--grpc-port", str(free_port())]


def assert_one_line(result_code: int, stderr: str, line: str) -> None:
    assert result_code == 2, stderr
    assert "Traceback" not in stderr, stderr
    # The line is the first thing said: no GPU lookup ("no NVIDIA GPU driver", SIMULATED)
    # before it, which would read as the cause.
    assert stderr.strip().splitlines() == [line], stderr


@pytest.mark.parametrize("command", ["build", "serve", "pack"])
def test_torch_missing_is_one_line(command: str, torch_models_dir: Path, tmp_path: Path) -> None:
    # TMPDIR: where pack would put its replicas' logs, kept out of the shared /tmp.
    env = without_torch(tmp_path / "hide", TMPDIR=str(tmp_path))
    model = str(torch_models_dir / "tiny")
    args = {
        "build": ["models", "build", "tiny", "--framework", "torch", "--out", str(tmp_path / "m")],
        "serve": ["serve", "--model", model, "--host", "127.0.0.1", *_ports()],
        "pack": ["pack", "--model", model, "--replicas", "1", "--start-timeout", "120"],
    }[command]
    result = run_cli(*args, env=env, timeout=150)
    # pack says it itself, before it looks for GPUs or starts a replica.
    assert_one_line(result.returncode, result.stderr, TORCH_LINE)
    if command == "build":
        assert not (tmp_path / "m" / "tiny").exists()


@pytest.mark.parametrize("command", ["build", "serve"])
def test_tensorflow_missing_is_one_line(command: str, models_dir: Path, tmp_path: Path) -> None:
    env = without_tensorflow(tmp_path / "hide")
    args = {
        "build": ["models", "build", "tiny", "--out", str(tmp_path / "m")],
        "serve": ["serve", "--model", str(models_dir / "tiny"), "--host", "127.0.0.1", *_ports()],
    }[command]
    result = run_cli(*args, env=env, timeout=150)
    assert_one_line(result.returncode, result.stderr, TF_LINE)
    if command == "build":
        assert not (tmp_path / "m" / "tiny").exists()  # no empty folder left behind


@pytest.mark.onnx
@pytest.mark.parametrize("command", ["build", "serve"])
def test_onnx_missing_is_one_line(command: str, onnx_models_dir: Path, tmp_path: Path) -> None:
    env = without_onnx(tmp_path / "hide")
    model = str(onnx_models_dir / "tiny")
    args = {
        "build": ["models", "build", "tiny", "--framework", "onnx", "--out", str(tmp_path / "m")],
        "serve": ["serve", "--model", model, "--host", "127.0.0.1", *_ports()],
    }[command]
    result = run_cli(*args, env=env, timeout=150)
    assert_one_line(result.returncode, result.stderr, ONNX_LINE)
    if command == "build":
        assert not (tmp_path / "m" / "tiny").exists()


@pytest.mark.parametrize("command", ["build", "serve"])
def test_torch_missing_for_torch_export_is_one_line(
    command: str, export_models_dir: Path, tmp_path: Path
) -> None:
    env = without_torch(tmp_path / "hide")
    model = str(export_models_dir / "tiny")
    args = {
        "build": ["models", "build", "tiny", "--framework", "export", "--out", str(tmp_path / "m")],
        "serve": ["serve", "--model", model, "--host", "127.0.0.1", *_ports()],
    }[command]
    result = run_cli(*args, env=env, timeout=150)
    line = "error: torch.export models need PyTorch, which is not installed: "
    assert_one_line(result.returncode, result.stderr, line + "pip install 'sharedserve[torch]'")
    if command == "build":
        assert not (tmp_path / "m" / "tiny").exists()

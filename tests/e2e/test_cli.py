"""The ``sharedserve`` command line end to end: help, usage errors, model building, the demo."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.servers import run_cli


def test_help_lists_commands() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("serve", "models", "demo", "pack"):
        assert command in result.stdout


def test_models_build_help_says_weights_are_random() -> None:
    result = run_cli("models", "build", "--help")
    assert result.returncode == 0
    assert "RANDOM" in result.stdout
    assert "mobilenet_v2" in result.stdout


def test_pack_help_explains_the_split_and_cleanup() -> None:
    result = run_cli("pack", "--help")
    assert result.returncode == 0
    for fragment in ("--context-reserve-mib", "even split", "targets file", "SIGTERM"):
        assert fragment in result.stdout


def test_serve_help_explains_the_cap() -> None:
    result = run_cli("serve", "--help")
    assert result.returncode == 0
    assert "SHAREDSERVE_GPU_MEMORY_FRACTION" in result.stdout
    assert "--max-body-bytes" in result.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["models", "build", "resnet9000", "--out", "{tmp}"], "is not one of"),
        (["models", "build", "tiny", "--out", "{tmp}", "--framework", "onnx"], "unknown framework"),
        (["serve", "--model", "{tmp}/missing"], "does not exist"),
        (["serve", "--model", "{tmp}", "--gpu-memory-fraction", "1.5"], "(0, 1]"),
        (
            ["serve", "--model", "{tmp}", "--gpu-memory-fraction", "0.5", "--gpu-memory-mib", "9"],
            "not both",
        ),
        (["serve", "--model", "{tmp}", "--rest-port", "70000"], "--rest-port"),
        (["serve", "--model", "{tmp}", "--cpu-limit", "0"], "CPU limit"),
        (["serve", "--model", "{tmp}"], "neither a SavedModel"),
        (["pack", "--model", "{tmp}", "--replicas", "0"], "--replicas must be at least 1"),
        (["pack", "--model", "{tmp}", "--replicas", "2", "--cpu-limit", "-1"], "--cpu-limit"),
        (["pack", "--model", "{tmp}", "--replicas", "2", "--rest-port", "1"], "pack sets"),
        (["pack", "--model", "{tmp}", "--replicas", "2"], "neither a SavedModel"),
    ],
    ids=[
        "unknown-model",
        "framework",
        "missing-dir",
        "fraction",
        "both-caps",
        "port",
        "cpu",
        "empty",
        "pack-replicas",
        "pack-cpu",
        "pack-owned-option",
        "pack-empty",
    ],
)
def test_usage_errors_exit_2_with_a_clear_message(
    tmp_path: Path, args: list[str], fragment: str
) -> None:
    result = run_cli(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_env_contract_value_is_a_usage_error(tmp_path: Path) -> None:
    from tests.support.servers import clean_env

    env = clean_env(SHAREDSERVE_GPU_MEMORY_MIB="lots")
    result = run_cli("serve", "--model", str(tmp_path), env=env)
    assert result.returncode == 2
    assert "SHAREDSERVE_GPU_MEMORY_MIB" in result.stderr


def test_models_build_refuses_to_overwrite(models_dir: Path) -> None:
    result = run_cli("models", "build", "tiny", "--out", str(models_dir))
    assert result.returncode == 2
    assert "--overwrite" in result.stderr


def test_demo_serves_and_prints_predictions(tmp_path: Path) -> None:
    result = run_cli("demo", "--model", "tiny", "--workdir", str(tmp_path), "--requests", "3")
    assert result.returncode == 0, result.stderr
    assert "tiny AVAILABLE" in result.stdout
    assert "[1, 4]" in result.stdout  # output shape column of the predictions table
    assert '"intra_op_threads"' in result.stdout
    assert (tmp_path / "tiny" / "1" / "saved_model.pb").is_file()

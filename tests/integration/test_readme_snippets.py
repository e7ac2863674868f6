"""The README's Python client snippets ask for the model its serving block started.

The gRPC snippet once asked for ``mobilenet_v2`` right after the serving block started ``tiny``:
a reader following the README got NOT_FOUND. TF Serving's client snippet is run as written
against the session's ``tiny`` server (only its address changed); the Triton one, whose client
needs an environment of its own (tests/integration/server/test_oip_tritonclient.py drives
it), is held to the same model and port.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.servers import Server, clean_env

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
PYTHON = re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)
SERVE = re.search(r"^sharedserve serve --model models/(\w+) --rest-port (\d+)", README, re.M)


def snippet(containing: str) -> str:
    (found,) = [b for b in PYTHON if containing in b]
    return found


@pytest.mark.slow
@pytest.mark.tensorflow
def test_the_grpc_snippet_runs_against_the_served_model(tiny_server: Server) -> None:
    assert SERVE is not None
    code = snippet("PredictionServiceStub")
    # Served with the default gRPC port (8500): here, the session server's.
    assert "--grpc-port" not in SERVE.group(0) and '"localhost:8500"' in code
    code = code.replace('"localhost:8500"', repr(tiny_server.grpc_target))
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=clean_env(TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=150,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert SERVE.group(1) == "tiny"  # the session server's model
    # The output's shape: a batch of 1, tiny's 4 probabilities.
    assert [int(n) for n in re.findall(r"size: (\d+)", result.stdout)] == [1, 4], result.stdout


def test_the_triton_snippet_asks_the_served_model_on_its_port() -> None:
    assert SERVE is not None
    code = snippet("tritonclient")
    assert f'InferenceServerClient("localhost:{SERVE.group(2)}")' in code
    assert re.findall(r'client\.infer\("(\w+)"', code) == [SERVE.group(1)]

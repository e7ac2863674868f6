"""The README's TorchScript paths print no framework warning: PyTorch deprecates TorchScript
(``torch.jit.script``, ``save`` and ``load`` warn, a FutureWarning from 2.14 on), and the log says
so once, with where to read more, instead of a warning at every build and load.

Real processes: ``models build --framework torch``, then ``serve`` of what it built, answering a
prediction. Whatever torch is installed, the log says it once: before 2.14 the same warning is
a DeprecationWarning, which Python hides but sharedserve routes all the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedserve.framework_output import TORCHSCRIPT_DOCS
from tests.support.servers import Server, first_run_env, run_cli

pytestmark = [pytest.mark.torch]

NOTE = "TorchScript is deprecated upstream"


def assert_quiet(output: str) -> None:
    assert "Warning:" not in output, output  # FutureWarning, DeprecationWarning, UserWarning
    notes = [line for line in output.splitlines() if NOTE in line]
    assert len(notes) == 1, output
    assert TORCHSCRIPT_DOCS in notes[0]
    assert " INFO sharedserve.framework_output: " in notes[0]


def test_build_and_serve_say_once_that_torchscript_is_deprecated(tmp_path: Path) -> None:
    out = tmp_path / "torch-models"
    build = ("models", "build", "tiny", "--framework", "torch", "--out", str(out))
    built = run_cli(*build, env=first_run_env())
    assert built.returncode == 0, built.stderr
    assert_quiet(built.stderr)

    server = Server(out / "tiny", tmp_path / "serve.log", env=first_run_env())
    try:
        server.wait_available("tiny")
        answer = server.client.post("/v1/models/tiny:predict", json={"instances": [[1.0] * 8]})
        assert answer.status_code == 200, answer.text
    finally:
        code = server.stop()
    assert code == 0, server.log()
    assert_quiet(server.log())


def test_debug_shows_torch_s_own_warning_beside_the_note(tmp_path: Path) -> None:
    out = tmp_path / "torch-models"
    build = ("models", "build", "tiny", "--framework", "torch", "--out", str(out))
    built = run_cli(*build, env=first_run_env(SHAREDSERVE_LOG_LEVEL="debug"))
    assert built.returncode == 0, built.stderr
    assert sum(NOTE in line for line in built.stderr.splitlines()) == 1, built.stderr
    assert "`torch.jit.script` is deprecated" in built.stderr

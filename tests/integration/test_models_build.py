"""``sharedserve models build`` run twice, as a reader copying the README's blocks in order does.

A model already built with the same model, framework and seed is kept and the command succeeds
saying so; one built otherwise (another seed or framework, or by hand) is refused with the
``--overwrite`` advice. In process (``invoke``) and TorchScript ``tiny``: the cheapest real build.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import invoke

# torch deprecates TorchScript in favour of torch.export and warns on script and save;
# sharedserve writes it knowingly.
pytestmark = [
    pytest.mark.torch,
    pytest.mark.filterwarnings(r"ignore:`torch\.jit\.(script|save|load)` is deprecated"),
]


def build(out: Path, *flags: str) -> tuple[int, str, str]:
    result = invoke("models", "build", "tiny", "--framework", "torch", "--out", str(out), *flags)
    return result.exit_code, result.stdout, result.stderr


def test_identical_build_is_kept_and_others_are_refused(tmp_path: Path) -> None:
    version = tmp_path / "tiny" / "1"
    code, stdout, stderr = build(tmp_path)
    assert code == 0, stderr
    assert stdout.strip() == str(version)
    first = (version / "model.pt").stat()

    code, stdout, stderr = build(tmp_path)
    assert code == 0, stderr
    assert stdout.strip() == f"already built (identical): {version}"
    again = (version / "model.pt").stat()
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)

    for other in (["--seed", "1"], ["--framework", "tf"]):
        code, stdout, stderr = build(tmp_path, *other)
        assert code == 2, stdout
        assert "already exist" in stderr and "--overwrite" in stderr
    assert (version / "model.pt").stat().st_ino == first.st_ino

    # Replaced with --overwrite, the new parameters are what a later build compares with.
    code, _, stderr = build(tmp_path, "--seed", "1", "--overwrite")
    assert code == 0, stderr
    code, stdout, stderr = build(tmp_path, "--seed", "1")
    assert code == 0, stderr
    assert stdout.strip() == f"already built (identical): {version}"
    assert build(tmp_path)[0] == 2


def test_a_model_not_built_by_this_command_is_refused(tmp_path: Path) -> None:
    version = tmp_path / "tiny" / "1"
    version.mkdir(parents=True)
    (version / "model.pt").write_bytes(b"someone else's")
    code, stdout, stderr = build(tmp_path)
    assert code == 2, stdout
    assert "--overwrite" in stderr
    assert (version / "model.pt").read_bytes() == b"someone else's"

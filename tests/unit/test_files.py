"""Atomic writes give files the mode a new file gets under the umask."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sharedserve.files import write_atomic

# A fresh interpreter per umask: the umask is per process, and setting it here would race with
# anything else this test process runs.
_WRITE = """
import os, sys
from pathlib import Path
from sharedserve.files import write_atomic
os.umask(int(sys.argv[1], 8))
for name in sys.argv[2:]:
    write_atomic(Path(name), b"new")
"""


def write_under_umask(umask: int, *paths: Path) -> None:
    subprocess.run([sys.executable, "-c", _WRITE, f"{umask:o}", *map(str, paths)], check=True)


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_new_and_replaced_files_get_the_umask_mode(tmp_path: Path, umask: int, mode: int) -> None:
    old = tmp_path / "report.json"
    old.write_bytes(b"old")
    old.chmod(0o600)  # as the earlier versions wrote reports; replacing it must not keep that
    new = tmp_path / "report.md"
    write_under_umask(umask, old, new)
    for path in (old, new):
        assert path.read_bytes() == b"new"
        assert stat.S_IMODE(path.stat().st_mode) == mode, (path, oct(path.stat().st_mode))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.md"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_atomic(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["report.json"]

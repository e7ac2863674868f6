"""An AOTInductor package compiled from a ``torch.export`` program, where a C++ compiler is found.

The compile runs in a child process without TensorFlow: the test process has TensorFlow loaded,
and inductor's compiler stack imports triton, which crashes beside it
(``framework_output.keep_triton_out``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

COMPILER = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("clang++")
"""The C++ compiler inductor would call (``$CXX``, else g++; clang++ tried too), or None."""

_COMPILE = """
import shutil, sys, torch
source, target = sys.argv[1], sys.argv[2]
program = torch.export.load(source + "/model.pt2")
torch._inductor.aoti_compile_and_package(program, package_path=target + "/model.pt2")
shutil.copy(source + "/signature.json", target)
"""


def compile_package(program_dir: Path, version_dir: Path, env: dict[str, str]) -> None:
    """``version_dir/model.pt2``: the package of ``program_dir``'s program, with its
    ``signature.json`` (a package names nothing itself)."""
    version_dir.mkdir(parents=True)
    command = [sys.executable, "-c", _COMPILE, str(program_dir), str(version_dir)]
    result = subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]

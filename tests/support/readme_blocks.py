"""README.md's ``sh`` blocks as a reader copies them, and the shell they run in: the checkout's
environment active (``sharedserve`` on the PATH), nothing else of the test's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.servers import clean_env

__all__ = ["BLOCKS", "README", "ROOT", "block", "run_block", "user_env"]

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```sh\n(.*?)^```", README, flags=re.S | re.M)


def block(containing: str) -> str:
    """The one block that contains ``containing``."""
    (found,) = [b for b in BLOCKS if containing in b]
    return found


def user_env() -> dict[str, str]:
    """A shell with the checkout's environment active: its bin directory first on the PATH."""
    env = clean_env()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_block(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``script`` run by bash in ``cwd`` as a reader would, failing on its first failing line;
    the trap is the test's own: a failing line must not leave a server running."""
    trap = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
    result = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", trap + script],
        cwd=cwd,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result

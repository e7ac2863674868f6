"""NVIDIA's Triton client (``tritonclient``) in a virtual environment of its own.

``tritonclient[http,grpc]`` pins protobuf < 7 and sharedserve's generated modules need a newer
one, so the two cannot share a process: the client runs as a child process of a venv kept in
pytest's cache and rebuilt only when its stamp (the requirement and the Python that built it)
no longer matches, so only the first run pays (~15 s, mostly hidden behind the servers' start).
A client script gets its arguments as JSON on stdin and prints one JSON document on stdout.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

__all__ = ["REQUIREMENT", "TritonClient"]

#: Pinned: a new client release must not change what the tests prove without a review.
REQUIREMENT = "tritonclient[http,grpc]==2.73.0"
# A fresh venv, pip and a dozen wheels from the configured index take ~15 s; each step is cut
# off well inside pytest-timeout's 180 s so that pip's own output, not a stack dump, is the failure.
_BUILD_TIMEOUT_S = 120


class TritonClient:
    """The client's venv under ``root`` (a pytest cache dir), built in the background while the
    servers start, if its stamp does not match; ``run`` waits for it.

    A failed build fails every test that runs a script, with pip's output: a skipped test would
    prove nothing.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = root / "venv" / "bin" / "python"
        self._failure: str | None = None
        self._build = threading.Thread(target=self._build_quietly, name="tritonclient-env")
        self._build.daemon = True  # an interrupted session must not wait for pip
        self._build.start()

    def run(self, script: Path, arguments: Any, timeout: float = 60) -> Any:
        """``script``'s stdout as JSON, given ``arguments`` as JSON on stdin; a script that fails
        or prints no JSON fails the test with what it wrote."""
        self._build.join()
        if self._failure is not None:
            pytest.fail(self._failure, pytrace=False)
        try:
            done = subprocess.run(
                [str(self.python), str(script)],
                input=json.dumps(arguments),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"{script.name} ran past {timeout} s:\n{e.stdout!r}\n{e.stderr!r}")
        if done.returncode != 0:
            pytest.fail(f"{script.name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        try:
            return json.loads(done.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"{script.name} printed no JSON:\n{done.stdout}\n{done.stderr}")

    def _build_quietly(self) -> None:
        try:
            self._failure = _build(self.root, self.python)
        except Exception as e:  # reported by run(), in the test, not lost in a thread
            self._failure = f"building the Triton client's venv failed: {e!r}"


def _build(root: Path, python: Path) -> str | None:
    """None once ``root/venv`` holds the client; else why not (pip's own words)."""
    stamp, env = root / "stamp.json", python.parents[1]
    wanted = json.dumps({"requirement": REQUIREMENT, "python": sys.version})
    # Two pytest processes sharing a checkout must not build into one directory at once.
    with (root / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == wanted and python.is_file():
            return None
        stamp.unlink(missing_ok=True)  # written last: a half-built venv never matches
        shutil.rmtree(env, ignore_errors=True)
        steps = [
            ("python -m venv", [sys.executable, "-m", "venv", str(env)]),
            ("pip install", [str(python), "-m", "pip", "install", "--quiet", REQUIREMENT]),
        ]
        for what, command in steps:
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S, check=False
                )
            except subprocess.TimeoutExpired as e:
                return f"{what} for {REQUIREMENT} ran past {_BUILD_TIMEOUT_S} s:\n{e.stderr!r}"
            if done.returncode != 0:
                return (
                    f"{what} for {REQUIREMENT} failed (exit {done.returncode}):\n"
                    f"{done.stdout}\n{done.stderr}"
                )
        stamp.write_text(wanted)
    return None

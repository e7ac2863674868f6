"""The head of every committed benchmark result (command, machine, versions), and its output."""

from __future__ import annotations

import os
import platform
import shlex
import sys
from collections.abc import Iterable
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path


def _first(path: str, prefix: str) -> str:
    lines = Path(path).read_text().splitlines() if Path(path).is_file() else []
    return next((ln.split(prefix, 1)[1] for ln in lines if ln.startswith(prefix)), "?")


def _version(package: str) -> str:
    try:
        return f"{package} {metadata.version(package)}"
    except metadata.PackageNotFoundError:
        return f"{package} (not installed)"


def machine_lines(packages: Iterable[str], gpu: str = "no GPU") -> list[str]:
    cpu = _first("/proc/cpuinfo", "model name").strip(" \t:")
    mem = _first("/proc/meminfo", "MemTotal:")
    return [
        f"- CPU: {cpu}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), "
        f"{int(mem.split()[0]) / 2**20:.1f} GiB RAM; {gpu}",
        f"- OS: {_first('/etc/os-release', 'PRETTY_NAME=').strip(chr(34))}, {platform.platform()}",
        f"- Python {platform.python_version()}; {', '.join(map(_version, packages))}",
    ]


def heading(title: str, packages: Iterable[str], gpu: str = "no GPU") -> list[str]:
    """Title, date, the command as run from the repository root, then ``machine_lines``."""
    script = os.path.relpath(sys.argv[0])
    command = shlex.join([".venv/bin/python", script, *sys.argv[1:]])
    return [
        f"# {title}",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, from the repository root:",
        "",
        f"    {command}",
        "",
        *machine_lines(packages, gpu),
    ]


def publish(text: str, out: Path | None) -> None:
    """Print the report, and write it to ``out`` when given."""
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)

"""The machine and versions a benchmark ran on, as Markdown bullets for its committed result."""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable
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

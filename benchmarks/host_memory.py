"""What a set of processes holds in host memory, each physical page counted once."""

from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MIB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")
FRAME = np.uint64((1 << 55) - 1)
CHUNK = 1 << 20  # pagemap entries read at once (8 MiB)


@dataclass
class Figure:
    held_mib: float
    """Distinct physical pages mapped by the processes, each counted once."""
    pss_mib: float
    rss_mib: float

    def __str__(self) -> str:
        return f"held {self.held_mib:.0f} MiB, PSS {self.pss_mib:.0f}, RSS {self.rss_mib:.0f}"


def _kib(path: str, field: str) -> int:
    with suppress(OSError):
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        with suppress(OSError):
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
    return found


def _frames(pid: int) -> np.ndarray:
    """The physical frame numbers of the pages ``pid`` has resident (``/proc/PID/pagemap``: bit
    63 present, bits 0-54 the frame; readable by root, which the frames need)."""
    found = []
    with suppress(OSError), open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            for at in range(start, end, CHUNK * PAGE):  # a reserved region can be huge
                with suppress(OSError, ValueError):
                    pagemap.seek(at // PAGE * 8)
                    pages = min(CHUNK, (end - at) // PAGE)
                    entries = np.frombuffer(pagemap.read(pages * 8), np.uint64)
                    found.append(entries[entries >> np.uint64(63) == 1] & FRAME)
    return np.concatenate(found) if found else np.empty(0, np.uint64)


def memory(pids: list[int]) -> Figure:
    """What the processes (and theirs) hold. Counted three ways: distinct physical pages, each
    once however many of the processes map it (the measure the report judges by); the sum of
    PSS; the sum of RSS (which counts a library shared by N processes N times)."""
    every = [p for pid in pids for p in _tree(pid)]
    frames = np.unique(np.concatenate([_frames(p) for p in every]))
    pss = sum(_kib(f"/proc/{p}/smaps_rollup", "Pss") for p in every)
    rss = sum(_kib(f"/proc/{p}/smaps_rollup", "Rss") for p in every)
    return Figure(frames.size * PAGE / MIB, pss / 1024, rss / 1024)


def meminfo_mib(field: str) -> float:
    """A ``/proc/meminfo`` figure (``MemAvailable``...) in MiB."""
    return _kib("/proc/meminfo", field) / 1024

"""Samples GPU and CPU use while a density is under load, summarised over the measured window.

A background thread samples every ``interval_s`` (wall-clock timestamps, the clock the load
generator stamps its window with): GPU utilisation and memory used on each GPU the replicas are
on, each replica's GPU memory, each replica's CPU time from ``/proc/PID/stat``, and the throttling
counters (``cpu.stat``) of each replica's CPU cgroup where it has one. Only a real GPU (NVML)
gives GPU figures; without one, or with simulated GPUs, every GPU field stays None.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sharedserve.bench.summary import Samples
from sharedserve.errors import GpuError
from sharedserve.gpu.backend import GpuBackend
from sharedserve.limits.cpu import CpuThrottling, read_cpu_throttling

__all__ = [
    "Sample",
    "Sampler",
    "cpu_throttling",
    "gpu_figures",
    "process_cpu_seconds",
    "summarize",
]

log = logging.getLogger(__name__)

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of ``pid`` in seconds; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; everything after its ")" is fixed-format.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


@dataclass(frozen=True)
class Sample:
    at: float
    """Wall-clock time (``time.time()``)."""
    gpus: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    """(utilisation %, memory used MiB) of each sampled GPU, by UUID; empty without a real GPU."""
    process_gpu_mib: dict[int, int | None] = field(default_factory=dict)
    process_cpu_s: dict[int, float | None] = field(default_factory=dict)
    cgroup_cpu: dict[str, CpuThrottling | None] = field(default_factory=dict)
    """Throttling counters of each replica's CPU cgroup, by replica name."""


def gpu_figures(
    samples: list[Sample], start: float, end: float, names: dict[str, str] | None = None
) -> list[dict[str, Any]] | None:
    """Each sampled GPU's figures over [start, end]: ``{"uuid", "name", "util_mean", "util_max",
    "mem_used_mib"}`` (utilisation in %, memory the highest sample in MiB); None when no GPU was
    sampled (none, or a simulated one)."""
    inside = [s for s in samples if start <= s.at <= end]
    uuids = list(dict.fromkeys(u for s in inside for u in s.gpus))
    if not uuids:
        return None
    out: list[dict[str, Any]] = []
    for uuid in uuids:
        util = [s.gpus[uuid][0] for s in inside if uuid in s.gpus]
        memory = [s.gpus[uuid][1] for s in inside if uuid in s.gpus]
        utils = [u for u in util if u is not None]
        used = [m for m in memory if m is not None]
        out.append(
            {
                "uuid": uuid,
                "name": (names or {}).get(uuid),
                "util_mean": round(sum(utils) / len(utils), 2) if utils else None,
                "util_max": max(utils) if utils else None,
                "mem_used_mib": max(used) if used else None,
            }
        )
    return out


def _total(values: list[float | None], combine: str) -> float | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if combine == "mean":
        return round(sum(present) / len(present), 2)
    return max(present) if combine == "max" else sum(present)


def summarize(samples: list[Sample], start: float, end: float) -> Samples:
    """Window figures from the samples taken in [start, end] (CPU from the nearest bounds).

    Over several GPUs: utilisation is the mean of their means and the highest of their highs,
    memory used the sum of each one's highest sample."""
    inside = [s for s in samples if start <= s.at <= end]
    gpus = gpu_figures(samples, start, end) or []
    cpu = None
    if len(inside) >= 2:
        first, last = inside[0], inside[-1]
        pids = first.process_cpu_s.keys() & last.process_cpu_s.keys()
        deltas = [
            last.process_cpu_s[p] - first.process_cpu_s[p]  # type: ignore[operator]
            for p in pids
            if first.process_cpu_s[p] is not None and last.process_cpu_s[p] is not None
        ]
        if deltas and last.at > first.at:
            cpu = round(sum(deltas) / (last.at - first.at), 3)
    return Samples(
        gpu_util_mean=_total([g["util_mean"] for g in gpus], "mean"),
        gpu_util_max=_total([g["util_max"] for g in gpus], "max"),
        gpu_mem_used_mib=_total([g["mem_used_mib"] for g in gpus], "sum"),
        cpu_util_mean=cpu,
    )


def cpu_throttling(
    samples: list[Sample], start: float, end: float
) -> dict[str, tuple[float, float]]:
    """Each replica's (share of CFS periods throttled, ms throttled) over [start, end], from the
    first and last readings inside it; replicas without two readings are left out."""
    readings: dict[str, list[CpuThrottling]] = {}
    for sample in samples:
        if start <= sample.at <= end:
            for name, stat in sample.cgroup_cpu.items():
                if stat is not None:
                    readings.setdefault(name, []).append(stat)
    out = {}
    for name, stats in readings.items():
        if len(stats) >= 2:
            delta = stats[-1].since(stats[0])
            share = delta.throttled_periods / delta.periods if delta.periods > 0 else 0.0
            out[name] = (share, delta.throttled_us / 1000.0)
    return out


def process_gpu_peak(samples: list[Sample], start: float, end: float) -> dict[int, int | None]:
    """Each process's highest GPU memory in the window, in MiB (None where never reported)."""
    peak: dict[int, int | None] = {}
    for sample in samples:
        if start <= sample.at <= end:
            for pid, mib in sample.process_gpu_mib.items():
                if mib is not None:
                    peak[pid] = max(mib, peak.get(pid) or 0)
                else:
                    peak.setdefault(pid, None)
    return peak


class Sampler:
    """Background sampling of the GPUs some processes are on, and of those processes."""

    def __init__(
        self,
        backend: GpuBackend | None,
        pids: dict[int, str | None],
        interval_s: float = 0.5,
        cgroups: dict[str, str] | None = None,
    ) -> None:
        """``pids``: each server process and the UUID of its GPU (None without one)."""
        # A simulated GPU has no utilisation or memory to sample: never invent figures.
        self._backend = backend if backend is not None and not backend.simulated else None
        self._pids = dict(pids)
        self._cgroups = {name: Path(path) for name, path in (cgroups or {}).items()}
        self._interval = interval_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def set_pids(self, pids: dict[int, str | None]) -> None:
        self._pids = dict(pids)  # replicas restarted by the packer get new pids

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[Sample]:
        self._stop.set()
        self._thread.join()
        return self.samples

    def _gpu_figures(
        self, pids: dict[int, str | None]
    ) -> tuple[dict[str, tuple[float | None, float | None]], dict[int, int | None]]:
        if self._backend is None:
            return {}, {}
        gpus: dict[str, tuple[float | None, float | None]] = {}
        per_process: dict[int, int | None] = {}
        try:
            for uuid in dict.fromkeys(g for g in pids.values() if g is not None):
                util = self._backend.utilization_percent(uuid)
                used = self._backend.memory_used_mib(uuid)
                gpus[uuid] = (
                    None if util is None else float(util),
                    None if used is None else float(used),
                )
            for pid, gpu in pids.items():
                if gpu is not None:
                    per_process[pid] = self._backend.process_memory_mib(gpu, pid)
        except GpuError as e:
            log.warning("GPU sample failed: %s", e.message)
            return {}, {}
        return gpus, per_process

    def _run(self) -> None:
        while True:
            pids = self._pids
            gpus, per_process = self._gpu_figures(pids)
            cpu = {p: process_cpu_seconds(p) for p in pids}
            throttling = {n: read_cpu_throttling(d) for n, d in self._cgroups.items()}
            self.samples.append(Sample(time.time(), gpus, per_process, cpu, throttling))
            if self._stop.wait(self._interval):
                return

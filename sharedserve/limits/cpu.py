"""CPU limits from cgroups: read the quota that binds this process, and its throttling.

Why: ``os.cpu_count()`` reports the host's CPUs, not the pod's share. A server that sizes its
thread pools to 16 host CPUs inside a 350m pod spends its CFS quota in the first milliseconds of
every period and then stalls all 16 threads until the next one: tail latency, not throughput.
So the server reads the CFS quota of its own cgroup and sizes intra/inter-op pools to it.

Where the quota lives: cgroup v2 keeps it in ``cpu.max``; v1 in ``cpu.cfs_quota_us`` and
``cpu.cfs_period_us`` of the hierarchy that carries the ``cpu`` controller. Hybrid hosts mount
both, so both are read. A quota on any ancestor binds as well, so every level from our cgroup up
to the mount point is read and the smallest wins. Paths in ``/proc/self/cgroup`` are relative to
the cgroup namespace; ``/proc/self/mountinfo`` says which part of the tree each mount shows.

``limits.cgroups`` creates quota'd cgroups for the local packer. The bench reads back what a
quota did (``cpu.stat``: how many CFS periods throttled the cgroup), to tell a tail set by the
quota from one set by neighbours.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from sharedserve.errors import ConfigError

_log = logging.getLogger(__name__)

_PROC_CGROUP = Path("/proc/self/cgroup")
_MOUNTINFO = Path("/proc/self/mountinfo")


class CpuLimitSource(str, Enum):
    """Where the effective CPU limit came from."""

    FLAG = "flag"
    CGROUP_V2 = "cgroup-v2"
    CGROUP_V1 = "cgroup-v1"
    NONE = "none"


@dataclass(frozen=True)
class CpuLimit:
    """The CPU budget of this process.

    ``cores`` is in CPU cores (0.5 = half a core), None when no quota exists anywhere;
    ``cgroup_path`` is the directory whose quota binds (None for a flag or no limit);
    ``available_cpus`` is how many CPUs the scheduler lets this process run on.
    """

    cores: float | None
    source: CpuLimitSource
    cgroup_path: str | None
    available_cpus: int


@dataclass(frozen=True)
class ProcCgroup:
    """Membership from ``/proc/self/cgroup``: the v2 path and v1 paths keyed by controller."""

    v2_path: str | None
    v1_paths: dict[str, str]


@dataclass(frozen=True)
class CgroupMount:
    """One cgroup mount from mountinfo.

    ``root`` is the part of the hierarchy the mount shows (``/docker/abc`` in a container without
    a cgroup namespace); ``super_options`` are the superblock options without rw/ro, which for v1
    are the controllers bound to the hierarchy (``{"cpu", "cpuacct"}``).
    """

    root: str
    mount_point: str
    fstype: str
    super_options: frozenset[str]


def _cores(quota_us: int, period_us: int) -> float:
    if quota_us <= 0 or period_us <= 0:
        raise ValueError(f"quota and period must be positive, got {quota_us} / {period_us}")
    return quota_us / period_us


def parse_cpu_max(text: str) -> float | None:
    """Parse v2 ``cpu.max`` (``"<quota|max> <period>"``) into cores; None means unlimited."""
    fields = text.split()
    if fields[:1] == ["max"] and len(fields) <= 2:
        return None
    if len(fields) != 2:
        raise ValueError(f"expected '<quota|max> <period>', got {text!r}")
    return _cores(int(fields[0]), int(fields[1]))


def parse_cfs_quota(quota_text: str, period_text: str) -> float | None:
    """Parse v1 ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``; a negative quota is unlimited."""
    quota = int(quota_text.strip())
    if quota < 0:
        return None
    return _cores(quota, int(period_text.strip()))


@dataclass(frozen=True)
class CpuThrottling:
    """A cgroup's CFS throttling counters (``cpu.stat``), cumulative since it was made."""

    periods: int
    """CFS enforcement periods in which the cgroup had runnable tasks (``nr_periods``)."""
    throttled_periods: int
    """Of ``periods``, those in which the quota ran out (``nr_throttled``)."""
    throttled_us: int
    """Time its tasks spent throttled, in microseconds (v2 ``throttled_usec``; v1
    ``throttled_time`` in nanoseconds, converted)."""

    def since(self, earlier: CpuThrottling) -> CpuThrottling:
        """The counts between ``earlier`` and this reading."""
        return CpuThrottling(
            self.periods - earlier.periods,
            self.throttled_periods - earlier.throttled_periods,
            self.throttled_us - earlier.throttled_us,
        )


def parse_cpu_stat(text: str) -> CpuThrottling:
    """Parse ``cpu.stat``: v2 (``throttled_usec``) or v1 (``throttled_time``, nanoseconds).

    ValueError when the throttling counters are missing: a v2 cgroup without the cpu controller
    enabled has only the ``usage_usec`` lines, and no quota to throttle it either.
    """
    values: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].isdigit():
            values[fields[0]] = int(fields[1])
    if "throttled_usec" in values:
        throttled_us = values["throttled_usec"]
    elif "throttled_time" in values:
        throttled_us = values["throttled_time"] // 1000
    else:
        raise ValueError(f"no throttling counters in cpu.stat: {text[:200]!r}")
    if "nr_periods" not in values or "nr_throttled" not in values:
        raise ValueError(f"no nr_periods / nr_throttled in cpu.stat: {text[:200]!r}")
    return CpuThrottling(values["nr_periods"], values["nr_throttled"], throttled_us)


def read_cpu_throttling(cgroup_dir: Path) -> CpuThrottling | None:
    """The throttling counters of the cgroup at ``cgroup_dir``; None when it has none to read
    (gone, unreadable, or no cpu controller there)."""
    text = _read(cgroup_dir / "cpu.stat")
    if text is None:
        return None
    try:
        return parse_cpu_stat(text)
    except ValueError:
        return None


def parse_proc_cgroup(text: str) -> ProcCgroup:
    """Parse ``/proc/self/cgroup`` lines ``id:controllers:path`` (v2 is ``0::path``)."""
    v2_path: str | None = None
    v1_paths: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3:
            raise ValueError(f"malformed /proc/self/cgroup line {line!r}")
        hierarchy_id, controllers, path = parts
        if hierarchy_id == "0" and not controllers:
            v2_path = path
        else:
            v1_paths.update((c, path) for c in controllers.split(",") if c)
    return ProcCgroup(v2_path=v2_path, v1_paths=v1_paths)


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as 3-digit octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """Return the cgroup and cgroup2 mounts from ``/proc/self/mountinfo``; skip everything else."""
    mounts: list[CgroupMount] = []
    for line in text.splitlines():
        # Optional fields vary in number; " - " separates them from fstype, source, options.
        left, sep, right = line.partition(" - ")
        before, after = left.split(), right.split()
        if not sep or len(before) < 6 or len(after) < 3 or after[0] not in ("cgroup", "cgroup2"):
            continue
        options = frozenset(o for o in after[2].split(",") if o not in ("rw", "ro"))
        mounts.append(CgroupMount(_unescape(before[3]), _unescape(before[4]), after[0], options))
    return mounts


def _locate(mounts: list[CgroupMount], cgroup_path: str) -> tuple[Path, Path] | None:
    """Map a /proc/self/cgroup path to (its directory, the mount point above it)."""
    best: tuple[CgroupMount, str] | None = None
    for mount in mounts:
        root = mount.root.rstrip("/")
        under = cgroup_path == mount.root or cgroup_path.startswith(root + "/")
        if under and (best is None or len(mount.root) > len(best[0].root)):
            best = (mount, cgroup_path[len(root) :].lstrip("/"))
    if best is not None:
        top = Path(best[0].mount_point)
        return top / best[1], top
    if not mounts:
        return None
    # The mount shows a part of the tree our path is not under (e.g. root "/../.."): guess.
    top = Path(mounts[0].mount_point)
    joined = top / cgroup_path.lstrip("/")
    return (joined if joined.is_dir() else top), top


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:  # missing or unreadable: no quota at this level
        return None


def _quota_at(directory: Path, v2: bool) -> float | None:
    """The quota set at one level; a missing file counts as none, and so does a garbled one.

    Garbled contents only warn: a server that loses its limit is throttled, one that crashes on
    start serves nothing.
    """
    names = ("cpu.max",) if v2 else ("cpu.cfs_quota_us", "cpu.cfs_period_us")
    texts = [t for n in names if (t := _read(directory / n)) is not None]
    if len(texts) < len(names):
        return None
    try:
        return parse_cpu_max(texts[0]) if v2 else parse_cfs_quota(texts[0], texts[1])
    except ValueError as e:
        _log.warning("ignoring malformed CPU quota in %s: %s", directory / names[0], e)
        return None


def _smallest_on_way_up(start: Path, top: Path, v2: bool) -> tuple[float, Path] | None:
    levels = [start, *(p for p in start.parents if p == top or top in p.parents)]
    found = [(cores, d) for d in levels if (cores := _quota_at(d, v2)) is not None]
    return min(found, key=lambda f: f[0]) if found else None


def read_cgroup_cpu_limit(
    proc_cgroup: Path = _PROC_CGROUP, mountinfo: Path = _MOUNTINFO
) -> tuple[float | None, CpuLimitSource, str | None]:
    """Return (cores, source, cgroup dir) of the most restrictive quota above this process."""
    try:
        membership = parse_proc_cgroup(proc_cgroup.read_text())
        mounts = parse_mountinfo(mountinfo.read_text())
    except OSError:  # no /proc (not Linux, or a sandbox): nothing to read
        return None, CpuLimitSource.NONE, None
    except ValueError as e:
        _log.warning("ignoring unreadable %s: %s", proc_cgroup, e)
        return None, CpuLimitSource.NONE, None
    v1_mounts = [m for m in mounts if m.fstype == "cgroup" and "cpu" in m.super_options]
    hierarchies = [
        (membership.v2_path, [m for m in mounts if m.fstype == "cgroup2"], True),
        (membership.v1_paths.get("cpu"), v1_mounts, False),
    ]
    best: tuple[float, CpuLimitSource, str] | None = None
    for path, candidates, v2 in hierarchies:
        located = None if path is None else _locate(candidates, path)
        found = None if located is None else _smallest_on_way_up(*located, v2)
        if found is not None and (best is None or found[0] < best[0]):
            source = CpuLimitSource.CGROUP_V2 if v2 else CpuLimitSource.CGROUP_V1
            best = (found[0], source, str(found[1]))
    return best if best is not None else (None, CpuLimitSource.NONE, None)


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity API (macOS)
        return os.cpu_count() or 1


def resolve_cpu_limit(
    flag_cores: float | None = None,
    *,
    proc_cgroup: Path = _PROC_CGROUP,
    mountinfo: Path = _MOUNTINFO,
) -> CpuLimit:
    """Decide the CPU budget: an explicit flag wins, else the cgroup quota, else no limit."""
    if flag_cores is not None and not (math.isfinite(flag_cores) and flag_cores > 0):
        raise ConfigError(f"CPU limit must be a positive number of cores, got {flag_cores!r}")
    cores, source, path = read_cgroup_cpu_limit(proc_cgroup, mountinfo)
    available = _available_cpus()
    if flag_cores is None:
        return CpuLimit(cores, source, path, available)
    if cores is not None and flag_cores > cores + 1e-6:
        msg = "CPU limit flag %.3g cores exceeds the %s quota of %.3g in %s: expect throttling"
        _log.warning(msg, flag_cores, source.value, cores, path)
    return CpuLimit(flag_cores, CpuLimitSource.FLAG, None, available)


def thread_pool_sizes(limit: CpuLimit) -> tuple[int, int]:
    """Return (intra_op, inter_op) pool sizes: whole cores of quota, capped by usable CPUs."""
    if limit.cores is None:
        n = max(1, limit.available_cpus)
    else:
        # round first: 0.7 / 0.35 is 2.0000000000000004, which must stay 2 threads.
        n = max(1, min(math.ceil(round(limit.cores, 6)), limit.available_cpus))
    return n, n


def cores_text(cores: float) -> str:
    """A CPU limit in words: ``1 core``, ``0.5 cores``."""
    return f"{cores:g} core{'' if cores == 1 else 's'}"

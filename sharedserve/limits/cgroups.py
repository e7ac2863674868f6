"""Quota'd CPU cgroups for the local packer: create one, move a process into it, remove it.

Why: the packer plays the allocator's part without Kubernetes and gives each model server its own
CFS quota the way a kubelet would; ``serve`` then reads whichever quota binds (``limits.cpu``).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import time
from pathlib import Path

from sharedserve.errors import ConfigError
from sharedserve.limits.cpu import _MOUNTINFO, _read, parse_mountinfo

__all__ = ["add_pid_to_cgroup", "create_cpu_cgroup", "remove_cgroup"]

# The kernel refuses CFS periods outside 1 ms..1 s and quotas under 1 ms.
_MIN_US, _MAX_PERIOD_US = 1_000, 1_000_000


def _check_name(name: str) -> None:
    if not name or "/" in name or name in (".", ".."):
        raise ConfigError(f"cgroup name must be one path component, got {name!r}")


def _controllers(directory: str) -> list[str]:
    return (_read(Path(directory, "cgroup.controllers")) or "").split()


def _enable_cpu_controller(directory: Path) -> None:
    control = directory / "cgroup.subtree_control"
    if "cpu" not in (_read(control) or "").split():
        control.write_text("+cpu")


def create_cpu_cgroup(
    parent_name: str,
    name: str,
    cores: float,
    period_us: int = 100_000,
    *,
    mountinfo: Path = _MOUNTINFO,
) -> Path:
    """Create ``<cpu hierarchy>/<parent_name>/<name>`` limited to ``cores`` and return its dir.

    The v1 hierarchy with the ``cpu`` controller is used when mounted (a controller is bound to
    one hierarchy at a time); otherwise a v2 hierarchy that offers ``cpu``.
    """
    _check_name(parent_name)
    _check_name(name)
    if not (math.isfinite(cores) and cores > 0):
        raise ConfigError(f"CPU quota must be a positive number of cores, got {cores!r}")
    quota_us = round(cores * period_us)
    if not _MIN_US <= period_us <= _MAX_PERIOD_US or quota_us < _MIN_US:
        raise ConfigError(
            f"CFS period must be 1000..1000000 us and quota at least 1000 us, "
            f"got {cores} cores over {period_us} us"
        )
    mounts = parse_mountinfo(_read(mountinfo) or "")
    v1 = [m for m in mounts if m.fstype == "cgroup" and "cpu" in m.super_options]
    v2 = [m for m in mounts if m.fstype == "cgroup2" and "cpu" in _controllers(m.mount_point)]
    if not v1 and not v2:
        raise ConfigError(
            f"no cgroup hierarchy with the cpu controller is mounted (per {mountinfo}); "
            "cannot give a process a CPU quota"
        )
    top = Path((v1 or v2)[0].mount_point)
    parent, leaf = top / parent_name, top / parent_name / name
    try:
        parent.mkdir(exist_ok=True)
        if v1:
            leaf.mkdir(exist_ok=True)
            # Period first: the new cgroup's quota is -1, so no intermediate state is refused.
            (leaf / "cpu.cfs_period_us").write_text(str(period_us))
            (leaf / "cpu.cfs_quota_us").write_text(str(quota_us))
        else:
            _enable_cpu_controller(top)
            _enable_cpu_controller(parent)
            leaf.mkdir(exist_ok=True)
            (leaf / "cpu.max").write_text(f"{quota_us} {period_us}")
    except OSError as e:
        raise ConfigError(f"cannot create CPU cgroup {leaf} with {cores} cores: {e}") from e
    return leaf


def add_pid_to_cgroup(path: Path, pid: int) -> None:
    """Move process ``pid`` (all its threads) into the cgroup at ``path``."""
    try:
        (path / "cgroup.procs").write_text(str(pid))
    except OSError as e:
        raise ConfigError(f"cannot move pid {pid} into cgroup {path}: {e}") from e


def remove_cgroup(path: Path) -> None:
    """Remove the cgroup at ``path``, then its parent if no other cgroup is left in it.

    A missing cgroup is not an error, so cleanup can run twice. The removal is retried briefly
    because the kernel may report a cgroup busy for a moment after its last process was reaped.
    """
    deadline = time.monotonic() + 2.0
    while True:
        try:
            path.rmdir()
            break
        except FileNotFoundError:
            break
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                raise ConfigError(f"cannot remove cgroup {path}: {e}") from e
            time.sleep(0.02)
    if not os.path.ismount(path.parent):
        with contextlib.suppress(OSError):  # siblings still there, or already gone: leave it
            path.parent.rmdir()

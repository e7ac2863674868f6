"""Which CPUs the model servers and the load generator of a measurement may run on.

Why: a load generator that shares a CPU with the servers it measures sends late when they are
busy and takes their CPU when it is, so its own delays end up in the latencies it reports and
two runs of the same share disagree. ``bench`` (and ``profile`` and ``size --verify``, which
are bench) give each side its own CPUs by affinity, which every Linux process can set and its
threads inherit; a quota'd cgroup still bounds each server's share within its set.

``split_cpus`` resolves the two flags against the CPUs this process may use (pure);
``on_cpus`` wraps a command so that it starts on its CPUs, before it makes a thread.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from sharedserve.errors import ConfigError

__all__ = [
    "AUTO",
    "CpuSplit",
    "format_cpus",
    "on_cpus",
    "parse_cpus",
    "split_cpus",
    "usable_cpus",
]

AUTO = "auto"
"""The flags' default: split the usable CPUs (``split_cpus``)."""
ALL = "all"
"""Not pinned: every usable CPU."""

LOADGEN_SHARE = 4
"""Auto gives the load generator one CPU in this many (at least one): a gevent process offers
some 20,000 requests/s on a core (benchmarks/results/loadgen_capacity.md), far above what a
core's worth of model servers answers."""

# Set the affinity, then exec: the program starts on its CPUs and every thread it makes inherits
# them. Python's own interpreter, since every host that runs sharedserve has it (taskset is not
# on every image); a preexec_fn is unsafe in a process that runs threads.
_PIN_THEN_EXEC = (
    "import os,sys;"
    "os.sched_setaffinity(0,[int(c) for c in sys.argv[1].split(',')]);"
    "os.execvp(sys.argv[2],sys.argv[2:])"
)


def usable_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on (its affinity: a container's cpuset counts)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity API (macOS): nothing can be pinned
        return ()


def parse_cpus(text: str, flag: str) -> tuple[int, ...] | str:
    """``auto``, ``all``, or a CPU list as Linux writes them (``0-3,6``) as sorted numbers."""
    value = text.strip().lower()
    if value in (AUTO, ALL):
        return value
    cpus: set[int] = set()
    try:
        for part in value.split(","):
            low, dash, high = part.partition("-")
            first, last = int(low), int(high if dash else low)
            if first < 0 or last < first:
                raise ValueError(part)
            cpus.update(range(first, last + 1))
    except ValueError:
        raise ConfigError(
            f"{flag} must be auto, all or a CPU list such as 0-3,6, got {text!r}"
        ) from None
    return tuple(sorted(cpus))


def format_cpus(cpus: Sequence[int] | None) -> str | None:
    """A CPU list in Linux's form (``0-3,6``); None for None (not pinned)."""
    if cpus is None:
        return None
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


@dataclass(frozen=True)
class CpuSplit:
    """Where each side of a measurement runs; None: not pinned (any usable CPU)."""

    servers: tuple[int, ...] | None
    loadgen: tuple[int, ...] | None
    note: str
    """How the split was decided, in words, for the report and the log."""

    def describe(self) -> dict[str, str | None]:
        """The report's record: each side's CPU list (null: not pinned), and the note."""
        return {
            "server_cpus": format_cpus(self.servers),
            "loadgen_cpus": format_cpus(self.loadgen),
            "cpu_pinning": self.note,
        }


def split_cpus(
    servers: str,
    loadgen: str,
    usable: Sequence[int],
    *,
    servers_started: bool = True,
) -> CpuSplit:
    """The two flags (``--server-cpus``, ``--loadgen-cpus``) against the ``usable`` CPUs.

    Both ``auto``, on two or more CPUs: the load generator gets the last quarter of them (at
    least one), the servers the rest; on one CPU neither is pinned. One given as a list, the
    other ``auto``: the other gets every usable CPU it does not take. ``all``: that side is not
    pinned (and an ``auto`` beside it neither). ``servers_started`` False (``--targets``: the
    servers already run, on this host or not): the servers' side cannot be set, and the load
    generator is pinned only when given a list.
    """
    wanted = {
        "--server-cpus": parse_cpus(servers, "--server-cpus"),
        "--loadgen-cpus": parse_cpus(loadgen, "--loadgen-cpus"),
    }
    available = set(usable)
    for flag, value in wanted.items():
        if isinstance(value, tuple):
            outside = sorted(set(value) - available)
            if outside:
                raise ConfigError(
                    f"{flag} names CPU {format_cpus(outside)}, which this process may not use "
                    f"(it may use {format_cpus(usable) or 'none it can tell'})"
                )
    server_side, loadgen_side = wanted["--server-cpus"], wanted["--loadgen-cpus"]
    if not servers_started:
        if server_side != AUTO:
            raise ConfigError(
                "--server-cpus sets the CPUs of servers bench starts; with --targets they "
                "already run: pin them where they were started"
            )
        if isinstance(loadgen_side, tuple):
            return CpuSplit(None, loadgen_side, "load generator pinned; servers started elsewhere")
        return CpuSplit(None, None, "not pinned: the servers were started elsewhere (--targets)")
    if ALL in (server_side, loadgen_side):
        return CpuSplit(
            server_side if isinstance(server_side, tuple) else None,
            loadgen_side if isinstance(loadgen_side, tuple) else None,
            "not pinned as asked (all): the load generator may share the servers' CPUs",
        )
    if isinstance(server_side, tuple) and isinstance(loadgen_side, tuple):
        shared = set(server_side) & set(loadgen_side)
        note = "as given" + (
            f"; CPU {format_cpus(sorted(shared))} shared by both sides" if shared else ""
        )
        return CpuSplit(server_side, loadgen_side, note)
    if isinstance(server_side, tuple) or isinstance(loadgen_side, tuple):
        given = server_side if isinstance(server_side, tuple) else loadgen_side
        assert isinstance(given, tuple)
        rest = tuple(c for c in usable if c not in given)
        if not rest:
            other = "--loadgen-cpus" if isinstance(server_side, tuple) else "--server-cpus"
            raise ConfigError(
                f"no CPU is left for the other side: give {other} too (a list, or all to share)"
            )
        if isinstance(server_side, tuple):
            return CpuSplit(server_side, rest, "servers as given, the load generator the rest")
        return CpuSplit(rest, given, "load generator as given, the servers the rest")
    if len(usable) < 2:
        return CpuSplit(None, None, "not pinned: one CPU, the load generator shares it")
    k = max(1, len(usable) // LOADGEN_SHARE)
    return CpuSplit(
        tuple(usable[:-k]), tuple(usable[-k:]), "auto: the load generator on its own CPUs"
    )


def on_cpus(command: Sequence[str], cpus: Sequence[int] | None) -> list[str]:
    """``command`` started on ``cpus`` (unchanged for None)."""
    if cpus is None:
        return list(command)
    return [sys.executable, "-c", _PIN_THEN_EXEC, ",".join(map(str, cpus)), *command]

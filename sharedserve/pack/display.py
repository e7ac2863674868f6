"""What ``pack`` shows while it runs: a live ``rich`` table on a terminal, log lines otherwise."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from rich.console import Console
from rich.live import Live
from rich.logging import RichHandler
from rich.table import Table

from sharedserve.pack.plan import GpuShare
from sharedserve.pack.replica import Replica, ReplicaState
from sharedserve.pack.supervisor import Pack

__all__ = ["View", "describe_plan", "replica_table", "showing"]

_STATE_STYLE = {
    ReplicaState.AVAILABLE: "green",
    ReplicaState.STARTING: "yellow",
    ReplicaState.BACKOFF: "yellow",
    ReplicaState.FAILED: "bold red",
    ReplicaState.STOPPED: "dim",
}


class View(Protocol):
    def refresh(self) -> None: ...


def _share_text(share: GpuShare, simulated: bool) -> str:
    if share.gpu is None:
        cap = "none" if share.fraction is None and share.mib is None else "recorded, NOT enforced"
        return f"no GPU on this host; GPU memory cap {cap}"
    how = "even split" if share.default_split else "as requested"
    kind = "SIMULATED " if simulated else ""
    return (
        f"{kind}GPU {share.gpu.index} {share.gpu.name} ({share.gpu.uuid}, {share.gpu.memory_mib} "
        f"MiB); cap per replica {share.mib} MiB = {share.fraction:g} of it ({how})"
    )


def describe_plan(pack: Pack) -> list[str]:
    """Lines that say what the pack run set up, printed once every replica is up."""
    plan = pack.plan
    assert plan is not None
    share = _share_text(plan.share, plan.simulated_gpus)
    lines = [f"{len(plan.specs)} replicas of {plan.specs[0].model}; {share}"]
    cpu = pack.settings.cpu_limit_cores
    if cpu is None:
        lines.append("CPU: no limit")
    elif plan.cpu_quota_enforced:
        lines.append(f"CPU: {cpu:g} cores per replica, enforced by a cgroup quota each")
    else:
        lines.append(
            f"CPU: {cpu:g} cores per replica NOT enforced ({plan.cpu_quota_note}); "
            "servers size their threads to it"
        )
    lines.append(f"targets file: {plan.targets_path}")
    lines.append(f"replica logs: {plan.log_dir}")
    return lines


def replica_table(replicas: list[Replica]) -> Table:
    table = Table(title="sharedserve pack (Ctrl-C stops every replica)")
    for column in ("replica", "pid", "REST", "gRPC", "state", "restarts", "last exit"):
        table.add_column(column)
    for r in replicas:
        style = _STATE_STYLE[r.state]
        table.add_row(
            r.spec.name,
            str(r.pid or "-"),
            r.spec.rest_url,
            r.spec.grpc_address,
            f"[{style}]{r.state.value}[/{style}]",
            str(r.restarts),
            "-" if r.last_exit is None else str(r.last_exit),
        )
    return table


class _Plain:
    def refresh(self) -> None:
        pass  # events already went to the log


class _Live:
    def __init__(self, live: Live, pack: Pack) -> None:
        self._live, self._pack = live, pack

    def refresh(self) -> None:
        self._live.update(replica_table(self._pack.replicas))


@contextmanager
def showing(pack: Pack, console: Console, live: bool) -> Iterator[View]:
    """Show the replicas while the block runs.

    In live mode log records go through the same console as the table (a ``RichHandler``), so
    they scroll above it instead of tearing it apart.
    """
    if not live:
        yield _Plain()
        return
    root = logging.getLogger()
    saved = root.handlers[:]
    with Live(replica_table(pack.replicas), console=console, refresh_per_second=4) as display:
        root.handlers = [RichHandler(console=console, show_path=False)]
        try:
            yield _Live(display, pack)
        finally:
            root.handlers = saved

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

from sharedserve.limits.cpu import cores_text
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


def _share_text(share: GpuShare, simulated: bool, how: str = "even split") -> str:
    if share.gpu is None:
        cap = "none" if share.fraction is None and share.mib is None else "recorded, NOT enforced"
        return f"no GPU on this host; GPU memory cap {cap}"
    how = how if share.default_split else "as requested"
    kind = "SIMULATED " if simulated else ""
    return (
        f"{kind}GPU {share.gpu.index} {share.gpu.name} ({share.gpu.uuid}, {share.gpu.memory_mib} "
        f"MiB); cap per replica {share.mib} MiB = {share.fraction:g} of it ({how})"
    )


def _cpu_text(cpu: float | None, enforced: bool, note: str | None) -> str:
    if cpu is None:
        return "CPU: no limit"
    if enforced:
        return f"CPU: {cores_text(cpu)} per replica, enforced by a cgroup quota each"
    limit = cores_text(cpu)
    return f"CPU: {limit} per replica NOT enforced ({note}); servers size their threads to it"


def describe_plan(pack: Pack) -> list[str]:
    """Lines that say what the pack run set up, printed once every replica is up."""
    plan = pack.plan
    assert plan is not None
    models = list(dict.fromkeys(spec.model for spec in plan.specs))
    lines: list[str] = []
    if len(models) == 1:
        text = _share_text(plan.share, plan.simulated_gpus)
        lines.append(f"{len(plan.specs)} replicas of {plan.specs[0].model}; {text}")
        entry = plan.entries[0]
        lines.append(_cpu_text(entry.cpu_limit_cores, plan.cpu_quota_enforced, plan.cpu_quota_note))
    else:
        lines.append(f"{len(plan.specs)} replicas of {len(models)} models:")
        for model in models:
            rows = [i for i, spec in enumerate(plan.specs) if spec.model == model]
            entry = plan.entries[rows[0]]
            slo = "" if entry.slo_p99_ms is None else f", P99 objective {entry.slo_p99_ms:g} ms"
            count = f"{len(rows)} replica{'' if len(rows) == 1 else 's'}"
            lines.append(f"  {model}: {count}, weight {entry.weight:g}{slo}")
            shares = list(dict.fromkeys(plan.shares[i] for i in rows))
            for share in sorted(shares, key=lambda s: -1 if s.gpu is None else s.gpu.index):
                on = len([i for i in rows if plan.shares[i] == share])
                where = _share_text(share, plan.simulated_gpus, "split by footprint")
                lines.append(f"    {on} on {where}")
            cpu = _cpu_text(entry.cpu_limit_cores, plan.cpu_quota_enforced, plan.cpu_quota_note)
            lines.append(f"    {cpu}")
    lines.append(f"targets file: {plan.targets_path}")
    lines.append(f"replica logs: {plan.log_dir}")
    return lines


def replica_table(replicas: list[Replica]) -> Table:
    """One row per replica, grouped by model (a section each), in spec order."""
    table = Table(title="sharedserve pack (Ctrl-C stops every replica)")
    for column in ("model", "replica", "pid", "REST", "gRPC", "state", "restarts", "last exit"):
        table.add_column(column)
    models = list(dict.fromkeys(r.spec.model for r in replicas))
    for m, model in enumerate(models):
        group = [r for r in replicas if r.spec.model == model]
        for k, r in enumerate(group):
            style = _STATE_STYLE[r.state]
            table.add_row(
                model if k == 0 else "",
                r.spec.name,
                str(r.pid or "-"),
                r.spec.rest_url,
                r.spec.grpc_address,
                f"[{style}]{r.state.value}[/{style}]",
                str(r.restarts),
                "-" if r.last_exit is None else str(r.last_exit),
                end_section=k == len(group) - 1 and m < len(models) - 1,
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

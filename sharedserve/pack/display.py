"""What ``pack`` shows: the placement (``--dry-run``, and once every replica is up), then while it
runs a live ``rich`` table on a terminal, log lines otherwise."""

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
from sharedserve.pack.caps import ReplicaShare
from sharedserve.pack.prepare import PreparedPack
from sharedserve.pack.replica import Replica, ReplicaState
from sharedserve.pack.supervisor import Pack

__all__ = [
    "View",
    "describe_plan",
    "placement_lines",
    "placement_table",
    "replica_table",
    "showing",
]

_STATE_STYLE = {
    ReplicaState.AVAILABLE: "green",
    ReplicaState.STARTING: "yellow",
    ReplicaState.BACKOFF: "yellow",
    ReplicaState.FAILED: "bold red",
    ReplicaState.STOPPED: "dim",
}


class View(Protocol):
    def refresh(self) -> None: ...


def _share_text(share: ReplicaShare, simulated: bool, how: str = "even split") -> str:
    cap, gpu = share.share, share.gpu
    if gpu is None:
        kept = "none" if cap.fraction is None and cap.mib is None else "recorded, NOT enforced"
        return f"no GPU on this host; GPU memory cap {kept}"
    how = how if share.default_split else "as requested"
    kind = "SIMULATED " if simulated else ""
    return (
        f"{kind}GPU {gpu.index} {gpu.name} ({gpu.uuid}, {gpu.memory_mib} "
        f"MiB); cap per replica {cap.mib} MiB = {cap.fraction:g} of it ({how})"
    )


def _cpu_text(cpu: float | None, enforced: bool, note: str | None) -> str:
    if cpu is None:
        return "CPU: no limit"
    if enforced:
        return f"CPU: {cores_text(cpu)} per replica, enforced by a cgroup quota each"
    limit = cores_text(cpu)
    return f"CPU: {limit} per replica NOT enforced ({note}); servers size their threads to it"


def _objective(slo_p99_ms: float | None) -> str:
    return "" if slo_p99_ms is None else f", P99 objective {slo_p99_ms:g} ms"


def describe_plan(pack: Pack) -> list[str]:
    """Lines that say what the pack run set up, printed once every replica is up."""
    plan = pack.plan
    assert plan is not None
    models = list(dict.fromkeys(spec.model for spec in plan.specs))
    lines: list[str] = []
    if len(models) == 1 and not plan.entries[0].is_shared_server:
        text = _share_text(plan.share, plan.simulated_gpus)
        lines.append(f"{len(plan.specs)} replicas of {plan.specs[0].model}; {text}")
        entry = plan.entries[0]
        lines.append(_cpu_text(entry.cpu_limit_cores, plan.cpu_quota_enforced, plan.cpu_quota_note))
    else:
        # A shared server's models are counted, not the server: its name is the group's.
        served = {m.name for spec in plan.specs for m in spec.models}
        served |= {spec.model for spec in plan.specs if not spec.models}
        lines.append(f"{len(plan.specs)} replicas of {len(served)} models:")
        for model in models:
            rows = [i for i, spec in enumerate(plan.specs) if spec.model == model]
            entry = plan.entries[rows[0]]
            count = f"{len(rows)} replica{'' if len(rows) == 1 else 's'}"
            if entry.is_shared_server:
                # Its weight and objective are its models', not the group's: each is said.
                held = plan.specs[rows[0]].models
                lines.append(
                    f"  {model}: {count} of a shared server, each holding {len(held)} models:"
                )
                lines += [
                    f"    {m.name}: weight {m.weight:g}{_objective(m.slo_p99_ms)}" for m in held
                ]
            else:
                lines.append(
                    f"  {model}: {count}, weight {entry.weight:g}{_objective(entry.slo_p99_ms)}"
                )
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


def placement_table(plan: PreparedPack) -> Table:
    """Which replica is on which GPU, with its cap and its CPU quota.

    It fits 80 columns, as the live table does: the GPU is its index (the lines after the table
    name each GPU used, with its memory taken), and the context reserve, the same for every
    replica, is said once in the caption. A cell too long all the same folds rather than being
    cut.
    """
    kind = "simulated " if plan.simulated_gpus else ""
    on_gpu = any(share.gpu is not None for share in plan.shares)
    table = Table(
        title=f"sharedserve pack: the placement on this host's {kind}GPUs",
        caption=(
            f"each replica on a GPU also holds a {plan.context_reserve_mib} MiB reserve beside "
            "its cap (its CUDA context)"
            if on_gpu
            else None
        ),
        caption_justify="left",
    )
    for head in ("replica", "GPU", "cap MiB", "cap fraction", "cap from", "CPU quota"):
        left = head in ("replica", "cap from")
        table.add_column(head, justify="left" if left else "right", overflow="fold")
    for spec, share in zip(plan.specs, plan.shares, strict=True):
        gpu, cap = share.gpu, share.share
        split = "split" if share.default_split else "asked"
        table.add_row(
            spec.name,
            "none" if gpu is None else str(gpu.index),
            "-" if cap.mib is None else str(cap.mib),
            "-" if cap.fraction is None else f"{cap.fraction:g}",
            "-" if cap.mib is None and cap.fraction is None else split,
            "none" if spec.cpu_limit is None else cores_text(spec.cpu_limit),
        )
    return table


def placement_lines(plan: PreparedPack) -> list[str]:
    """A line for each GPU used: its replicas, and its memory taken by caps and reserves."""
    lines = []
    gpus = {s.gpu.index: s.gpu for s in plan.shares if s.gpu is not None}
    for index, gpu in sorted(gpus.items()):
        on = [s for s in plan.shares if s.gpu is not None and s.gpu.index == index]
        caps = sum(s.share.mib or 0 for s in on)
        reserves = len(on) * plan.context_reserve_mib
        lines.append(
            f"GPU {index} {gpu.name} ({gpu.uuid}): {len(on)} replicas, caps {caps} MiB + "
            f"reserves {reserves} MiB = {caps + reserves} of {gpu.memory_mib} MiB"
        )
    cpu = {spec.cpu_limit for spec in plan.specs if spec.cpu_limit is not None}
    if cpu:
        why = "" if plan.cpu_quota_note is None else f" ({plan.cpu_quota_note})"
        state = "enforced by a cgroup each" if plan.cpu_quota_enforced else f"NOT enforced{why}"
        lines.append(f"CPU quota: {state}")
    return lines


def _restarts(replica: Replica) -> str:
    if replica.last_exit is None:
        return str(replica.restarts)
    return f"{replica.restarts} (exit {replica.last_exit})"


def replica_table(replicas: list[Replica], plan: PreparedPack) -> Table:
    """One row per replica, grouped by model (a section each), in spec order.

    It fits 80 columns: the replica's name says its model, its addresses are ports on the one
    host pack binds (the caption names it and where the full endpoints are), and the GPU and its
    cap are short numbers. A cell too long all the same (a long model name) folds onto a second
    line rather than being cut: a cut name or port is no use to anyone.
    """
    host = plan.specs[0].rest_url.rsplit(":", 1)[0] if plan.specs else "the host"
    table = Table(
        title="sharedserve pack (Ctrl-C stops every replica)",
        caption=f"ports on {host}; every endpoint in full: {plan.targets_path}",
        caption_justify="left",
    )
    for column in ("replica", "REST", "gRPC", "GPU", "cap MiB", "state", "restarts"):
        right = column in ("REST", "gRPC", "GPU", "cap MiB", "restarts")
        table.add_column(column, justify="right" if right else "left", overflow="fold")
    models = list(dict.fromkeys(r.spec.model for r in replicas))
    for m, model in enumerate(models):
        group = [r for r in replicas if r.spec.model == model]
        for k, r in enumerate(group):
            style = _STATE_STYLE[r.state]
            share = plan.shares[r.spec.index]
            table.add_row(
                r.spec.name,
                str(r.spec.rest_port),
                str(r.spec.grpc_port),
                "none" if share.gpu is None else str(share.gpu.index),
                "-" if share.share.mib is None else str(share.share.mib),
                f"[{style}]{r.state.value}[/{style}]",
                _restarts(r),
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
        assert self._pack.plan is not None
        self._live.update(replica_table(self._pack.replicas, self._pack.plan))


@contextmanager
def showing(pack: Pack, console: Console, live: bool) -> Iterator[View]:
    """Show the replicas while the block runs.

    In live mode log records go through the same console as the table (a ``RichHandler``), so
    they scroll above it instead of tearing it apart.
    """
    if not live:
        yield _Plain()
        return
    assert pack.plan is not None
    root = logging.getLogger()
    saved = root.handlers[:]
    table = replica_table(pack.replicas, pack.plan)
    with Live(table, console=console, refresh_per_second=4) as display:
        root.handlers = [RichHandler(console=console, show_path=False)]
        try:
            yield _Live(display, pack)
        finally:
            root.handlers = saved

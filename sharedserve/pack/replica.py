"""One packed model server: its fixed identity (ports, cgroup, env) and its current process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections import deque
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import IO

from sharedserve.pack.targets import Target

__all__ = ["HeldModel", "Replica", "ReplicaSpec", "ReplicaState"]

# Join the cgroup *before* exec, so the server is throttled from its first instruction and reads
# its own quota at start-up to size its thread pools. A shell one-liner instead of preexec_fn,
# which is unsafe in a process that runs threads (the live display does).
_JOIN_CGROUP_THEN_EXEC = 'echo $$ > "$0" && exec "$@"'


class ReplicaState(str, Enum):
    STARTING = "starting"
    """Spawned; not yet reporting AVAILABLE."""
    AVAILABLE = "available"
    """Serving."""
    BACKOFF = "backoff"
    """Exited; waiting before the next restart."""
    FAILED = "failed"
    """Crashed too often in a row; given up."""
    STOPPED = "stopped"


@dataclass(frozen=True)
class HeldModel:
    """One model of a shared server's process, as the targets file names it."""

    name: str
    weight: float = 1.0
    slo_p99_ms: float | None = None


@dataclass(frozen=True)
class ReplicaSpec:
    """Everything that stays the same across a replica's restarts."""

    name: str
    index: int
    model: str
    host: str
    rest_port: int
    grpc_port: int
    command: tuple[str, ...]
    """``sharedserve serve ...``, without the cgroup wrapper."""
    env: dict[str, str]
    log_path: Path
    cgroup: Path | None
    """The CPU cgroup the process joins; None when the quota is not enforced."""
    cpu_limit: float | None
    gpu: str | None
    gpu_memory_fraction: float | None
    weight: float = 1.0
    """The model's relative share of traffic (its entry's ``weight``)."""
    slo_p99_ms: float | None = None
    """The model's P99 latency objective in ms; None when its entry gives none."""
    models: tuple[HeldModel, ...] = ()
    """A shared server's models, all served by this one process (then ``model`` is the
    shared server's name); empty: the replica serves ``model`` alone."""
    repository: Path | None = None
    """A shared server's model repository, which pack wrote and removes on stop."""

    @property
    def served(self) -> tuple[str, ...]:
        """The model names this process serves."""
        return tuple(m.name for m in self.models) or (self.model,)

    @property
    def rest_url(self) -> str:
        return f"http://{_url_host(self.host)}:{self.rest_port}"

    @property
    def grpc_address(self) -> str:
        return f"{_url_host(self.host)}:{self.grpc_port}"


def _url_host(host: str) -> str:
    # A wildcard bind is reachable on loopback; clients cannot connect to 0.0.0.0 everywhere.
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


class Replica:
    """A replica's current process and supervision counters."""

    def __init__(self, spec: ReplicaSpec) -> None:
        self.spec = spec
        self.process: subprocess.Popen[bytes] | None = None
        self.state = ReplicaState.STOPPED
        self.restarts = 0
        """Restarts over the replica's life."""
        self.crashes_in_row = 0
        """Exits since the replica last stayed up for a while; decides backoff and giving up."""
        self.started_at = 0.0
        self.available_at: float | None = None
        self.restart_at: float | None = None
        self.last_exit: int | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def spawn(self, now: float | None = None) -> None:
        """Start a new process for this replica (appending to its log)."""
        spec = self.spec
        command: tuple[str, ...] = spec.command
        if spec.cgroup is not None:
            procs = str(spec.cgroup / "cgroup.procs")
            command = ("sh", "-c", _JOIN_CGROUP_THEN_EXEC, procs, *command)
        if self._log is None:
            self._log = spec.log_path.open("ab")
        self._log.write(f"--- sharedserve pack: starting {spec.name} ---\n".encode())
        self._log.flush()
        # Own session: a Ctrl-C in the terminal reaches the packer alone, which then stops the
        # replicas in order instead of every process racing to die at once.
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=spec.env,
            start_new_session=True,
        )
        self.state = ReplicaState.STARTING
        self.started_at = time.monotonic() if now is None else now
        self.available_at = None
        self.restart_at = None

    def exit_code(self) -> int | None:
        """The exit status once the current process has ended (negative: killed by a signal)."""
        return None if self.process is None else self.process.poll()

    def wait(self) -> int | None:
        """Reap the current process (after a SIGKILL) and return its exit status."""
        return None if self.process is None else self.process.wait()

    def kill(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the replica's process group (the server and anything it started)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, sig)

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of the replica's log, for error messages."""
        try:
            with self.spec.log_path.open("rb") as f:
                tail = deque(f, maxlen=lines)
        except OSError:
            return ""
        return b"".join(tail).decode(errors="replace").rstrip()

    def targets(self) -> list[Target]:
        """Its endpoint; a shared server's process has one per model (``NAME-i/MODEL``), all
        with its own addresses, process, cgroup and GPU share."""
        spec = self.spec
        held = spec.models or (HeldModel(spec.model, spec.weight, spec.slo_p99_ms),)
        return [
            Target(
                name=f"{spec.name}/{m.name}" if spec.models else spec.name,
                model=m.name,
                rest=spec.rest_url,
                grpc=spec.grpc_address,
                pid=self.pid,
                cgroup=None if spec.cgroup is None else str(spec.cgroup),
                gpu=spec.gpu,
                gpu_memory_fraction=spec.gpu_memory_fraction,
                cpu_limit=spec.cpu_limit,
                weight=m.weight,
                slo_p99_ms=m.slo_p99_ms,
            )
            for m in held
        ]

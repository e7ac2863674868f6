"""Start N replicas, keep them up, stop them cleanly.

``Pack`` is what both the ``pack`` command (in the foreground, with signals) and the bench's
density sweep (in-process, one pack per density) drive:

    pack = Pack(settings)
    targets = pack.start()      # every replica AVAILABLE, targets file written
    while ...: pack.poll()      # restarts crashed replicas with backoff
    pack.stop(clean=True)       # TERM, KILL after the grace period; cgroups and targets removed,
                                # and the temporary log directory when the stop is a clean one
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import time
from collections.abc import Callable

from sharedserve.config import PackSettings
from sharedserve.errors import ConfigError, SharedServeError
from sharedserve.pack.prepare import PreparedPack, prepare_pack, release_cgroups
from sharedserve.pack.probe import model_status
from sharedserve.pack.replica import Replica, ReplicaState
from sharedserve.pack.repository import remove_repository
from sharedserve.pack.targets import Target, write_targets

__all__ = ["STABLE_AFTER_S", "Pack", "PackInterrupted", "restart_delay"]

log = logging.getLogger(__name__)

STABLE_AFTER_S = 60.0
"""A replica that stays AVAILABLE this long has its crash count reset: it is not crash-looping."""
_PROBE_EVERY_S = 0.25


def restart_delay(crashes_in_row: int, base_s: float = 1.0, cap_s: float = 30.0) -> float:
    """Exponential backoff before restart number ``crashes_in_row``: 1, 2, 4 ... 30 s."""
    return min(cap_s, base_s * 2.0 ** max(0, crashes_in_row - 1))


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _usage_error(code: int | None, log_tail: str) -> str | None:
    """The ``error: ...`` line of a serve that exited 2 (ConfigError: a model it cannot load,
    its framework not installed, a bad flag), without the prefix; None for any other exit."""
    if code != 2:
        return None
    lines = [line for line in log_tail.splitlines() if line.startswith("error: ")]
    return lines[-1].removeprefix("error: ") if lines else None


class PackInterrupted(SharedServeError):
    """Stop was asked for while replicas were still starting."""


class Pack:
    """N supervised ``sharedserve serve`` processes sharing one GPU."""

    def __init__(self, settings: PackSettings) -> None:
        self.settings = settings
        self.plan: PreparedPack | None = None
        self.replicas: list[Replica] = []
        self._last_probe = 0.0
        self._stopped = False
        self._logs_settled = False

    # --- start -------------------------------------------------------------------------------

    def start(self, should_stop: Callable[[], bool] = lambda: False) -> list[Target]:
        """Prepare, spawn every replica and wait until all are AVAILABLE.

        On any failure everything started is stopped and cleaned up before the error propagates.
        """
        self.plan = prepare_pack(self.settings)  # raises before anything is started
        if self.plan.own_log_dir:
            kept = "kept (--keep-logs)" if self.settings.keep_logs else "removed"
            log.info("replica logs in %s, %s when pack stops cleanly", self.plan.log_dir, kept)
        self.replicas = [Replica(spec) for spec in self.plan.specs]
        try:
            for replica in self.replicas:
                replica.spawn()
            self._wait_all_available(should_stop)
            self._write_targets()
        except BaseException:
            self._stop_replicas()
            raise
        return self.targets()

    def _wait_all_available(self, should_stop: Callable[[], bool]) -> None:
        timeout = self.settings.start_timeout_s
        while not all(r.state is ReplicaState.AVAILABLE for r in self.replicas):
            if should_stop():
                raise PackInterrupted("stopped while replicas were starting")
            for replica in self.replicas:
                code = replica.exit_code()
                refused = _usage_error(code, replica.log_tail())
                if refused is not None:
                    # serve refused its settings (exit 2, as any usage error): every replica and
                    # every restart would, so its one line is the whole story.
                    raise ConfigError(f"replica {replica.spec.name} cannot start: {refused}")
                if code is not None:
                    raise SharedServeError(
                        f"replica {replica.spec.name} {_describe_exit(code)} while starting; "
                        f"last lines of {replica.spec.log_path}:\n{replica.log_tail()}"
                    )
                if time.monotonic() - replica.started_at > timeout:
                    raise SharedServeError(
                        f"replica {replica.spec.name} was not AVAILABLE within {timeout:g} s "
                        f"(--start-timeout); last lines of {replica.spec.log_path}:\n"
                        f"{replica.log_tail()}"
                    )
                if replica.state is ReplicaState.STARTING and self._available(replica):
                    replica.state = ReplicaState.AVAILABLE
                    replica.available_at = time.monotonic()
                    log.info(
                        "%s AVAILABLE on %s (pid %s)",
                        replica.spec.name,
                        replica.spec.rest_url,
                        replica.pid,
                    )
            time.sleep(0.1)

    @staticmethod
    def _available(replica: Replica) -> bool:
        """Whether every model the replica holds is AVAILABLE (a shared server's process is up
        once all of its are); SharedServeError at once for one that failed to load, which no
        wait would change: the server goes on serving the others, so it does not exit."""
        url, up = replica.spec.rest_url, True
        for model in replica.spec.served:
            state, error = model_status(url, model, timeout=1.0)
            if state == "END" and error:
                raise SharedServeError(
                    f"replica {replica.spec.name}: model {model!r} failed to load: {error}"
                )
            up = up and state == "AVAILABLE"
        return up

    # --- supervise ---------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> None:
        """One supervision step: notice exits, restart after backoff, notice recoveries."""
        now = time.monotonic() if now is None else now
        probe = now - self._last_probe >= _PROBE_EVERY_S
        if probe:
            self._last_probe = now
        changed = False
        for replica in self.replicas:
            changed |= self._step(replica, now, probe)
        if changed:
            self._write_targets()

    def _step(self, replica: Replica, now: float, probe: bool) -> bool:
        """Advance one replica; True when the targets file must be rewritten."""
        if replica.state is ReplicaState.BACKOFF:
            if replica.restart_at is not None and now >= replica.restart_at:
                replica.restarts += 1
                log.info("restarting %s (restart %d)", replica.spec.name, replica.restarts)
                replica.spawn(now)
            return False
        if replica.state not in (ReplicaState.STARTING, ReplicaState.AVAILABLE):
            return False
        code = replica.exit_code()
        starting = replica.state is ReplicaState.STARTING
        if code is None and starting and now - replica.started_at > self.settings.start_timeout_s:
            log.error("%s did not become AVAILABLE in time; killing it", replica.spec.name)
            replica.kill(signal.SIGKILL)
            code = replica.wait()
        if code is not None:
            return self._crashed(replica, code, now)
        if starting and probe and self._available(replica):
            replica.state = ReplicaState.AVAILABLE
            replica.available_at = now
            log.info(
                "%s is back on %s (pid %s)", replica.spec.name, replica.spec.rest_url, replica.pid
            )
            return True
        up_since = replica.available_at
        if replica.crashes_in_row and up_since is not None and now - up_since >= STABLE_AFTER_S:
            replica.crashes_in_row = 0
        return False

    def _crashed(self, replica: Replica, code: int, now: float) -> bool:
        name = replica.spec.name
        replica.last_exit = code
        replica.crashes_in_row += 1
        if replica.crashes_in_row > self.settings.max_restarts:
            replica.state = ReplicaState.FAILED
            log.error(
                "%s %s; giving up after %d restarts in a row. The other replicas keep serving. "
                "Last lines of %s:\n%s",
                name,
                _describe_exit(code),
                self.settings.max_restarts,
                replica.spec.log_path,
                replica.log_tail(),
            )
            return True  # drop it from the targets file
        delay = restart_delay(replica.crashes_in_row)
        replica.state = ReplicaState.BACKOFF
        replica.restart_at = now + delay
        log.warning(
            "%s %s; restarting in %g s on the same ports", name, _describe_exit(code), delay
        )
        return False

    # --- results and stop --------------------------------------------------------------------

    def targets(self) -> list[Target]:
        """Replicas that are serving or coming back; given-up ones are left out."""
        live = (ReplicaState.AVAILABLE, ReplicaState.STARTING, ReplicaState.BACKOFF)
        return [t for r in self.replicas if r.state in live for t in r.targets()]

    def _write_targets(self) -> None:
        assert self.plan is not None
        write_targets(
            self.plan.targets_path, self.targets(), simulated_gpus=self.plan.simulated_gpus
        )

    def stop(self, *, clean: bool = False) -> None:
        """Stop every replica (TERM, then KILL after the grace period) and remove what we made;
        the temporary log directory too if ``clean`` (a stop asked for, not a failure) and not
        ``keep_logs``, else say where the logs are kept.

        Safe to call more than once; the first call decides on the logs.
        """
        self._stop_replicas()
        if self._logs_settled or self.plan is None or not self.plan.own_log_dir:
            return
        self._logs_settled = True
        if clean and not self.settings.keep_logs:
            shutil.rmtree(self.plan.log_dir, ignore_errors=True)
        else:
            log.info("replica logs kept in %s", self.plan.log_dir)

    def _stop_replicas(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for replica in self.replicas:
            replica.kill(signal.SIGTERM)
        deadline = time.monotonic() + self.settings.stop_grace_s
        for replica in self.replicas:
            if replica.process is None:
                continue
            try:
                replica.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                grace = self.settings.stop_grace_s
                log.warning("%s did not stop within %g s; killing it", replica.spec.name, grace)
                replica.kill(signal.SIGKILL)
                replica.wait()
            replica.state = ReplicaState.STOPPED
            replica.close_log()
        if self.plan is not None:
            release_cgroups([s.cgroup for s in self.plan.specs if s.cgroup is not None])
            for root in {s.repository for s in self.plan.specs if s.repository is not None}:
                remove_repository(root)
            self.plan.targets_path.unlink(missing_ok=True)

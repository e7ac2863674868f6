"""Stop in order on SIGINT or SIGTERM: the one handler `pack`, `bench`, `profile` and
`size --verify` run their work under.

A signal sets a flag that the work polls (the supervisor a few times a second, the sweep
between and within measurements), so replicas, cgroups and load generators are stopped in
order, never half-way through a start. Both signals are handled alike: Ctrl-C in a terminal,
SIGTERM from a pod's kubelet or a script's ``kill``. The handler is installed over an inherited
SIG_IGN too (``sharedserve bench ... &`` from a script starts with SIGINT ignored), and the
previous handlers come back on exit.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType

__all__ = ["StopSignals", "StoppedBySignal"]

log = logging.getLogger(__name__)

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StoppedBySignal(Exception):
    """The work was stopped by a signal after cleaning up; the process should exit
    ``exit_code`` (128 + the signal, as a shell reports a process the signal killed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopSignals:
    """While entered, SIGINT and SIGTERM set a flag instead of interrupting; ``doing`` says in
    the log what a signal makes the work do (``"stopping every replica"``)."""

    def __init__(self, doing: str) -> None:
        self._doing = doing
        self._event = threading.Event()
        self._previous: dict[int, object] = {}
        self.signum: int | None = None
        """The first signal received; None while none was."""

    def __enter__(self) -> StopSignals:
        self._previous = {s: signal.signal(s, self._on_signal) for s in _SIGNALS}
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]  # what signal() returned

    def _on_signal(self, signum: int, _: FrameType | None) -> None:
        log.info("%s received; %s", signal.Signals(signum).name, self._doing)
        if self.signum is None:
            self.signum = signum
        self._event.set()

    def is_set(self) -> bool:
        """Whether a signal has asked the work to stop (a ``should_stop`` callable)."""
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking at once on a signal; whether one came."""
        return self._event.wait(timeout)

    def stopped(self) -> StoppedBySignal:
        """The exception to raise once the work has stopped (SIGINT when it was a
        KeyboardInterrupt raised before the handler was in place)."""
        return StoppedBySignal(signal.SIGINT if self.signum is None else self.signum)

"""``sharedserve pack`` in the foreground: start, supervise until a signal, clean up, exit 0."""

from __future__ import annotations

import logging

from rich.console import Console

from sharedserve.config import PackSettings
from sharedserve.pack.display import describe_plan, showing
from sharedserve.pack.replica import ReplicaState
from sharedserve.pack.stopping import StopSignals
from sharedserve.pack.supervisor import Pack, PackInterrupted

__all__ = ["run_pack"]

log = logging.getLogger(__name__)

_POLL_S = 0.2


def run_pack(settings: PackSettings, *, live: bool) -> int:
    """Run until SIGINT/SIGTERM; return the exit status (1 when every replica was given up).

    Errors before the replicas are up (ConfigError, a replica that cannot start) propagate after
    everything started has been stopped and removed.
    """
    with StopSignals("stopping every replica") as stop:
        pack = Pack(settings)
        console = Console()
        clean = False  # a stop asked for, after which the temporary logs go
        try:
            try:
                pack.start(should_stop=stop.is_set)
            except PackInterrupted:
                clean = True
                return 0
            for line in describe_plan(pack):
                console.print(line, highlight=False, soft_wrap=True)
            with showing(pack, console, live) as view:
                while not stop.wait(_POLL_S):
                    pack.poll()
                    view.refresh()
                    if all(r.state is ReplicaState.FAILED for r in pack.replicas):
                        log.error("every replica has been given up; stopping")
                        return 1
            clean = True
            return 0
        finally:
            pack.stop(clean=clean)

"""StopSignals: a real SIGTERM or SIGINT to this process sets the flag instead of interrupting,
and the handlers in place before come back."""

from __future__ import annotations

import os
import signal

import pytest

from sharedserve.pack.stopping import StoppedBySignal, StopSignals


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_sets_the_flag_and_names_the_exit(signum: signal.Signals) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with StopSignals("stopping the test") as stop:
        assert not stop.is_set() and stop.signum is None
        os.kill(os.getpid(), signum)
        assert stop.wait(5)  # delivered to the main thread, between bytecodes
        os.kill(os.getpid(), signal.SIGTERM)  # a second signal: the first is the one kept
        stopped = stop.stopped()
    assert stop.signum == signum
    assert isinstance(stopped, StoppedBySignal) and stopped.exit_code == 128 + signum
    assert {s: signal.getsignal(s) for s in before} == before


def test_without_a_signal_a_keyboard_interrupt_reads_as_sigint() -> None:
    with StopSignals("stopping the test") as stop:
        assert not stop.wait(0.01)
    assert stop.stopped().exit_code == 128 + signal.SIGINT

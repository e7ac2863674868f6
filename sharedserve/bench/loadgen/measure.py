"""The load generator's measurement windows: what each process records, and the master's loop.

Runs only in the load generator's process: it imports Locust's runners and gevent (``import
locust`` monkey-patches the whole interpreter), so ``loadgen.process`` is the one module that may
import it; ``.importlinter``'s Locust contract forbids it, even indirectly, to every other module
it lists. Kept apart from ``process`` so that the user classes and process roles there and the
window protocol here each read on their own.

Every process (master or worker) records the requests that complete inside the open window into
its ``RECORDER``. The master opens, rotates and closes windows on every process at once (its own
recorder directly, the workers' by a ``WINDOW`` message), collects each process's result of a
window, and stops once the windows agree (``bench.windows``) or the measurement's time is up.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
from locust.runners import MasterRunner, Runner

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.windows import COUNTS, merge_window, window_figures, windows_stable

__all__ = ["OURS", "RECORDER", "WINDOW", "Recorder", "measure_windows", "window_s"]

OURS = "sharedserve"  # marks request events the load generator fired (context key)
WINDOW = "ss_window"  # the message that opens, rotates or closes a window on a worker


class Recorder:
    """Counts and latencies of requests that complete inside the measured window."""

    def __init__(self) -> None:
        self.active = False
        self.targets: dict[str, dict[str, Any]] = {}
        self.setup_errors: list[str] = []
        """Users that could not start (target unreachable, bad metadata); kept across windows."""
        self._t0 = self._cpu0 = 0.0

    def open(self, names: list[str]) -> None:
        self.targets = {
            n: {**dict.fromkeys(COUNTS, 0), "histogram": LatencyHistogram()} for n in names
        }
        self._t0, self._cpu0 = time.monotonic(), time.process_time()
        self.active = True

    def close(self) -> dict[str, Any]:
        self.active = False
        wall = max(1e-9, time.monotonic() - self._t0)
        return {
            "setup_errors": self.setup_errors[:20],
            "cpu_util": (time.process_time() - self._cpu0) / wall,
            "targets": {
                name: {
                    **{k: v for k, v in t.items() if k != "histogram"},
                    "histogram": t["histogram"].to_dict(),
                }
                for name, t in self.targets.items()
            },
        }

    def rotate(self, names: list[str]) -> dict[str, Any]:
        """Close this window and open the next with no yield between: no request is lost."""
        result = self.close()
        self.open(names)
        return result

    def on_request(
        self, name: str, response_time: float, exception: Any = None, context: Any = None, **_: Any
    ) -> None:
        if not self.active or not isinstance(context, dict) or not context.get(OURS):
            return
        target = self.targets.get(name)
        if target is None:
            return
        target["requests"] += 1
        if context.get("late"):
            target["late"] += 1
        if exception is not None:
            target["errors"] += 1
        else:
            target["histogram"].record(max(0, round(response_time * 1000.0)))

    def drop(self, name: str) -> None:
        if self.active and name in self.targets:
            self.targets[name]["dropped"] += 1


RECORDER = Recorder()


def _window_action(
    runner: Runner, action: str, names: list[str], index: int, results: dict[int, list[Any]]
) -> None:
    """Open, rotate (close ``index - 1``, open ``index``) or close (``index``) on every process."""
    if isinstance(runner, MasterRunner):
        runner.send_message(WINDOW, {"action": action, "names": names, "index": index})
    elif action == "open":
        RECORDER.open(names)
    elif action == "rotate":
        results.setdefault(index - 1, []).append(RECORDER.rotate(names))
    else:
        results.setdefault(index, []).append(RECORDER.close())


def _parts(spec: dict[str, Any], results: dict[int, list[Any]], index: int) -> list[Any]:
    """Every process's result of window ``index``, waiting up to a minute for the workers'."""
    deadline = time.monotonic() + 60
    while len(results.get(index, [])) < max(1, spec["expect_workers"]):
        if time.monotonic() > deadline:
            break
        gevent.sleep(0.02)
    return results.get(index, [])


def window_s(spec: dict[str, Any]) -> float:
    """One measurement window's seconds: ``duration / stability_windows``. The open-loop
    schedule (``loadgen.schedule``) lines its blocks up with these windows, so both read it here."""
    return float(spec["duration_s"]) / int(spec["stability_windows"])


def measure_windows(
    runner: Runner, spec: dict[str, Any], results: dict[int, list[Any]]
) -> list[Any]:
    """Warm up, then measure window after window until the last ``stability_windows`` agree or
    ``max_duration_s`` is measured; returns the windows measured, merged, with wall-clock bounds.
    """
    gevent.sleep(spec["warmup_s"])
    names = [t["name"] for t in spec["targets"]]
    n = spec["stability_windows"]
    length = window_s(spec)
    most = max(n, int(spec["max_duration_s"] / length + 1e-6))
    windows: list[dict[str, Any]] = []
    began, start = time.monotonic(), time.time()
    _window_action(runner, "open", names, 0, results)
    for index in range(most):
        # Boundaries from the first start, so windows keep their length whatever the waits cost.
        gevent.sleep(max(0.0, began + (index + 1) * length - time.monotonic()))
        end = time.time()
        final = index + 1 == most
        if final:
            _window_action(runner, "close", names, index, results)
        else:
            _window_action(runner, "rotate", names, index + 1, results)
        window = merge_window(spec["targets"], _parts(spec, results, index))
        windows.append({**window, "start": start, "end": end})
        start = end
        if final or windows_stable([window_figures(w) for w in windows], n):
            if not final:  # the window just opened is not needed: close it, unread
                _window_action(runner, "close", names, index + 1, results)
            break
    return windows

"""The load generator: the only module that imports Locust, always run as its own process.

``import locust`` monkey-patches the whole interpreter with gevent, so the sweep never imports
this module; it runs ``python -m sharedserve.bench.loadgen master|worker ...`` and reads the
result file the master writes.

One run: the master (or a LocalRunner when no workers are asked for) hands the run spec to its
workers, starts one Locust user class per target (``fixed_count`` users each: the target's
``users``, 1 for sequential and poisson; a Poisson user sends at the target's ``rate``), lets
the warm-up pass, then measures in windows of equal length
(``duration / stability_windows`` seconds), every process closing one window and opening the
next at once. Each process records every request that completes inside a window from Locust's
request event into an HDR-style histogram (integer microseconds), and reports each window's
histograms, counts and its own CPU use to the master, which merges them. The master stops once
the last ``stability_windows`` windows agree (``sharedserve.bench.windows``) or ``max_duration``
seconds were measured, and the result's figures are those of the last ``stability_windows``
windows: ``duration`` seconds, as without windows. Locust's own statistics (rounded to ~2
significant digits) are not used.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import sys
import time
import zlib
from pathlib import Path
from typing import Any, ClassVar

import gevent
import gevent.pool
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import MasterRunner, Runner, WorkerRunner

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.senders import Sender
from sharedserve.bench.windows import (
    COUNTS,
    measurement_result,
    merge_window,
    window_figures,
    windows_stable,
)

__all__ = ["main"]

log = logging.getLogger("sharedserve.bench.loadgen")

_OURS = "sharedserve"  # marks request events this module fired (context key)
_NETWORK_TIMEOUT_S = 60.0
# An open-loop request sent later than this after its scheduled time counts as late: the load
# generator, not the server, added that much to its latency (and to the offered load's shape).
_LATE_S = 0.001


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
        if not self.active or not isinstance(context, dict) or not context.get(_OURS):
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


def _sender(target: dict[str, Any], spec: dict[str, Any], concurrency: int) -> Sender | None:
    try:
        return Sender(target, spec["protocol"], concurrency, spec["seed"], _NETWORK_TIMEOUT_S)
    except Exception as e:  # unreachable target, unusable metadata: this user cannot run
        RECORDER.setup_errors.append(f"{target['name']}: {type(e).__name__}: {e}")
        return None


def _fire(
    user: User,
    name: str,
    started: float,
    error: Exception | None,
    length: int,
    *,
    late: bool = False,
) -> None:
    user.environment.events.request.fire(
        request_type="predict",
        name=name,
        response_time=(time.perf_counter() - started) * 1000,
        response_length=length,
        exception=error,
        context={_OURS: True, "late": late},
        response=None,
        url=None,
        start_time=time.time(),
    )


class _ClosedLoop(User):
    """One request in flight per user, no think time (sequential and parallel)."""

    abstract = True
    wait_time = constant(0)
    target: ClassVar[dict[str, Any]] = {}
    spec: ClassVar[dict[str, Any]] = {}

    def on_start(self) -> None:
        self.sender = _sender(self.target, self.spec, 1)

    @task
    def predict(self) -> None:
        if self.sender is None:
            raise StopUser()  # could not start; already recorded as a setup error
        started = time.perf_counter()
        error, length = self.sender.send()
        _fire(self, self.target["name"], started, error, length)


# Open-loop arrivals come in blocks of a fixed count spread uniformly at random over the time
# that count takes at the rate: a Poisson process conditioned on its count in each block, which
# within a block is Poisson-timed still. Free-running exponential gaps give a count whose noise
# alone is 1/sqrt(rate * window): 10% at 1.5/s over 60 s, more than a plan's QPS may miss by.
# Blocks hold the count to within a block's edges (about sqrt(count / 2) requests per window).
_BLOCK_MIN = 8
_BLOCK_S = 2.0


def poisson_block(rng: random.Random, rate: float) -> list[float]:
    """The offsets of one block of arrivals at ``rate``/s, sorted; its length is
    ``len(offsets) / rate`` seconds."""
    count = max(_BLOCK_MIN, math.ceil(rate * _BLOCK_S))
    span = count / rate
    return sorted(rng.uniform(0.0, span) for _ in range(count))


class _Poisson(User):
    """Open loop: Poisson-timed arrivals at ``rate``/s, exact in count a block at a time
    (``poisson_block``), latency counted from the scheduled send time."""

    abstract = True
    wait_time = constant(0)
    target: ClassVar[dict[str, Any]] = {}
    spec: ClassVar[dict[str, Any]] = {}

    def on_start(self) -> None:
        bound = self.spec["max_in_flight"]
        self.sender = _sender(self.target, self.spec, bound)
        self.pool = gevent.pool.Pool(bound)
        self.rng = random.Random(self.spec["seed"] ^ zlib.crc32(self.target["name"].encode()))

    @task
    def drive(self) -> None:
        if self.sender is None:
            raise StopUser()
        sender, name, rate = self.sender, self.target["name"], self.target["rate"]
        block = time.perf_counter()
        while True:
            offsets = poisson_block(self.rng, rate)
            for offset in offsets:
                scheduled = block + offset
                delay = scheduled - time.perf_counter()
                if delay > 0:
                    gevent.sleep(delay)
                if self.pool.full():
                    RECORDER.drop(name)  # the bound on requests in flight: counted, never queued
                    continue
                self.pool.spawn(self._one, sender, name, scheduled)
            block += len(offsets) / rate

    def _one(self, sender: Sender, name: str, scheduled: float) -> None:
        # Late: the loop overslept or this greenlet waited for the CPU; the delay is in the
        # latency (counted from the schedule), and the row says how often it happened.
        late = time.perf_counter() - scheduled > _LATE_S
        error, length = sender.send()
        _fire(self, name, scheduled, error, length, late=late)


def user_classes(spec: dict[str, Any]) -> list[type[User]]:
    """One Locust user class per target, with its fixed user count."""
    base = _Poisson if spec["pattern"] == "poisson" else _ClosedLoop
    classes: list[type[User]] = []
    for i, target in enumerate(spec["targets"]):
        count = target["users"]
        attrs = {"target": target, "spec": spec, "fixed_count": count, "abstract": False}
        classes.append(type(f"Target{i}", (base,), attrs))
    return classes


# --- running a measurement -----------------------------------------------------------------------

_SPEC, _READY, _WINDOW, _RESULT = "ss_spec", "ss_ready", "ss_window", "ss_result"


def _attach(env: Environment) -> None:
    env.events.request.add_listener(RECORDER.on_request)


def _window_action(
    runner: Runner, action: str, names: list[str], index: int, results: dict[int, list[Any]]
) -> None:
    """Open, rotate (close ``index - 1``, open ``index``) or close (``index``) on every process."""
    if isinstance(runner, MasterRunner):
        runner.send_message(_WINDOW, {"action": action, "names": names, "index": index})
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


def _measure_windows(
    runner: Runner, spec: dict[str, Any], results: dict[int, list[Any]]
) -> list[Any]:
    """Warm up, then measure window after window until the last ``stability_windows`` agree or
    ``max_duration_s`` is measured; returns the windows measured, merged, with wall-clock bounds.
    """
    gevent.sleep(spec["warmup_s"])
    names = [t["name"] for t in spec["targets"]]
    n = spec["stability_windows"]
    length = spec["duration_s"] / n
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


def run_master(spec: dict[str, Any], result_path: Path, bind_host: str, bind_port: int) -> int:
    classes = user_classes(spec)
    env = Environment(user_classes=classes, events=events)
    _attach(env)
    results: dict[int, list[Any]] = {}
    workers = spec["expect_workers"]
    runner: Runner
    if workers == 0:
        runner = env.create_local_runner()
    else:
        master = env.create_master_runner(bind_host, bind_port)
        runner = master
        ready: set[str] = set()
        master.register_message(_READY, lambda msg, **_: ready.add(msg.node_id))
        master.register_message(
            _RESULT, lambda msg, **_: results.setdefault(msg.data["index"], []).append(msg.data)
        )
        deadline = time.monotonic() + spec["connect_timeout_s"]
        while master.worker_count < workers:
            if time.monotonic() > deadline:
                log.error("only %d of %d workers connected", master.worker_count, workers)
                master.quit()
                return 3
            gevent.sleep(0.1)
        master.send_message(_SPEC, spec)
        while len(ready) < workers:
            if time.monotonic() > deadline:
                log.error("only %d of %d workers are ready", len(ready), workers)
                master.quit()
                return 3
            gevent.sleep(0.05)
    users = sum(c.fixed_count for c in classes)
    runner.start(users, spawn_rate=max(1, users))
    windows = _measure_windows(runner, spec, results)
    runner.quit()
    result = measurement_result(spec, windows)
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(result_path)
    return 0 if result["processes"] == max(1, workers) else 4


def run_worker(master_host: str, master_port: int) -> int:
    env = Environment(user_classes=[], events=events)
    _attach(env)
    runner: WorkerRunner = env.create_worker_runner(master_host, master_port)

    def on_spec(msg: Any, **_: Any) -> None:
        # Worker user classes come from the master's spec, so a worker needs no flags but
        # the master's address (one worker Deployment serves any benchmark).
        env.user_classes[:] = user_classes(msg.data)
        runner.send_message(_READY, None)

    def on_window(msg: Any, **_: Any) -> None:
        action, names, index = msg.data["action"], msg.data["names"], msg.data["index"]
        if action == "open":
            RECORDER.open(names)
        elif action == "rotate":  # closes window index - 1
            runner.send_message(_RESULT, {"index": index - 1, **RECORDER.rotate(names)})
        else:
            runner.send_message(_RESULT, {"index": index, **RECORDER.close()})

    runner.register_message(_SPEC, on_spec)
    runner.register_message(_WINDOW, on_window)
    runner.greenlet.join()
    return 0


def _address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sharedserve.bench.loadgen")
    sub = parser.add_subparsers(dest="role", required=True)
    master = sub.add_parser("master", help="run one measurement and write its result")
    master.add_argument("--spec", type=Path, required=True)
    master.add_argument("--result", type=Path, required=True)
    master.add_argument("--bind", type=_address, default=("*", 5557))
    worker = sub.add_parser("worker", help="run users for a master")
    worker.add_argument("--master", type=_address, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.role == "worker":
        return run_worker(*args.master)
    spec = json.loads(args.spec.read_text())
    return run_master(spec, args.result, *args.bind)


if __name__ == "__main__":
    sys.exit(main())

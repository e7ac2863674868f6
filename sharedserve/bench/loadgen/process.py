"""The load generator: the only module that imports Locust, always run as its own process.

``import locust`` monkey-patches the whole interpreter with gevent, so the sweep never imports
this module; it runs ``python -m sharedserve.bench.loadgen master|worker ...`` and reads the
result file the master writes. ``senders`` and ``measure`` import gevent or Locust too and
are imported by this module alone: they run in its process.

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
import random
import time
import zlib
from pathlib import Path
from typing import Any, ClassVar

import gevent
import gevent.monkey
import gevent.pool
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import Runner, WorkerRunner

from sharedserve.bench.loadgen.measure import OURS, RECORDER, WINDOW, measure_windows, window_s
from sharedserve.bench.loadgen.schedule import arrivals
from sharedserve.bench.loadgen.senders import Sender
from sharedserve.bench.windows import measurement_result

__all__ = ["main"]

log = logging.getLogger("sharedserve.bench.loadgen")

_NETWORK_TIMEOUT_S = 60.0
# An open-loop request sent later than this after its scheduled time counts as late: the load
# generator, not the server, added that much to its latency (and to the offered load's shape).
_LATE_S = 0.001
# gevent's loop (libev over epoll) wakes a sleeper in whole milliseconds, rounded up and at
# least one: a Poisson schedule slept on it alone sent a quarter of its requests over 1 ms late,
# with the load generator idle on a CPU of its own. So the loop sleeps to within _COARSE_S of the
# send time, and a real thread (time.sleep: nanosecond timers) sleeps the rest, waking this
# greenlet through the loop's thread-safe wake-up; a tenth of a millisecond late, typically.
_COARSE_S = 0.005
_REAL_SLEEP = gevent.monkey.get_original("time", "sleep")


def _sleep_until(when: float) -> None:
    """Return at ``time.perf_counter()`` ``when`` (not before), to a fraction of a millisecond."""
    delay = when - time.perf_counter()
    if delay > _COARSE_S:
        gevent.sleep(delay - _COARSE_S)
        delay = when - time.perf_counter()
    if delay > 0:
        gevent.get_hub().threadpool.spawn(_REAL_SLEEP, delay).get()


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
        context={OURS: True, "late": late},
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


class _Poisson(User):
    """Open loop: Poisson-timed arrivals at ``rate``/s, exact in count a block at a time and
    lined up with the measurement windows (``schedule.arrivals``), latency counted from the
    scheduled send time."""

    abstract = True
    wait_time = constant(0)
    target: ClassVar[dict[str, Any]] = {}
    spec: ClassVar[dict[str, Any]] = {}
    users: ClassVar[int] = 0
    """Poisson users started in this process."""

    def on_start(self) -> None:
        # One real thread at a time per user sleeps its last milliseconds (``_sleep_until``):
        # room for every user, or one would wait for another's thread and send late.
        threads = gevent.get_hub().threadpool
        _Poisson.users += 1
        threads.maxsize = max(threads.maxsize, _Poisson.users)
        bound = self.spec["max_in_flight"]
        self.sender = _sender(self.target, self.spec, bound)
        self.pool = gevent.pool.Pool(bound)
        self.rng = random.Random(self.spec["seed"] ^ zlib.crc32(self.target["name"].encode()))

    @task
    def drive(self) -> None:
        if self.sender is None:
            raise StopUser()
        sender, name, spec = self.sender, self.target["name"], self.spec
        # The master opens the first window a warm-up after it started the users: from here, a
        # few milliseconds earlier (a user starts after its sender is ready), which moves that
        # many milliseconds' requests from one window to the next and leaves counts whole.
        start = time.perf_counter()
        for offset in arrivals(self.rng, self.target["rate"], window_s(spec), spec["warmup_s"]):
            scheduled = start + offset
            _sleep_until(scheduled)
            if self.pool.full():
                RECORDER.drop(name)  # the bound on requests in flight: counted, never queued
                continue
            self.pool.spawn(self._one, sender, name, scheduled)

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

_SPEC, _READY, _RESULT = "ss_spec", "ss_ready", "ss_result"


def _attach(env: Environment) -> None:
    env.events.request.add_listener(RECORDER.on_request)


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
    windows = measure_windows(runner, spec, results)
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
    runner.register_message(WINDOW, on_window)
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

"""The load generator: the only module that imports Locust, always run as its own process.

``import locust`` monkey-patches the whole interpreter with gevent, so the sweep never imports
this module; it runs ``python -m sharedserve.bench.loadgen master|worker ...`` and reads the
result file the master writes.

One run: the master (or a LocalRunner when no workers are asked for) hands the run spec to its
workers, starts one Locust user class per target (``fixed_count`` users each: 1 for sequential
and poisson, K for parallel), lets the warm-up pass, then opens the measured window on every
process at once and closes it ``duration`` seconds later. Each process records every request
that completes inside the window from Locust's request event into an HDR-style histogram
(integer microseconds), and reports its histograms, counts and its own CPU use to the master,
which merges them into the result. Locust's own statistics (rounded to ~2 significant digits)
are not used.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
import zlib
from pathlib import Path
from typing import Any, ClassVar

import gevent
import gevent.pool
from geventhttpclient import HTTPClient
from geventhttpclient.url import URL
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import MasterRunner, Runner, WorkerRunner

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.payload import random_inputs, rest_body, signature_inputs

__all__ = ["main"]

log = logging.getLogger("sharedserve.bench.loadgen")

_OURS = "sharedserve"  # marks request events this module fired (context key)
_NETWORK_TIMEOUT_S = 60.0


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
            n: {"requests": 0, "errors": 0, "dropped": 0, "histogram": LatencyHistogram()}
            for n in names
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

    def on_request(
        self, name: str, response_time: float, exception: Any = None, context: Any = None, **_: Any
    ) -> None:
        if not self.active or not isinstance(context, dict) or not context.get(_OURS):
            return
        target = self.targets.get(name)
        if target is None:
            return
        target["requests"] += 1
        if exception is not None:
            target["errors"] += 1
        else:
            target["histogram"].record(max(0, round(response_time * 1000.0)))

    def drop(self, name: str) -> None:
        if self.active and name in self.targets:
            self.targets[name]["dropped"] += 1


RECORDER = Recorder()


class _Sender:
    """Sends a target's prepared request; returns None on success or the error."""

    def __init__(self, target: dict[str, Any], protocol: str, concurrency: int, seed: int) -> None:
        self.name = target["name"]
        metadata_client = HTTPClient.from_url(URL(target["rest"]), network_timeout=30)
        try:
            response = metadata_client.get(f"/v1/models/{target['model']}/metadata")
            metadata = json.loads(response.read())
        finally:
            metadata_client.close()
        arrays = random_inputs(signature_inputs(metadata), seed)
        self.protocol = protocol
        if protocol == "grpc":
            self._init_grpc(target, arrays)
        else:
            self._path = f"/v1/models/{target['model']}:predict"
            self._body = rest_body(arrays)
            self._http = HTTPClient.from_url(
                URL(target["rest"]),
                concurrency=concurrency,
                network_timeout=_NETWORK_TIMEOUT_S,
                connection_timeout=_NETWORK_TIMEOUT_S,
            )

    def _init_grpc(self, target: dict[str, Any], arrays: dict[str, Any]) -> None:
        import grpc
        import grpc.experimental.gevent

        # gRPC's own threads would block gevent's loop; this makes its I/O cooperative.
        grpc.experimental.gevent.init_gevent()
        from sharedserve.server.api import PREDICT_METHOD
        from sharedserve.server.api import tf_serving_pb2 as pb
        from sharedserve.server.tensor_proto import to_tensor_proto

        request = pb.PredictRequest()
        request.model_spec.name = target["model"]
        for name, array in arrays.items():
            to_tensor_proto(array, request.inputs[name])
        self._request = request
        channel = grpc.insecure_channel(target["grpc"])
        self._predict = channel.unary_unary(
            PREDICT_METHOD,
            request_serializer=pb.PredictRequest.SerializeToString,
            response_deserializer=pb.PredictResponse.FromString,
        )

    def send(self) -> tuple[Exception | None, int]:
        try:
            if self.protocol == "grpc":
                reply = self._predict(self._request, timeout=_NETWORK_TIMEOUT_S)
                return None, reply.ByteSize()
            response = self._http.post(self._path, self._body, {"Content-Type": "application/json"})
            body = response.read()
            if response.status_code != 200:
                return RuntimeError(f"HTTP {response.status_code}: {body[:200]!r}"), len(body)
            return None, len(body)
        except Exception as e:  # any transport failure is an error of this request, not ours
            return e, 0


def _sender(target: dict[str, Any], spec: dict[str, Any], concurrency: int) -> _Sender | None:
    try:
        return _Sender(target, spec["protocol"], concurrency, spec["seed"])
    except Exception as e:  # unreachable target, unusable metadata: this user cannot run
        RECORDER.setup_errors.append(f"{target['name']}: {type(e).__name__}: {e}")
        return None


def _fire(user: User, name: str, started: float, error: Exception | None, length: int) -> None:
    user.environment.events.request.fire(
        request_type="predict",
        name=name,
        response_time=(time.perf_counter() - started) * 1000,
        response_length=length,
        exception=error,
        context={_OURS: True},
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
    """Open loop: exponential gaps at ``rate``/s, latency counted from the scheduled send time."""

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
        sender, name, rate = self.sender, self.target["name"], self.spec["rate"]
        scheduled = time.perf_counter()
        while True:
            scheduled += self.rng.expovariate(rate)
            delay = scheduled - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)
            if self.pool.full():
                RECORDER.drop(name)  # the bound on requests in flight: counted, never queued
                continue
            self.pool.spawn(self._one, sender, name, scheduled)

    def _one(self, sender: _Sender, name: str, scheduled: float) -> None:
        error, length = sender.send()
        _fire(self, name, scheduled, error, length)


def user_classes(spec: dict[str, Any]) -> list[type[User]]:
    """One Locust user class per target, with its fixed user count."""
    base = _Poisson if spec["pattern"] == "poisson" else _ClosedLoop
    count = spec["concurrency"] if spec["pattern"] == "parallel" else 1
    classes: list[type[User]] = []
    for i, target in enumerate(spec["targets"]):
        attrs = {"target": target, "spec": spec, "fixed_count": count, "abstract": False}
        classes.append(type(f"Target{i}", (base,), attrs))
    return classes


# --- running a measurement -----------------------------------------------------------------------

_SPEC, _READY, _WINDOW, _RESULT = "ss_spec", "ss_ready", "ss_window", "ss_result"


def _attach(env: Environment) -> None:
    env.events.request.add_listener(RECORDER.on_request)


def _window(runner: Runner, spec: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """Warm up, then measure; returns the window's wall-clock bounds."""
    gevent.sleep(spec["warmup_s"])
    names = [t["name"] for t in spec["targets"]]
    start = time.time()
    if isinstance(runner, MasterRunner):
        runner.send_message(_WINDOW, {"action": "open", "names": names})
    else:
        RECORDER.open(names)
    gevent.sleep(spec["duration_s"])
    end = time.time()
    if isinstance(runner, MasterRunner):
        runner.send_message(_WINDOW, {"action": "close"})
        deadline = time.monotonic() + 60
        while len(results) < spec["expect_workers"] and time.monotonic() < deadline:
            gevent.sleep(0.05)
    else:
        results.append(RECORDER.close())
    return {"start": start, "end": end}


def _merge(
    spec: dict[str, Any], results: list[dict[str, Any]], window: dict[str, Any]
) -> dict[str, Any]:
    targets: dict[str, dict[str, Any]] = {}
    for target in spec["targets"]:
        merged = {"requests": 0, "errors": 0, "dropped": 0}
        histogram = LatencyHistogram()
        for result in results:
            part = result["targets"].get(target["name"])
            if part is None:
                continue
            for key in merged:
                merged[key] += part[key]
            histogram.merge(LatencyHistogram.from_dict(part["histogram"]))
        targets[target["name"]] = {**merged, "histogram": histogram.to_dict()}
    cpu = [r["cpu_util"] for r in results]
    return {
        "setup_errors": [e for r in results for e in r.get("setup_errors", [])],
        "window": window,
        "processes": len(results),
        "workers_expected": spec["expect_workers"],
        "loadgen_cpu_util": max(cpu) if cpu else None,
        "targets": targets,
    }


def run_master(spec: dict[str, Any], result_path: Path, bind_host: str, bind_port: int) -> int:
    classes = user_classes(spec)
    env = Environment(user_classes=classes, events=events)
    _attach(env)
    results: list[dict[str, Any]] = []
    workers = spec["expect_workers"]
    runner: Runner
    if workers == 0:
        runner = env.create_local_runner()
    else:
        master = env.create_master_runner(bind_host, bind_port)
        runner = master
        ready: set[str] = set()
        master.register_message(_READY, lambda msg, **_: ready.add(msg.node_id))
        master.register_message(_RESULT, lambda msg, **_: results.append(msg.data))
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
    window = _window(runner, spec, results)
    runner.quit()
    result = _merge(spec, results, window)
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(result_path)
    return 0 if len(results) == max(1, workers) else 4


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
        if msg.data["action"] == "open":
            RECORDER.open(msg.data["names"])
        else:
            runner.send_message(_RESULT, RECORDER.close())

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

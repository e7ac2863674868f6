"""Isolation between models in one server process: what sharing a process costs a light model
beside a saturating one.

``--part isolation`` (the default) is the isolation benchmark below. ``--part memory`` is host
memory per added model, N models in one process against N processes (``multimodel_memory.py``,
beside this script, whose docstring says how; its options ``--models``, ``--counts``,
``--predictions``, ``--start-batch`` and ``--max-gib`` apply). Paging is measured by
``benchmarks/multimodel_paging.py`` (a repository 10x its memory cap, Zipf-like requests).

A ``victim`` model at a steady light load (``--victim-rps``, open loop: each request is sent at
its scheduled time by one of a few client threads, and its latency counts from that time, so a
late send is not hidden) while an ``aggressor`` model is driven past saturation (``--aggressor
-clients`` closed-loop clients in a process of their own). Both are TensorFlow ``tiny``, built
by ``sharedserve models build``, served over TF Serving's REST API, batching off. Three cases:

* ``alone``: the victim in its own ``sharedserve serve``, no aggressor (the floor);
* ``one process``: both models in one ``serve --model-config-file`` process, where the shared
  scheduler's fair turns are all that keeps the aggressor's backlog off the victim;
* ``two processes``: each model in its own ``serve`` process, where the OS scheduler shares the
  CPU between them.

Every server is pinned with ``taskset`` to the same ``--server-cpus`` and given
``--cpu-limit`` of their count (same thread pools in every case); the clients run on the other
CPUs. The target: the victim's p99 in one process at most 1.25x its p99 in two, so that a light
model loses little by sharing a process with a busy one.
p50/p99 are numpy's exact percentiles. Prints a Markdown report; ``--out`` writes it too.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import multimodel_memory  # benchmarks/multimodel_memory.py, beside this script
import numpy as np
from machine import heading, publish  # benchmarks/machine.py, beside this script

from sharedserve.pack.probe import free_port

SHAREDSERVE = [sys.executable, "-m", "sharedserve"]
PACKAGES = ("sharedserve", "tensorflow", "numpy")
BODY = json.dumps({"instances": [[0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0]]}).encode()


def _get(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    except OSError:
        return b""
    finally:
        conn.close()


@contextmanager
def serving(args: list[str], names: list[str], cpus: str, log: Path) -> Iterator[int]:
    """A ``sharedserve serve`` pinned to ``cpus``; yields its REST port once ``names`` are up."""
    rest = free_port()
    cores = str(len(cpus.split(",")))
    cmd = ["taskset", "-c", cpus, *SHAREDSERVE, "serve", *args, "--cpu-limit", cores]
    cmd += ["--host", "127.0.0.1", "--rest-port", str(rest), "--grpc-port", str(free_port())]
    with log.open("ab") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not all(b'"AVAILABLE"' in _get(rest, f"/v1/models/{n}") for n in names):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not become AVAILABLE; see {log}")
            time.sleep(0.2)
        yield rest
    finally:
        proc.terminate()
        proc.wait(60)


def _post(conn: http.client.HTTPConnection, name: str) -> None:
    conn.request("POST", f"/v1/models/{name}:predict", BODY, {"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    if response.status != 200:
        raise RuntimeError(f"{name}: HTTP {response.status}")


def drive(port: int, name: str, clients: int, seconds: float) -> None:
    """The aggressor's load (run in its own process): closed loop, as fast as answered."""
    stop = time.monotonic() + seconds
    done = [0] * clients

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.monotonic() < stop:
            _post(conn, name)
            done[i] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"requests": sum(done), "seconds": seconds}))


def victim_load(port: int, rps: float, warmup: float, seconds: float) -> np.ndarray:
    """Open loop at ``rps``: latencies (s) of the requests scheduled after ``warmup``."""
    start = time.monotonic() + 0.2
    total = int((warmup + seconds) * rps)
    senders = 4
    latencies: list[list[float]] = [[] for _ in range(senders)]

    def sender(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for i in range(k, total, senders):
            due = start + i / rps
            time.sleep(max(0.0, due - time.monotonic()))
            _post(conn, "victim")
            if i / rps >= warmup:
                latencies[k].append(time.monotonic() - due)

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return np.asarray([x for each in latencies for x in each])


Sample = tuple[np.ndarray, float | None]
"""A case's victim latencies (s) in one round, and the aggressor's QPS meanwhile (None: none)."""


def measure(port: int, aggressor_port: int | None, opts: argparse.Namespace) -> Sample:
    aggressor = None
    span = opts.warmup + opts.seconds
    if aggressor_port is not None:
        cmd = [sys.executable, __file__, "--drive", str(aggressor_port)]
        cmd += ["--aggressor-clients", str(opts.aggressor_clients), "--seconds", str(span + 1)]
        aggressor = subprocess.Popen(
            ["taskset", "-c", opts.client_cpus, *cmd], stdout=subprocess.PIPE, text=True
        )
        time.sleep(0.5)
    latencies = victim_load(port, opts.victim_rps, opts.warmup, opts.seconds)
    if aggressor is None:
        return latencies, None
    out, _ = aggressor.communicate(timeout=span + 120)
    figures = json.loads(out.strip().splitlines()[-1])
    return latencies, figures["requests"] / figures["seconds"]


def run_cases(work: Path, opts: argparse.Namespace) -> dict[str, list[Sample]]:
    """Every server started once and left up (an idle one costs nothing); then ``--rounds``
    rounds of the three cases in turn, so that a shared machine's drift lands on each alike."""
    models = work / "models"
    build = [*SHAREDSERVE, "models", "build", "tiny", "--out", str(models)]
    subprocess.run(build, check=True, stdout=subprocess.DEVNULL)
    tiny, log, cpus = models / "tiny", work / "serve.log", opts.server_cpus
    config = work / "models.config"
    config.write_text(
        "model_config_list {\n"
        f"  config {{ name: 'victim' base_path: '{tiny}' model_platform: 'tensorflow' }}\n"
        f"  config {{ name: 'aggressor' base_path: '{tiny}' model_platform: 'tensorflow' }}\n"
        "}\n"
    )
    cases: dict[str, list[Sample]] = {"alone": [], "one process": [], "two processes": []}
    with ExitStack() as stack:
        both = ["--model-config-file", str(config)]
        one = stack.enter_context(serving(both, ["victim", "aggressor"], cpus, log))
        alone = ["--model", str(tiny), "--name", "victim"]
        victim = stack.enter_context(serving(alone, ["victim"], cpus, log))
        other = ["--model", str(tiny), "--name", "aggressor"]
        aggressor = stack.enter_context(serving(other, ["aggressor"], cpus, log))
        for _ in range(opts.rounds):
            cases["alone"].append(measure(victim, None, opts))
            cases["one process"].append(measure(one, one, opts))
            cases["two processes"].append(measure(victim, aggressor, opts))
    return cases


def _p(latencies: np.ndarray, q: float) -> float:
    return float(np.percentile(latencies, q) * 1000)


def report(cases: dict[str, list[Sample]], opts: argparse.Namespace, head: list[str]) -> str:
    lines = [*head]
    lines += [
        "",
        f"Servers pinned to CPUs {opts.server_cpus} (`--cpu-limit` of their count), clients to "
        f"{opts.client_cpus}. Victim: `tiny` at {opts.victim_rps:g} requests/s, open loop; "
        f"aggressor: `tiny`, {opts.aggressor_clients} closed-loop clients; {opts.warmup:g} s "
        f"warm-up, then {opts.seconds:g} s measured, {opts.rounds} rounds of the three cases in "
        "turn. TF Serving REST, batching off. Percentiles over every round's requests.",
        "",
        "| case | victim p50 ms | victim p99 ms | victim p99 per round ms | victim requests "
        "| aggressor QPS |",
        "|---|---|---|---|---|---|",
    ]
    for name, samples in cases.items():
        every = np.concatenate([latencies for latencies, _ in samples])
        rounds = ", ".join(f"{_p(latencies, 99):.1f}" for latencies, _ in samples)
        qps = [q for _, q in samples if q is not None]
        shown = f"{np.mean(qps):.0f}" if qps else "-"
        lines.append(
            f"| {name} | {_p(every, 50):.1f} | {_p(every, 99):.1f} | {rounds} | {every.size} "
            f"| {shown} |"
        )
    one = np.concatenate([x for x, _ in cases["one process"]])
    two = np.concatenate([x for x, _ in cases["two processes"]])
    ratio = _p(one, 99) / _p(two, 99)
    verdict = "met" if ratio <= 1.25 else "NOT met"
    lines += [
        "",
        f"Victim p99, one process / two processes: {ratio:.2f}x (target <= 1.25x: {verdict}).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drive", type=int, help=argparse.SUPPRESS)  # the aggressor's process
    parser.add_argument("--part", choices=("isolation", "memory"), default="isolation")
    parser.add_argument("--server-cpus", default="0", help="taskset list for every server")
    parser.add_argument("--client-cpus", default=None, help="taskset list for the clients")
    parser.add_argument("--victim-rps", type=float, default=20.0)
    parser.add_argument("--aggressor-clients", type=int, default=16)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    multimodel_memory.add_arguments(parser)
    opts = parser.parse_args()
    if opts.part == "memory":
        multimodel_memory.measure(opts)
        return
    if opts.drive is not None:
        drive(opts.drive, "aggressor", opts.aggressor_clients, opts.seconds)
        return
    # The heading before this process pins itself to the client CPUs: it counts usable CPUs.
    head = heading("Isolation between models: one process against two", PACKAGES)
    servers = {int(c) for c in opts.server_cpus.split(",")}
    others = sorted(os.sched_getaffinity(0) - servers) or sorted(servers)
    opts.client_cpus = opts.client_cpus or ",".join(map(str, others))
    os.sched_setaffinity(0, {int(c) for c in opts.client_cpus.split(",")})
    with tempfile.TemporaryDirectory(prefix="multimodel-") as tmp:
        cases = run_cases(Path(tmp), opts)
    publish(report(cases, opts, head), opts.out)


if __name__ == "__main__":
    main()

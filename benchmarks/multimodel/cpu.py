"""Isolation between models in one server process: what sharing a process costs a light model
beside a saturating one.

``--part isolation`` (the default) is the isolation benchmark below. ``--part memory`` is host
memory per added model, N models in one process against N processes (``memory.py``,
beside this script, whose docstring says how; its options ``--models``, ``--counts``,
``--predictions``, ``--start-batch`` and ``--max-gib`` apply). Paging is measured by
``benchmarks/multimodel/paging.py`` (a repository 10x its memory cap, Zipf-like requests).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# benchmarks/, for machine.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aggressors  # beside this script
import memory  # beside this script
from aggressors import CASES, Case, drive
from machine import heading, publish

from sharedserve.pack.probe import free_port, get_json, model_state

SHAREDSERVE = [sys.executable, "-m", "sharedserve"]
PACKAGES = ("sharedserve", "tensorflow", "torch", "numpy")
BODY = json.dumps({"instances": [[0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0]]}).encode()


@contextmanager
def serving(args: list[str], names: list[str], cpus: str, log: Path) -> Iterator[tuple[int, int]]:
    """A ``sharedserve serve`` pinned to ``cpus``; yields its REST and gRPC ports once ``names``
    are up."""
    rest, grpc_port = free_port(), free_port()
    cores = str(len(cpus.split(",")))
    cmd = ["taskset", "-c", cpus, *SHAREDSERVE, "serve", *args, "--cpu-limit", cores]
    cmd += ["--host", "127.0.0.1", "--rest-port", str(rest), "--grpc-port", str(grpc_port)]
    with log.open("ab") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        url = f"http://127.0.0.1:{rest}"
        while not all(model_state(url, n, timeout=10) == "AVAILABLE" for n in names):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not become AVAILABLE; see {log}")
            time.sleep(0.2)
        yield rest, grpc_port
    finally:
        proc.terminate()
        proc.wait(60)


def _post(conn: http.client.HTTPConnection, name: str) -> None:
    conn.request("POST", f"/v1/models/{name}:predict", BODY, {"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    if response.status != 200:
        raise RuntimeError(f"{name}: HTTP {response.status}")


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
"""A case's victim latencies (s) in one round, and the aggressor's answers/s meanwhile."""


@dataclass
class Measured:
    case: Case
    one: list[Sample] = field(default_factory=list)
    two: list[Sample] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    """Aggressor requests not answered 200, per round, one process then two."""
    timings: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Paging cases: the servers' load and page-in times (``/limits``), by layout."""


def measure(
    port: int, target: tuple[int, int, list[str]] | None, case: Case | None, opts: Any
) -> tuple[Sample, int]:
    """One round: the victim's open loop on ``port`` while ``case``'s aggressor drives
    ``target`` (REST port, gRPC port, models); -> the sample and the aggressor's failures."""
    aggressor = None
    span = opts.warmup + opts.seconds
    if target is not None and case is not None:
        rest, grpc_port, names = target
        cmd = [sys.executable, __file__, "--drive", case.name, "--ports", f"{rest},{grpc_port}"]
        cmd += ["--names", ",".join(names), "--seconds", str(span + 1)]
        aggressor = subprocess.Popen(
            ["taskset", "-c", opts.client_cpus, *cmd], stdout=subprocess.PIPE, text=True
        )
        time.sleep(0.5)
    latencies = victim_load(port, opts.victim_rps, opts.warmup, opts.seconds)
    if aggressor is None:
        return (latencies, None), 0
    out, _ = aggressor.communicate(timeout=span + 600)
    figures = json.loads(out.strip().splitlines()[-1])
    return (latencies, figures["requests"] / figures["seconds"]), figures["failed"]


def _timings(port: int) -> dict[str, Any]:
    limits = get_json(f"http://127.0.0.1:{port}", "/sharedserve/v1/limits", timeout=10) or {}
    return dict(limits.get("memory", {}).get("timings", {}))


def run_cases(work: Path, opts: argparse.Namespace) -> tuple[list[Sample], list[Measured]]:
    """The victim's own server started once and left up (idle, it costs nothing); the alone
    case first, then per case its two servers and ``--rounds`` rounds of one process and two
    processes in turn, so that a shared machine's drift lands on each alike."""
    tiny = aggressors.build(work, "tiny", "tf")
    log, cpus = work / "serve.log", opts.server_cpus
    alone: list[Sample] = []
    results: list[Measured] = []
    with serving(["--model", str(tiny), "--name", "victim"], ["victim"], cpus, log) as victim:
        for _ in range(opts.rounds):
            alone.append(measure(victim[0], None, None, opts)[0])
        for name in opts.cases:
            case = CASES[name]
            plan = aggressors.layout(case, work, tiny, log)
            measured = Measured(case)
            with ExitStack() as stack:
                one = stack.enter_context(serving(plan.shared, ["victim", *plan.names], cpus, log))
                other = stack.enter_context(serving(plan.alone, plan.names, cpus, log))
                for _ in range(opts.rounds):
                    sample, failed = measure(one[0], (*one, plan.names), case, opts)
                    measured.one.append(sample)
                    measured.failed.append(failed)
                    sample, failed = measure(victim[0], (*other, plan.names), case, opts)
                    measured.two.append(sample)
                    measured.failed.append(failed)
                if case.kind == "paging":
                    measured.timings = {"one": _timings(one[0]), "two": _timings(other[0])}
            results.append(measured)
            print(f"{case.name}: done", file=sys.stderr)
    return alone, results


def _p(latencies: np.ndarray, q: float) -> float:
    return float(np.percentile(latencies, q) * 1000)


def _median(values: list[float]) -> float:
    return float(np.median(values))


def _page_ins(measured: Measured) -> list[str]:
    lines = []
    for layout, timings in measured.timings.items():
        parts = [
            f"{kind} {t['count']}x, p50 {t['p50_s'] * 1000:.0f} / p99 {t['p99_s'] * 1000:.0f} ms"
            for kind, t in timings.items()
        ]
        where = "one process" if layout == "one" else "two processes (the aggressor's)"
        lines.append(f"- {measured.case.label}, {where}: {'; '.join(parts) or 'none'}")
    return lines


def report(alone: list[Sample], results: list[Measured], opts: Any, head: list[str]) -> str:
    lines = [*head]
    lines += [
        "",
        f"Servers pinned to CPUs {opts.server_cpus} (`--cpu-limit` of their count), clients to "
        f"{opts.client_cpus}. Victim: `tiny` (TensorFlow) at {opts.victim_rps:g} requests/s, "
        f"open loop, TF Serving REST; {opts.warmup:g} s warm-up, then {opts.seconds:g} s "
        f"measured; {opts.rounds} rounds per case of one process and two processes in turn. "
        "Batching off. Each figure is the median of the rounds' figures (exact percentiles per "
        "round); the rounds' own figures follow in brackets. Aggressor throughput: its requests "
        "answered 200 per second (load/unload: cycles per second).",
        "",
        f"Victim alone (no aggressor): p50 {_median([_p(x, 50) for x, _ in alone]):.1f} ms, "
        f"p99 {_median([_p(x, 99) for x, _ in alone]):.1f} ms "
        f"[{', '.join(f'{_p(x, 99):.1f}' for x, _ in alone)}].",
        "",
        "| aggressor | victim p99 ms, one process | two processes | ratio (<= 1.25) "
        "| aggressor /s, one process | two processes | ratio (>= 0.9) | aggressor failures |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in results:
        p99 = [[_p(x, 99) for x, _ in samples] for samples in (m.one, m.two)]
        qps = [[q or 0.0 for _, q in samples] for samples in (m.one, m.two)]
        latency = _median(p99[0]) / _median(p99[1])
        rate = _median(qps[0]) / _median(qps[1]) if _median(qps[1]) else float("nan")

        def shown(values: list[float], digits: int) -> str:
            return f"{_median(values):.{digits}f} [{', '.join(f'{v:.{digits}f}' for v in values)}]"

        digits = 2 if m.case.kind in ("paging", "churn") else 1
        lines.append(
            f"| {m.case.label} | {shown(p99[0], 1)} | {shown(p99[1], 1)} "
            f"| {latency:.2f}x{'' if latency <= 1.25 else ' (NOT met)'} "
            f"| {shown(qps[0], digits)} | {shown(qps[1], digits)} "
            f"| {rate:.2f}x{'' if rate >= 0.9 else ' (NOT met)'} | {sum(m.failed)} |"
        )
    paging = [line for m in results for line in _page_ins(m)]
    if paging:
        lines += [
            "",
            "Loads from disk (at start) and page-ins during the paging cases, the servers' own "
            "exact figures (`memory.timings` of `/sharedserve/v1/limits`):",
            "",
            *paging,
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drive", choices=sorted(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)  # the drive's REST,gRPC
    parser.add_argument("--names", help=argparse.SUPPRESS)  # the drive's models
    parser.add_argument("--part", choices=("isolation", "memory"), default="isolation")
    parser.add_argument(
        "--cases",
        default=",".join(c for c in CASES if c != "tiny-16"),
        help=f"comma-separated, of: {', '.join(CASES)}",
    )
    parser.add_argument("--server-cpus", default="0", help="taskset list for every server")
    parser.add_argument("--client-cpus", default=None, help="taskset list for the clients")
    parser.add_argument("--victim-rps", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    memory.add_arguments(parser)
    opts = parser.parse_args()
    if opts.part == "memory":
        memory.measure(opts)
        return
    if opts.drive is not None:
        rest, grpc_port = map(int, opts.ports.split(","))
        drive(CASES[opts.drive], rest, grpc_port, opts.names.split(","), opts.seconds)
        return
    opts.cases = opts.cases.split(",")
    unknown = sorted(set(opts.cases) - CASES.keys())
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {', '.join(CASES)}")
    # The heading before this process pins itself to the client CPUs: it counts usable CPUs.
    head = heading("Isolation between models: one process against two", PACKAGES)
    servers = {int(c) for c in opts.server_cpus.split(",")}
    others = sorted(os.sched_getaffinity(0) - servers) or sorted(servers)
    opts.client_cpus = opts.client_cpus or ",".join(map(str, others))
    os.sched_setaffinity(0, {int(c) for c in opts.client_cpus.split(",")})
    with tempfile.TemporaryDirectory(prefix="multimodel-") as tmp:
        alone, results = run_cases(Path(tmp), opts)
    publish(report(alone, results, opts, head), opts.out)


if __name__ == "__main__":
    main()

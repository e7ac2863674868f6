"""Paging by memory pressure: a repository holding 10x more models than its budget, requests
drawn Zipf-like over them, as a long tail of rarely used models asks.

For each framework (``--frameworks``: torch, then TensorFlow), ``mobilenet_v2`` is built once by
``sharedserve models build`` and hard-linked to ``--models`` names (``m000``..; distinct models
to the server, which loads each on its own). One server holding one of them, no cap, gives one
model's measured peak (``peak_mib`` in ``/sharedserve/v1/limits``); the cap is ``--fit`` times
that, rounded up to a MiB. Then one ``sharedserve serve --model-repository DIR --paging lru
--gpu-memory-mib CAP --cpu-limit 1`` serves them all, and one client sends ``--requests``
requests in sequence, each a batch of one (the Open Inference Protocol's REST infer with binary
tensors), to a model drawn with probability proportional to rank^-s (``--zipf-s``, seed
``--seed``; ``m000`` is rank 1).

A request is a miss when the server's ``sharedserve_model_page_ins_total`` (summed over models)
moved while it ran: one client, so nothing else paged in meanwhile. Reported: hit rate, the
latency of misses and of all requests (numpy's exact percentiles of the client's wall clock),
the server's own page-in time (``sharedserve_model_page_in_seconds`` sum / count over the
run), and beside it a cold load from disk: ``POST /v2/repository/models/NAME/load`` after an
``unload``, timed ``--cold-loads`` times on a rarely drawn model (the median).

On a host without a GPU a torch page-in moves nothing (the device copy is a no-op; the GPU
kit's ``multimodel`` stage times it over PCIe), so its figure is the bookkeeping's cost; a
TensorFlow page-in is a real reload from disk plus its warm-up. Prints a Markdown report;
``--out`` writes it too.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# benchmarks/, for machine.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import heading, publish
from memory import server  # beside this script: serve in its session

from sharedserve.bench.payload import oip_rest_request

SHAREDSERVE = [sys.executable, "-m", "sharedserve"]
PACKAGES = ("sharedserve", "tensorflow", "torch", "numpy")
MODEL = "mobilenet_v2"
LABEL = {"torch": "torch (TorchScript)", "tf": "TensorFlow (SavedModel)"}
READY_S = 1800.0


def _call(
    port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request(method, path, body, headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _json(port: int, path: str) -> object:
    status, data = _call(port, "GET", path)
    if status != 200:
        raise RuntimeError(f"GET {path}: HTTP {status} {data[:200]!r}")
    return json.loads(data)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def wait_ready(proc: subprocess.Popen[bytes], port: int, n: int, log: Path) -> None:
    """Until ``n`` models are READY in the repository index (paged out ones count)."""
    deadline = time.monotonic() + READY_S
    while True:
        try:
            status, data = _call(port, "POST", "/v2/repository/index", b"{}")
            index = json.loads(data) if status == 200 else []
        except (OSError, http.client.HTTPException, ValueError):
            index = []
        if sum(m.get("state") == "READY" for m in index) == n:
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not load its {n} models; see {log}")
        time.sleep(0.5)


def metric(port: int, name: str) -> float:
    """A Prometheus series summed over its labels (0 before any sample)."""
    _, data = _call(port, "GET", "/metrics")
    total = 0.0
    for line in data.decode().splitlines():
        if line.startswith((name + "{", name + " ")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def names(n: int) -> list[str]:
    return [f"m{i:03d}" for i in range(n)]


def repository(work: Path, framework: str, n: int) -> Path:
    built = work / "built" / framework
    command = [*SHAREDSERVE, "models", "build", MODEL, "--framework", framework]
    subprocess.run([*command, "--out", str(built)], check=True, stdout=subprocess.DEVNULL, cwd=work)
    repo = work / f"repository-{framework}-{n}"
    for name in names(n):
        shutil.copytree(built / MODEL, repo / name, copy_function=os.link)
    return repo


def one_peak_mib(work: Path, repo: Path, log: Path) -> float:
    """One model's measured peak, read from a server holding only it (no cap)."""
    single = work / "single"
    shutil.rmtree(single, ignore_errors=True)
    shutil.copytree(repo / "m000", single / "m000", copy_function=os.link)
    with server(["--model-repository", str(single)], log) as (proc, url):
        wait_ready(proc, _port(url), 1, log)
        limits = _json(_port(url), "/sharedserve/v1/limits")
    return float(limits["models"]["m000"]["versions"]["1"]["peak_mib"])  # type: ignore[index]


@dataclass
class Run:
    framework: str
    models: int
    peak_mib: float
    cap_mib: int
    start_s: float  # the paging server's start, every model READY
    latency_s: np.ndarray  # every request, client wall clock
    missed: np.ndarray  # bool per request
    failed: int  # requests not answered 200
    page_ins: float
    page_outs: float
    page_in_sum_s: float
    cold_loads_s: list[float]
    lru: float  # an exact LRU's hit rate on the same draws
    unloads_s: list[float]  # the unload before each cold load (TensorFlow: a collection too)


def zipf_weights(n_models: int, s: float) -> np.ndarray:
    weights = np.arange(1, n_models + 1, dtype=float) ** -s
    return np.asarray(weights / weights.sum())


def zipf_draws(n_models: int, requests: int, s: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).choice(n_models, size=requests, p=zipf_weights(n_models, s))


def resident_by_use(port: int) -> list[int]:
    """The models resident now (as ranks - 1), least recently used first."""
    models = _json(port, "/sharedserve/v1/limits")["models"]  # type: ignore[index]
    here = [
        (v["last_use"] or 0.0, int(name[1:]))
        for name, model in models.items()
        for v in model["versions"].values()
        if v["state"] == "resident"
    ]
    return [rank for _, rank in sorted(here)]


def lru_hits(resident: list[int], draws: np.ndarray, slots: int) -> float:
    """The hit rate an exact LRU of ``slots`` models, starting from ``resident``, would have:
    what the server's should match, since one client leaves it nothing else to weigh."""
    cache, hits = list(resident), 0
    for rank in draws.tolist():
        hits += rank in cache
        cache = [*[m for m in cache if m != rank][-(slots - 1) :], rank]
    return hits / draws.size


def drive(port: int, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    meta = _json(port, "/v2/models/m000")
    spec = meta["inputs"][0]  # type: ignore[index]
    shape = [1 if d < 0 else d for d in spec["shape"]]
    image = np.random.default_rng(0).random(shape, dtype=np.float32)
    body, headers = oip_rest_request({spec["name"]: image})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    latency, missed, failed = [], [], 0
    before = metric(port, "sharedserve_model_page_ins_total")
    for rank in draws:
        started = time.perf_counter()
        conn.request("POST", f"/v2/models/m{rank:03d}/infer", body, headers)
        response = conn.getresponse()
        response.read()
        latency.append(time.perf_counter() - started)
        failed += response.status != 200
        after = metric(port, "sharedserve_model_page_ins_total")
        missed.append(after > before)
        before = after
    conn.close()
    return np.asarray(latency), np.asarray(missed), failed


def cold_loads(port: int, name: str, times: int) -> tuple[list[float], list[float]]:
    """Seconds of ``load`` after an ``unload`` of ``name``, ``times`` times; and of each
    unload."""
    took, unloads = [], []
    for _ in range(times):
        started = time.perf_counter()
        status, data = _call(port, "POST", f"/v2/repository/models/{name}/unload", b"{}")
        unloads.append(time.perf_counter() - started)
        if status != 200:
            raise RuntimeError(f"unload {name}: HTTP {status} {data[:200]!r}")
        started = time.perf_counter()
        status, data = _call(port, "POST", f"/v2/repository/models/{name}/load", b"{}")
        took.append(time.perf_counter() - started)
        if status != 200:
            raise RuntimeError(f"load {name}: HTTP {status} {data[:200]!r}")
    return took, unloads


def measure(framework: str, work: Path, opts: argparse.Namespace) -> Run:
    log = work / f"serve-{framework}.log"
    repo = repository(work, framework, opts.models)
    peak = one_peak_mib(work, repo, log)
    cap = math.ceil(opts.fit * peak)
    args = ["--model-repository", str(repo), "--paging", "lru", "--gpu-memory-mib", str(cap)]
    print(f"{framework}: peak {peak:.2f} MiB, cap {cap} MiB", file=sys.stderr, flush=True)
    started = time.monotonic()
    with server(args, log) as (proc, url):
        port = _port(url)
        wait_ready(proc, port, opts.models, log)
        start_s = time.monotonic() - started
        draws = zipf_draws(opts.models, opts.requests[framework], opts.zipf_s, opts.seed)
        lru = lru_hits(resident_by_use(port), draws, math.floor(cap / peak))
        ins0 = metric(port, "sharedserve_model_page_ins_total")
        outs0 = metric(port, "sharedserve_model_page_outs_total")
        sum0 = metric(port, "sharedserve_model_page_in_seconds_sum")
        latency, missed, failed = drive(port, draws)
        page_ins = metric(port, "sharedserve_model_page_ins_total") - ins0
        page_outs = metric(port, "sharedserve_model_page_outs_total") - outs0
        page_in_sum = metric(port, "sharedserve_model_page_in_seconds_sum") - sum0
        cold, unloads = cold_loads(port, names(opts.models)[-1], opts.cold_loads)
    return Run(
        framework, opts.models, peak, cap, start_s, latency, missed, failed, page_ins,
        page_outs, page_in_sum, cold, lru, unloads,
    )  # fmt: skip


def _ms(values: np.ndarray, q: float) -> str:
    return f"{np.percentile(values, q) * 1000:.1f}" if values.size else "-"


def report(runs: list[Run], opts: argparse.Namespace, head: list[str]) -> str:
    lines = [
        *head,
        "",
        f"`{MODEL}` (random weights) hard-linked to {opts.models} names in one repository; one "
        "`sharedserve serve --model-repository DIR --paging lru --gpu-memory-mib CAP "
        f"--cpu-limit 1`, CAP = {opts.fit:g} x one model's measured peak, rounded up. One client "
        f"in sequence, a batch of one per request (OIP REST, binary tensors), models drawn with "
        f"p ~ rank^-{opts.zipf_s:g} (seed {opts.seed}); a miss is a request during which the "
        "server's `sharedserve_model_page_ins_total` moved. Latencies are the client's wall "
        "clock, exact percentiles (numpy). Cold load: `POST /v2/repository/models/NAME/load` "
        f"after an `unload`, {opts.cold_loads} times, on the least drawn model, median.",
        "",
        "| framework | models | peak MiB | cap MiB | requests | hit rate | miss p50 / p99 ms "
        "| server page-in mean ms | page-ins / page-outs | hit p50 / p99 ms | all p50 / p99 ms "
        "| cold load median ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        miss, hit = r.latency_s[r.missed], r.latency_s[~r.missed]
        mean = f"{r.page_in_sum_s / r.page_ins * 1000:.1f}" if r.page_ins else "-"
        lines.append(
            f"| {LABEL[r.framework]} | {r.models} | {r.peak_mib:.2f} | {r.cap_mib} "
            f"| {r.latency_s.size} ({r.failed} failed) | {1 - r.missed.mean():.1%} "
            f"| {_ms(miss, 50)} / {_ms(miss, 99)} | {mean} | {r.page_ins:.0f} / "
            f"{r.page_outs:.0f} | {_ms(hit, 50)} / {_ms(hit, 99)} | {_ms(r.latency_s, 50)} / "
            f"{_ms(r.latency_s, 99)} | {np.median(r.cold_loads_s) * 1000:.0f} |"
        )
    lines += ["", "Beside the table, per framework:", ""]
    for r in runs:
        slots = math.floor(r.cap_mib / r.peak_mib)
        top = zipf_weights(r.models, opts.zipf_s)[:slots].sum()
        loads = ", ".join(f"{t * 1000:.0f}" for t in r.cold_loads_s)
        unloads = ", ".join(f"{t * 1000:.0f}" for t in r.unloads_s)
        lines.append(
            f"- {LABEL[r.framework]}: an exact LRU of {slots} models on the same draws would hit "
            f"{r.lru:.1%} (the {slots} most likely models hold {top:.1%} of the draws); cold "
            f"loads {loads} ms, the unloads before them {unloads} ms; the server's start, "
            f"every model READY, {r.start_s:.1f} s."
        )
    lines += [
        "",
        "On this host without a GPU a torch page-in moves nothing: the device copy is a no-op "
        "here (the GPU kit's `multimodel` stage times it over PCIe), so the torch page-in "
        "figure is the cost of the bookkeeping (making room, the state changes), not of a "
        "copy, and a torch miss costs what a hit does. A TensorFlow page-in is a real reload "
        "from disk plus its warm-up, and the page-in's time includes making room: the least "
        "recently used model's unload and a garbage collection, which a cold load after an "
        "unload does not pay (its room was freed by the unload, timed apart above).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frameworks", type=lambda s: s.split(","), default=["torch", "tf"])
    parser.add_argument("--models", type=int, default=40, help="models in the repository")
    parser.add_argument("--fit", type=float, default=4.0, help="cap in models' peaks")
    parser.add_argument(
        "--requests",
        type=lambda s: dict(pair.split("=") for pair in s.split(",")),
        default="torch=600,tf=100",
        help="requests per framework, e.g. torch=600,tf=100",
    )
    parser.add_argument("--zipf-s", type=float, default=1.1)
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--cold-loads", type=int, default=5)
    parser.add_argument("--out", type=Path)
    opts = parser.parse_args()
    opts.requests = {key: int(value) for key, value in opts.requests.items()}
    head = heading("Paging: 10x more models than the memory budget, Zipf-like requests", PACKAGES)
    with tempfile.TemporaryDirectory(prefix="multimodel-paging-") as tmp:
        runs = []
        for framework in opts.frameworks:
            runs.append(measure(framework, Path(tmp), opts))
            print(report(runs, opts, []), file=sys.stderr, flush=True)
    publish(report(runs, opts, head), opts.out)


if __name__ == "__main__":
    main()

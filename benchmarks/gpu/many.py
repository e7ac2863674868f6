"""Many models in one ``sharedserve serve``: the ``multimodel`` stage's model repository, its
server, the requests it drives and the memory it reads (NVML per process, host PSS, metrics).

Beside ``replicas.py``, which starts one process per model through ``pack``; here one process
serves a ``--model-repository`` whose models are copies of one built model under distinct
names, added while it serves through the repository API (``POST /v2/repository/models/NAME/
load``), as Triton's clients add them.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import replicas  # benchmarks/gpu/replicas.py, beside this module
from kit import Stage


def add_copies(
    repository: Path, built: Path, names: list[str], model_file: str | None = None
) -> None:
    """``repository/NAME/1`` for each name: the built model's version 1, hard-linked (copied
    where links cannot be made), and ``sharedserve.yaml`` with ``model_file`` if given."""
    for name in names:
        version = repository / name / "1"
        version.mkdir(parents=True, exist_ok=True)
        for source in (built / "1").iterdir():
            target = version / source.name
            if target.exists():
                continue
            try:
                os.link(source, target)
            except OSError:
                target.write_bytes(source.read_bytes())
        if model_file is not None:
            (repository / name / "sharedserve.yaml").write_text(model_file)


def _post(url: str, path: str, timeout: float = 300) -> tuple[int, bytes]:
    port = int(url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, b"{}", {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def load(server: replicas.Server, names: list[str], threads: int = 4) -> list[str]:
    """Load models added to the repository while the server runs; the failures, as text."""

    def one(name: str) -> str | None:
        status, body = _post(server.rest, f"/v2/repository/models/{name}/load")
        return None if status == 200 else f"{name}: {status} {body[:200]!r}"

    with ThreadPoolExecutor(threads) as pool:
        return [e for e in pool.map(one, names) if e is not None]


@contextmanager
def serving(stage: Stage, repository: Path, label: str, *extra: str) -> Iterator[replicas.Server]:
    """One ``sharedserve serve --model-repository`` process, every model in it AVAILABLE."""
    from sharedserve.pack.probe import free_port

    rest, grpc = free_port(), free_port()
    fake = ("--fake-gpus", str(stage.fake_gpus)) if stage.fake_gpus else ()
    command = replicas.sharedserve("serve", "--model-repository", str(repository), *fake, *extra)
    command += ["--host", "127.0.0.1", "--rest-port", str(rest), "--grpc-port", str(grpc)]
    command += ["--shutdown-grace", "2"]
    log = stage.work / f"serve-{label}.log"
    names = sorted(p.name for p in repository.iterdir() if p.is_dir())
    with log.open("ab") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    server = replicas.Server(
        label, names[0], proc.pid, f"http://127.0.0.1:{rest}", f"127.0.0.1:{grpc}"
    )
    try:
        deadline = time.monotonic() + 300
        waiting = list(names)
        while waiting:
            status, body = replicas.http_get(server.rest, f"/v1/models/{waiting[0]}", 5)
            if status == 200 and b'"AVAILABLE"' in body:
                waiting.pop(0)
                continue
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-600:]
                raise RuntimeError(f"serve {label} did not make {waiting[0]} AVAILABLE: {tail}")
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


Job = tuple[replicas.GrpcClient, Any]


def jobs_for(servers: list[replicas.Server], names: list[str], model: str) -> list[Job]:
    """One request per model: ``names`` on one server (one channel), or one server per name."""
    inputs = replicas.example_inputs(model, 1)
    clients = [replicas.GrpcClient(s) for s in servers]
    jobs = []
    for i, name in enumerate(names):
        client = clients[0] if len(clients) == 1 else clients[i]
        request = client.request(inputs)
        request.model_spec.name = name
        jobs.append((client, request))
    return jobs


def drive(jobs: list[Job], rounds: int, threads: int) -> dict[str, Any]:
    """``rounds`` requests per model, round-robin over the models, from ``threads`` threads:
    QPS over all of them and each request's latency (exact, ``perf_counter``)."""

    def one(job: Job) -> tuple[str, float]:
        start = time.perf_counter()
        code, _ = job[0].predict(job[1], timeout=60)
        return code, time.perf_counter() - start

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, jobs))  # a warm-up request per model, not counted
        start = time.perf_counter()
        done = list(pool.map(one, jobs * rounds))
        seconds = time.perf_counter() - start
    ok = [t for code, t in done if code == "OK"]
    return {
        "requests": len(done),
        "errors": len(done) - len(ok),
        "codes": sorted({code for code, _ in done}),
        "seconds": round(seconds, 3),
        "qps": round(len(ok) / seconds, 1),
        **percentiles_ms(ok),
    }


def percentiles_ms(seconds: list[float]) -> dict[str, float | None]:
    if not seconds:
        return {"p50_ms": None, "p99_ms": None}
    p50, p99 = np.percentile(np.array(seconds) * 1000, [50, 99])
    return {"p50_ms": round(float(p50), 3), "p99_ms": round(float(p99), 3)}


def gpu_mib(backend: Any, gpu_uuid: str, pids: list[int]) -> float | None:
    """NVML's memory of the processes, summed; None if any is unknown (always on a dry run)."""
    from sharedserve.errors import GpuError

    try:
        found = [backend.process_memory_mib(gpu_uuid, pid) for pid in pids]
    except GpuError:
        return None
    return None if None in found else float(sum(found))


def host_pss_mib(pids: list[int]) -> float | None:
    """Host memory of the processes, summed: proportional set size, so libraries the processes
    share are counted once over them, not once each. Not the distinct physical pages that
    ``benchmarks/host_memory.py`` counts: a CUDA process reserves terabytes of address space,
    which its ``/proc/PID/pagemap`` walk would read through for each of 128 processes. On the
    GPU machine nothing else runs beside the stage, so PSS splits pages among its servers."""
    total = 0
    try:
        for pid in pids:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    except (OSError, ValueError):
        return None
    return round(total / 1024, 1)


def host_available_mib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None

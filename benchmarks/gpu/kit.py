"""What every stage of the GPU proof kit shares: arguments, the machine, servers, results.

A stage is a script in ``stages/`` run by ``run.sh`` as ``python stages/NAME.py OUTDIR
[--dry-run]``. It calls ``Stage.from_argv()``, measures, records checks and figures on the
``Stage``, and ``finish()`` writes ``OUTDIR/NAME.md`` and ``OUTDIR/NAME.json`` with the device,
driver, CUDA and torch versions and the command. ``--dry-run`` runs the same code on a machine
without a GPU against a simulated inventory (``--fake-gpus``) with smaller settings: every GPU
figure is then ``null`` and every check that only a GPU can answer is recorded as not
applicable, never as passed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

# The simulated GPU of a dry run: an H100's size, so the memory arithmetic is the real one's.
DRY_RUN_GPU = {
    "uuid": "GPU-00000000-0000-0000-0000-00000000d7e1",
    "index": 0,
    "name": "simulated GPU (dry run)",
    "memory_mib": 81559,
    "numa_node": 0,
    "healthy": True,
}
_MIB = 1 << 20


@dataclass
class Check:
    name: str
    ok: bool | None
    """None: not applicable here (a simulated GPU cannot answer it)."""
    detail: str


@dataclass
class Stage:
    """One stage's run: where it writes, what it found."""

    name: str
    title: str
    out: Path
    work: Path
    dry_run: bool
    fake_gpus: Path | None
    started: float = field(default_factory=time.time)
    checks: list[Check] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    unavailable: str | None = None

    @classmethod
    def from_argv(cls, name: str, title: str) -> Stage:
        parser = argparse.ArgumentParser(description=title)
        parser.add_argument("out", type=Path, help="directory for NAME.md and NAME.json")
        parser.add_argument("--dry-run", action="store_true", help="simulated GPU, small run")
        parser.add_argument("--work", type=Path, help="scratch directory (logs, models)")
        args = parser.parse_args()
        work = args.work or Path(os.environ.get("KIT_WORK", "/tmp/sharedserve-gpu-kit")) / name
        work.mkdir(parents=True, exist_ok=True)
        args.out.mkdir(parents=True, exist_ok=True)
        fake = None
        if args.dry_run:
            fake = work / "fake-gpus.json"
            fake.write_text(json.dumps({"gpus": [DRY_RUN_GPU]}))
        return cls(name, title, args.out, work, args.dry_run, fake)

    # --- the GPU --------------------------------------------------------------------------

    def gpu_backend(self) -> Any:
        from sharedserve.gpu.backend import open_gpu_backend

        backend = open_gpu_backend(self.fake_gpus)
        if backend is None:
            raise SystemExit(
                "no NVIDIA driver answers NVML here: run on a GPU machine, or with --dry-run"
            )
        return backend

    def gpu(self) -> Any:
        """The GPU the stage runs on: the lowest NVML index, as ``pack`` picks by default."""
        backend = self.gpu_backend()
        try:
            return min(backend.list_gpus(), key=lambda g: g.index)
        finally:
            backend.close()

    def environment(self) -> dict[str, Any]:
        """The bench reports' environment (CPU, GPU, driver, CUDA, packages), plus torch's CUDA
        and the checkout's commit; GPU fields are null on a dry run."""
        from sharedserve.bench.environment import describe_environment

        command = os.environ.get("KIT_COMMAND") or shlex.join([sys.argv[0], *sys.argv[1:]])
        backend = self.gpu_backend()
        try:
            env = describe_environment(backend, tuple(shlex.split(command)))
        finally:
            backend.close()
        gpu = (env["gpus"] or [{}])[0]
        torch_cuda = None
        try:
            import torch

            torch_cuda = torch.version.cuda
        except ImportError:
            pass
        env["packages"]["sharedserve"] = _sharedserve_version()
        return {
            "device": gpu.get("name"),
            "device_uuid": gpu.get("uuid"),
            "device_memory_mib": gpu.get("memory_mib"),
            "driver": env.pop("gpu_driver"),
            "simulated_gpu": env.pop("gpus_simulated"),
            "torch": env["packages"].get("torch"),
            "torch_cuda": torch_cuda,
            **env,
        }

    # --- recording ------------------------------------------------------------------------

    def check(self, name: str, ok: bool | None, detail: str) -> None:
        """Record a check; on a dry run a GPU-only check is passed as ``ok=None``."""
        self.checks.append(Check(name, None if ok is None else bool(ok), detail))
        mark = {True: "PASS", False: "FAIL", None: "n/a "}[self.checks[-1].ok]
        print(f"[{self.name}] {mark} {name}: {detail}", flush=True)

    def gpu_check(self, name: str, ok: bool, detail: str) -> None:
        """A check only a real GPU can answer: not applicable on a dry run."""
        if self.dry_run:
            self.check(name, None, "needs a real GPU (dry run)")
        else:
            self.check(name, ok, detail)

    def section(self, *lines: str) -> None:
        self.sections.append("\n".join(lines))

    def status(self) -> str:
        if self.unavailable is not None:
            return "unavailable"
        return "fail" if any(c.ok is False for c in self.checks) else "pass"

    def finish(self, *, partial: bool = False) -> None:
        """Write NAME.md and NAME.json. ``partial``: more is to come (a long stage writes what it
        has as it goes, so a run cut off at its time limit still hands something back)."""
        env = self.environment()
        doc = {
            "stage": self.name,
            "title": self.title,
            "status": self.status(),
            "partial": partial,
            "unavailable": self.unavailable,
            "dry_run": self.dry_run,
            "started_utc": datetime.fromtimestamp(self.started, timezone.utc).isoformat(),
            "seconds": round(time.time() - self.started, 1),
            "environment": env,
            "checks": [c.__dict__ for c in self.checks],
            "results": self.results,
        }
        (self.out / f"{self.name}.json").write_text(json.dumps(doc, indent=1, default=_plain))
        (self.out / f"{self.name}.md").write_text(self._markdown(doc))
        if not partial:
            print(f"[{self.name}] {doc['status']} in {doc['seconds']} s", flush=True)

    def _markdown(self, doc: dict[str, Any]) -> str:
        env = doc["environment"]
        device = env["device"] or "simulated GPU (dry run): no GPU figure below is measured"
        packages = ", ".join(f"{k} {v}" for k, v in env["packages"].items() if v)
        lines = [
            f"# GPU proof kit: {self.title}" + (" (DRY RUN)" if self.dry_run else ""),
            "",
            f"{doc['started_utc'][:16].replace('T', ' ')} UTC, {doc['seconds']} s, from the "
            "repository root:",
            "",
            f"    {env['command']}",
            "",
            f"- Device: {device}"
            + (f", {env['device_memory_mib']} MiB, {env['device_uuid']}" if env["device"] else ""),
            f"- Driver {env['driver']}, CUDA (driver) {env['cuda_driver']}; torch {env['torch']} "
            f"(CUDA {env['torch_cuda']})",
            f"- CPU: {env['cpu']}, {env['cpu_count']} cores; Python {env['python']}; "
            f"{env['platform']}",
            f"- Packages: {packages}",
            "",
            f"**Status: {doc['status']}**"
            + (f" ({doc['unavailable']})" if doc["unavailable"] else "")
            + (" (PARTIAL: the stage was still running)" if doc["partial"] else ""),
            "",
        ]
        if self.checks:
            lines += ["| check | result | detail |", "|---|---|---|"]
            for c in self.checks:
                mark = {True: "PASS", False: "FAIL", None: "n/a"}[c.ok]
                lines.append(f"| {c.name} | {mark} | {c.detail} |")
            lines.append("")
        return "\n".join([*lines, *(s + "\n" for s in self.sections)])


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _sharedserve_version() -> str:
    """The checkout's version and commit: on the GPU machine it runs uninstalled, maybe without
    its .git, so the version comes from pyproject.toml and the commit where git can tell."""
    root = Path(__file__).resolve().parents[2]
    version = "?"
    if sys.version_info >= (3, 11):  # tomllib; the GPU machine has 3.12
        import tomllib

        version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    try:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=root,
            check=True,
        )
        return f"{version} (git {found.stdout.strip()})"
    except (OSError, subprocess.CalledProcessError):
        return str(version)


# --- models and servers ---------------------------------------------------------------------


def sharedserve(*args: str) -> list[str]:
    return [sys.executable, "-m", "sharedserve", *args]


def build_models(names: list[str], dest: Path) -> Path:
    """The example TorchScript models (random weights), built once per work directory."""
    missing = [n for n in names if not (dest / n).is_dir()]
    if missing:
        command = sharedserve("models", "build", *missing, "--framework", "torch", "--out")
        subprocess.run([*command, str(dest)], check=True, capture_output=True)
    return dest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(port: int, path: str, timeout: float = 10) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    except OSError:
        return 0, b""
    finally:
        conn.close()


@dataclass
class Server:
    """One ``sharedserve serve`` process of the stage."""

    name: str
    model: str
    process: subprocess.Popen[bytes]
    rest: int
    grpc: int
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def limits(self) -> dict[str, Any]:
        status, body = http_get(self.rest, "/sharedserve/v1/limits")
        if status != 200:
            raise RuntimeError(f"{self.name}: /sharedserve/v1/limits answered {status}")
        found: dict[str, Any] = json.loads(body)
        return found

    def metrics(self) -> dict[str, float]:
        """The sample values of ``/metrics`` by name (labels dropped: one model per server)."""
        from prometheus_client.parser import text_string_to_metric_families

        _, body = http_get(self.rest, "/metrics")
        return {
            s.name: s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples
        }

    def gpu_memory(self) -> dict[str, float | None]:
        """NVML's figure for the process, its cap and its framework pool, in MiB (None: unknown)."""
        found = self.metrics()
        names = {k: f"sharedserve_gpu_memory_{k}_bytes" for k in ("used", "cap", "allocator")}
        return {k: found[n] / _MIB if n in found else None for k, n in names.items()}


@contextmanager
def serving(
    stage: Stage,
    model_dir: Path,
    count: int,
    env: dict[str, str],
    *,
    extra: tuple[str, ...] = (),
    timeout: float = 240,
) -> Iterator[list[Server]]:
    """``count`` servers of one model started together, each AVAILABLE, stopped at the end."""
    servers: list[Server] = []
    fake = ("--fake-gpus", str(stage.fake_gpus)) if stage.fake_gpus else ()
    try:
        for i in range(count):
            rest, grpc_port = free_port(), free_port()
            log = stage.work / f"{model_dir.name}-{i}-{rest}.log"
            command = sharedserve(
                *("serve", "--model", str(model_dir), "--host", "127.0.0.1"),
                *("--rest-port", str(rest), "--grpc-port", str(grpc_port), *fake, *extra),
            )
            with log.open("wb") as sink:
                process = subprocess.Popen(
                    command,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **env},
                )
            servers.append(
                Server(f"{model_dir.name}-{i}", model_dir.name, process, rest, grpc_port, log)
            )
        deadline = time.monotonic() + timeout
        for server in servers:
            while b'"AVAILABLE"' not in http_get(server.rest, f"/v1/models/{server.model}")[1]:
                if server.process.poll() is not None or time.monotonic() > deadline:
                    tail = server.log.read_text(errors="replace")[-1500:]
                    raise RuntimeError(f"{server.name} did not become AVAILABLE; its log:\n{tail}")
                time.sleep(0.2)
        yield servers
    finally:
        for server in servers:
            if server.process.poll() is None:
                server.process.terminate()
        for server in servers:
            try:
                server.process.wait(30)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait()


def contract_env(gpu: Any, fraction: float) -> dict[str, str]:
    """The env contract as ``pack`` gives a replica: the GPU by UUID and a share of it."""
    from sharedserve.contract import GpuShare, Grant

    return Grant((GpuShare(gpu.uuid, fraction),), bare_host=True).to_env()


class GrpcClient:
    """TF Serving's Predict over gRPC with sharedserve's own messages (no TensorFlow needed)."""

    def __init__(self, server: Server, max_bytes: int = (1 << 31) - 1) -> None:
        import grpc

        from sharedserve.server.api import PREDICT_METHOD
        from sharedserve.server.api import tf_serving_pb2 as pb

        self._pb, self._grpc = pb, grpc
        options = [
            ("grpc.max_send_message_length", max_bytes),
            ("grpc.max_receive_message_length", max_bytes),
        ]
        self._channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc}", options=options)
        self._predict = self._channel.unary_unary(
            PREDICT_METHOD,
            request_serializer=pb.PredictRequest.SerializeToString,
            response_deserializer=pb.PredictResponse.FromString,
        )
        self.model = server.model

    def request(self, inputs: dict[str, np.ndarray]) -> Any:
        from sharedserve.server.tensor_proto import to_tensor_proto

        request = self._pb.PredictRequest()
        request.model_spec.name = self.model
        for key, array in inputs.items():
            to_tensor_proto(array, request.inputs[key])
        return request

    def predict(self, request: Any, timeout: float = 120) -> tuple[str, str]:
        """(status code name, message): ``("OK", "")`` on success."""
        try:
            self._predict(request, timeout=timeout)
        except self._grpc.RpcError as e:
            return e.code().name, e.details() or ""
        return "OK", ""

    def close(self) -> None:
        self._channel.close()


def example_inputs(model: str, rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random rows for an example model's signature (``models build``'s shapes)."""
    shape = (8,) if model == "tiny" else (224, 224, 3)
    key = "x" if model == "tiny" else "images"
    return {key: np.random.default_rng(seed).random((rows, *shape), dtype=np.float32)}


class _Loop:
    """``step`` in a thread every ``period`` seconds, for as long as the ``with`` block lasts."""

    period = 0.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.step()

    def step(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


class Background(_Loop):
    """Batch-1 requests back to back in a thread: does a neighbour keep serving?"""

    def __init__(self, client: GrpcClient, model: str) -> None:
        super().__init__()
        self._client, self._request = client, client.request(example_inputs(model, 1))
        self.codes: dict[str, int] = {}

    def step(self) -> None:
        code, _ = self._client.predict(self._request, timeout=30)
        self.codes[code] = self.codes.get(code, 0) + 1


class MemoryWatch(_Loop):
    """NVML's per-process memory of some pids, sampled every 50 ms in a thread: the peaks."""

    period = 0.05

    def __init__(self, backend: Any, gpu_uuid: str, pids: list[int]) -> None:
        super().__init__()
        self._backend, self._uuid, self._pids = backend, gpu_uuid, pids
        self.peak_mib: dict[int, int | None] = dict.fromkeys(pids)
        self.errors: list[str] = []

    def step(self) -> None:
        from sharedserve.errors import GpuError

        for pid in self._pids:
            try:
                used = self._backend.process_memory_mib(self._uuid, pid)
            except GpuError as e:  # one failed query is a gap, not the end of the watch
                self.errors.append(str(e))
                continue
            if used is not None:
                self.peak_mib[pid] = max(used, self.peak_mib[pid] or 0)


def run_bench(
    stage: Stage, out: Path, model_dir: Path, *args: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """``sharedserve bench --model`` into ``out``; its report.json (the error if it failed)."""
    fake = ("--fake-gpus", str(stage.fake_gpus)) if stage.fake_gpus else ()
    command = sharedserve("bench", "--model", str(model_dir), "--out", str(out), *fake, *args)
    log = out.with_suffix(".log")
    out.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        done = subprocess.run(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            check=False,
        )
    if done.returncode != 0 or not (out / "report.json").exists():
        tail = log.read_text(errors="replace")[-1500:]
        return {"error": f"bench exited {done.returncode}; its log ends:\n{tail}"}
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report


def feasible_densities(
    candidates: list[int], gpu_mib: int, reserve_mib: int, floor_mib: int
) -> list[int]:
    """The densities at which ``pack``'s even split leaves each replica at least ``floor_mib``."""
    return [n for n in candidates if (gpu_mib - n * reserve_mib) / n >= floor_mib]


def markdown_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    return [
        "| " + " | ".join(header) + " |",
        "|---" * len(header) + "|",
        *("| " + " | ".join(map(cell, row)) + " |" for row in rows),
    ]

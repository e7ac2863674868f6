"""The model servers a GPU proof kit stage drives: built, packed, asked, watched, benchmarked.

Servers are started by ``sharedserve pack``'s own machinery and benchmarks run through
``sharedserve bench``, so the kit proves the product's paths, not look-alikes of them.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from kit import Stage  # benchmarks/gpu/kit.py, beside this module

_MIB = 1 << 20


def sharedserve(*args: str) -> list[str]:
    return [sys.executable, "-m", "sharedserve", *args]


def build_models(names: list[str], dest: Path, framework: str = "torch") -> Path:
    """The example models (random weights) as ``models build --framework`` makes them (torch:
    TorchScript; onnx; export: torch.export's ``model.pt2``), built once per work directory.
    RuntimeError with the command's own last lines if it fails (onnx not installed, say)."""
    missing = [n for n in names if not (dest / n).is_dir()]
    if missing:
        command = sharedserve("models", "build", *missing, "--framework", framework, "--out")
        done = subprocess.run([*command, str(dest)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-600:]
            raise RuntimeError(f"models build --framework {framework} failed: {tail}")
    return dest


def http_get(url: str, path: str, timeout: float = 10) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
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
    """One replica of a stage's pack, as its targets entry names it."""

    name: str
    model: str
    pid: int
    rest: str
    """REST base URL."""
    grpc: str
    """gRPC ``host:port``."""

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


def _server(target: Any) -> Server:
    # A replica this host started always has a pid and a gRPC port (sharedserve.pack.Target).
    assert target.pid is not None and target.grpc is not None
    return Server(target.name, target.model, target.pid, target.rest, target.grpc)


@contextmanager
def packed(
    stage: Stage, model_dir: Path, replicas: int, fraction: float, extra: tuple[str, ...] = ()
) -> Iterator[list[Server]]:
    """``replicas`` servers of one model on the stage's GPU, each capped at ``fraction`` of it,
    started (and stopped at the end) by ``sharedserve pack``'s own machinery: the env contract
    as the packer writes it, every replica AVAILABLE before the block runs. Unsupervised: a
    replica that dies stays dead, so the stage sees it."""
    from sharedserve.cli._replicas import replica_environment
    from sharedserve.config import PackEntry, PackSettings
    from sharedserve.limits.gpu import parse_cap_request
    from sharedserve.pack import Pack

    entry = PackEntry(
        model_dir=model_dir,
        replicas=replicas,
        cap=parse_cap_request(fraction, None),
        server_args=extra,
    )
    settings = PackSettings(
        entries=(entry,),
        fake_gpus=stage.fake_gpus,
        environment=replica_environment(),
        log_dir=stage.work / f"pack-{model_dir.name}-{replicas}",
    )
    pack = Pack(settings)
    try:
        yield [_server(target) for target in pack.start()]
    finally:
        pack.stop()


class GrpcClient:
    """TF Serving's Predict over gRPC with sharedserve's own messages (no TensorFlow needed)."""

    def __init__(self, server: Server, max_bytes: int = (1 << 31) - 1) -> None:
        import grpc

        from sharedserve.server.protos.tfserving import PREDICT_METHOD
        from sharedserve.server.protos.tfserving import tf_serving_pb2 as pb

        self._pb, self._grpc = pb, grpc
        options = [
            ("grpc.max_send_message_length", max_bytes),
            ("grpc.max_receive_message_length", max_bytes),
        ]
        self._channel = grpc.insecure_channel(server.grpc, options=options)
        self._predict = self._channel.unary_unary(
            PREDICT_METHOD,
            request_serializer=pb.PredictRequest.SerializeToString,
            response_deserializer=pb.PredictResponse.FromString,
        )
        self.model = server.model

    def request(self, inputs: dict[str, np.ndarray]) -> Any:
        from sharedserve.server.wire.tfserving.tensor_proto import to_tensor_proto

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
    stage: Stage, out: Path, model_dir: Path | None, *args: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """``sharedserve bench --model`` (or, ``model_dir`` None, what ``args`` say: ``--spec``) into
    ``out``; its report.json (the error if it failed)."""
    fake = ("--fake-gpus", str(stage.fake_gpus)) if stage.fake_gpus else ()
    model = ("--model", str(model_dir)) if model_dir is not None else ()
    command = sharedserve("bench", *model, "--out", str(out), *fake, *args)
    code, tail = run_logged(command, out.with_suffix(".log"), env)
    if code != 0 or not (out / "report.json").exists():
        return {"error": f"bench exited {code}; its log ends:\n{tail}"}
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report


def run_logged(command: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``command`` with its output in ``log`` (it goes into the kit's logs): its exit status
    and the end of its log, for a check's detail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        done = subprocess.run(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            check=False,
        )
    return done.returncode, log.read_text(errors="replace")[-1500:]


def feasible_densities(
    candidates: list[int], gpu_mib: int, reserve_mib: int, floor_mib: int
) -> list[int]:
    """The densities at which ``pack``'s even split leaves each replica at least ``floor_mib``."""
    return [n for n in candidates if (gpu_mib - n * reserve_mib) / n >= floor_mib]

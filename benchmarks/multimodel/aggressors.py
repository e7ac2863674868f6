"""The aggressors of ``cpu.py``'s isolation cases: what each case serves, and the
load each drives (in a process of its own, pinned to the client CPUs).

Each case names the models one shared process serves beside the victim, the same models alone in
a second process, and the drive: closed-loop clients as fast as answered, counting answers
(``requests``: 200s; ``failed``: the rest) over the measured span.

* ``rest``: ``mobilenet_v2`` (TensorFlow) with TF Serving REST JSON bodies (``instances``, a
  224x224x3 image of random floats: ~3 MiB);
* ``grpc``: the same image over TF Serving's gRPC ``Predict`` (raw ``tensor_content``);
* ``oip``: the same over the Open Inference Protocol's REST infer with binary tensors;
* ``paging``: requests (OIP binary) spread uniformly over ``PAGED`` cold copies of
  ``mobilenet_v2`` under a cap that holds ``HELD`` of them (``--paging lru``), TorchScript or
  TensorFlow;
* ``churn``: a model (``mobilenet_v2``, TensorFlow) unloaded and loaded again, over and over,
  through the Open Inference Protocol's repository API.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import orjson
from paging import one_peak_mib  # beside this script

from sharedserve.bench.payload import oip_rest_request
from sharedserve.server.protos.tfserving import tf_serving_pb2

SHAREDSERVE = [sys.executable, "-m", "sharedserve"]
MODEL = "mobilenet_v2"
PAGED, HELD = 20, 4
KINDS = ("tiny", "rest", "grpc", "oip", "paging", "churn")


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    clients: int
    framework: str = "tf"

    @property
    def label(self) -> str:
        what = {
            "tiny": "`tiny`, REST JSON",
            "rest": f"`{MODEL}`, REST JSON (`instances`)",
            "grpc": f"`{MODEL}`, TF Serving gRPC `Predict`",
            "oip": f"`{MODEL}`, OIP REST binary",
            "paging": f"paging: {PAGED} `{MODEL}` ({self.framework}), room for {HELD}",
            "churn": f"load/unload of `{MODEL}` (repository API)",
        }[self.kind]
        return f"{what}, {self.clients} client{'s' * (self.clients > 1)}"


CASES = {
    case.name: case
    for case in (
        Case("tiny-16", "tiny", 16),
        Case("rest-4", "rest", 4),
        Case("rest-16", "rest", 16),
        Case("grpc-4", "grpc", 4),
        Case("grpc-16", "grpc", 16),
        Case("oip-4", "oip", 4),
        Case("oip-16", "oip", 16),
        Case("paging-torch", "paging", 4, "torch"),
        Case("paging-tf", "paging", 4, "tf"),
        Case("churn", "churn", 1),
    )
}


@dataclass(frozen=True)
class Layout:
    """A case's servers: ``shared`` (the victim beside the aggressor's models) and ``alone``
    (those models without it), each as ``serve`` arguments and the models to wait for."""

    shared: list[str]
    alone: list[str]
    names: list[str]
    """The aggressor's models (the drive's targets; the churn's one model)."""


def build(work: Path, name: str, framework: str) -> Path:
    """``sharedserve models build``'s base path of ``name`` (built once per framework)."""
    out = work / "built" / framework
    if not (out / name).is_dir():
        command = [*SHAREDSERVE, "models", "build", name, "--framework", framework]
        subprocess.run([*command, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    return out / name


def layout(case: Case, work: Path, victim: Path, log: Path) -> Layout:
    """The case's servers, its models laid out under ``work``."""
    if case.kind in ("paging", "churn"):
        return _repositories(case, work, victim, log)
    model = victim if case.kind == "tiny" else build(work, MODEL, "tf")
    config = work / f"{case.name}.config"
    config.write_text(
        "model_config_list {\n"
        f"  config {{ name: 'victim' base_path: '{victim}' model_platform: 'tensorflow' }}\n"
        f"  config {{ name: 'aggressor' base_path: '{model}' model_platform: 'tensorflow' }}\n"
        "}\n"
    )
    shared = ["--model-config-file", str(config)]
    return Layout(shared, ["--model", str(model), "--name", "aggressor"], ["aggressor"])


def _repositories(case: Case, work: Path, victim: Path, log: Path) -> Layout:
    """Two repositories of hard links: the aggressor's models alone, and the same beside a
    pinned victim; paging under a cap for ``HELD`` of the copies."""
    built = build(work, MODEL, case.framework)
    alone, shared = work / f"{case.name}-alone", work / f"{case.name}-shared"
    names = [f"m{i:03d}" for i in range(PAGED)] if case.kind == "paging" else ["churned"]
    for repo in (alone, shared):
        shutil.rmtree(repo, ignore_errors=True)
        for name in names:
            shutil.copytree(built, repo / name, copy_function=os.link)
    shutil.copytree(victim, shared / "victim", copy_function=os.link)
    (shared / "victim" / "sharedserve.yaml").write_text("pinned: true\n")
    extra: list[str] = []
    if case.kind == "paging":
        # Between HELD and HELD + 1 copies' peaks: HELD fit, and the victim's few KiB beside.
        cap = math.ceil((HELD + 0.5) * one_peak_mib(work, alone, log))
        extra = ["--paging", "lru", "--gpu-memory-mib", str(cap)]
    return Layout(
        ["--model-repository", str(shared), *extra],
        ["--model-repository", str(alone), *extra],
        names,
    )


# -- the drive (in the aggressor's own process) ----------------------------------------------


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((1, 224, 224, 3), dtype=np.float32)


def _http(port: int) -> Callable[[str, str, bytes, dict[str, str]], int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def send(method: str, path: str, body: bytes, headers: dict[str, str]) -> int:
        conn.request(method, path, body, headers)
        response = conn.getresponse()
        response.read()
        return response.status

    return send


def _client(case: Case, rest: int, grpc_port: int, names: list[str], k: int) -> Callable[[], bool]:
    """One client's next request, as a call that says whether it was answered 200."""
    if case.kind == "tiny":
        body = json.dumps({"instances": [[0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0]]}).encode()
    else:
        body = orjson.dumps({"instances": _image(k).tolist()})
    send, json_headers = _http(rest), {"Content-Type": "application/json"}
    if case.kind in ("tiny", "rest"):
        return lambda: send("POST", "/v1/models/aggressor:predict", body, json_headers) == 200
    if case.kind == "grpc":
        request = tf_serving_pb2.PredictRequest()
        request.model_spec.name = "aggressor"
        tensor = request.inputs["images"]
        tensor.dtype = 1  # DT_FLOAT
        tensor.tensor_shape.dim.extend(
            tf_serving_pb2.TensorShapeProto.Dim(size=n) for n in (1, 224, 224, 3)
        )
        tensor.tensor_content = _image(k).tobytes()
        raw = request.SerializeToString()
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        predict = channel.unary_unary("/tensorflow.serving.PredictionService/Predict")

        def call() -> bool:
            try:
                predict(raw, timeout=120)
            except grpc.RpcError:
                return False
            return True

        return call
    oip, headers = oip_rest_request({"images": _image(k)})
    if case.kind == "oip":
        return lambda: send("POST", "/v2/models/aggressor/infer", oip, headers) == 200
    if case.kind == "paging":
        draw = random.Random(k)
        return lambda: send("POST", f"/v2/models/{draw.choice(names)}/infer", oip, headers) == 200
    model = f"/v2/repository/models/{names[0]}"
    return lambda: (
        send("POST", f"{model}/unload", b"{}", json_headers) == 200
        and send("POST", f"{model}/load", b"{}", json_headers) == 200
    )


def drive(case: Case, rest: int, grpc_port: int, names: list[str], seconds: float) -> None:
    """Closed loop for ``seconds``; prints the counts as a JSON line."""
    clients = [_client(case, rest, grpc_port, names, k) for k in range(case.clients)]
    stop = time.monotonic() + seconds
    done, failed = [0] * case.clients, [0] * case.clients

    def loop(k: int) -> None:
        while time.monotonic() < stop:
            if clients[k]():
                done[k] += 1
            else:
                failed[k] += 1

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(case.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"requests": sum(done), "failed": sum(failed), "seconds": seconds}))

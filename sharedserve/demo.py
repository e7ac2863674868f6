"""The quickstart: build an example model, serve it, predict, print what came back.

It drives the real ``sharedserve serve`` as a child process over real HTTP, exactly as a user's
client would, so what it prints is what the server does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from sharedserve.errors import ConfigError, SharedServeError
from sharedserve.models import CATALOG, build_models
from sharedserve.pack.probe import free_port, model_state

__all__ = ["free_port", "run_demo", "wait_available"]

_LOAD_TIMEOUT_S = 300.0


def _http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def wait_available(base: str, name: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Poll ``GET /v1/models/NAME`` until AVAILABLE; fail if the server dies first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SharedServeError(
                f"the server exited with code {process.returncode} while loading"
            )
        if model_state(base, name, timeout=5.0) == "AVAILABLE":
            return
        time.sleep(0.25)
    raise SharedServeError(f"model {name!r} was not AVAILABLE within {timeout:.0f} s")


def run_demo(model: str, workdir: Path, *, requests: int, batch: int) -> None:
    console = Console()
    if model not in CATALOG:
        raise ConfigError(f"unknown model {model!r}; choose from {sorted(CATALOG)}")
    base_path = workdir / model
    if not (base_path / "1").exists():
        console.print(f"building [bold]{model}[/] (random weights) into {base_path} ...")
        build_models([model], workdir)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "sharedserve", "--log-level", "warning", "serve"]
    command += ["--model", str(base_path)]
    command += ["--host", "127.0.0.1", "--rest-port", str(port), "--grpc-port", str(free_port())]
    console.print(f"starting: sharedserve serve --model {base_path} --rest-port {port}")
    process = subprocess.Popen(command)
    try:
        started = time.monotonic()
        wait_available(base, model, process, _LOAD_TIMEOUT_S)
        console.print(f"{model} AVAILABLE after {time.monotonic() - started:.1f} s\n")
        _predictions(console, base, model, requests, batch)
        _, limits = _http("GET", f"{base}/sharedserve/v1/limits")
        console.print("\nGET /sharedserve/v1/limits")
        console.print_json(data=limits)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _predictions(console: Console, base: str, model: str, requests: int, batch: int) -> None:
    _, metadata = _http("GET", f"{base}/v1/models/{model}/metadata")
    signature = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]
    ((input_name, info),) = signature["inputs"].items()
    shape = [int(d["size"]) for d in info["tensor_shape"]["dim"]][1:]
    console.print(
        f"signature serving_default: input {input_name!r} shape [-1, {', '.join(map(str, shape))}]"
    )
    table = Table(title=f"POST /v1/models/{model}:predict  (random weights and random inputs)")
    for column in ("request", "latency ms", "output shape", "top class", "probability"):
        table.add_column(column, justify="right")
    rng = np.random.default_rng(0)
    for i in range(requests):
        instances = rng.random((batch, *shape), dtype=np.float32).round(4).tolist()
        started = time.perf_counter()
        status, body = _http("POST", f"{base}/v1/models/{model}:predict", {"instances": instances})
        elapsed_ms = (time.perf_counter() - started) * 1000
        if status != 200:
            raise SharedServeError(f"prediction failed with HTTP {status}: {body}")
        predictions = np.asarray(body["predictions"])
        top = int(predictions[0].argmax())
        table.add_row(
            str(i + 1),
            f"{elapsed_ms:.1f}",
            str(list(predictions.shape)),
            str(top),
            f"{predictions[0][top]:.4f}",
        )
    console.print(table)
    console.print(
        "[dim]Weights are random, so class scores are meaningless (often near-uniform); "
        "the latency and memory are those of the real architecture.[/]"
    )

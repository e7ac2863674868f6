"""Host memory per added model: N models in one server process against N processes
(``cpu.py --part memory``, beside this script, runs it).

Each model (``--models``, ``FRAMEWORK:MODEL``: ``tiny`` and ``mobilenet_v2`` as TorchScript
(``torch``), TensorFlow (``tf``), ONNX (``onnx``) and torch.export programs (``export``) by
default) is built once by ``sharedserve models build`` and copied (real copies, so that no two
models share a file's pages) to ``m000``..``m099``. For each N (``--counts``): one ``sharedserve
serve --model-repository`` process holding ``m000``.. ``m{N-1}``, then N ``serve --model``
processes, each started with the command ``sharedserve pack`` gives its replicas (``--name``,
``--host``, ports, ``--shutdown-grace``, ``--cpu-limit 1``; no cgroup, as pack without one),
a few at a time (2 cores). Each server's memory is read once every model reports AVAILABLE
(``/v2/repository/index`` READY, or ``/v1/models/NAME`` for one) and has answered a few OIP
predictions: the distinct physical pages mapped by the server processes (and anything they
started), read from ``/proc/PID/pagemap`` (root only), each page counted once however many of
them map it. Not the sum of RSS: N processes map the same Python, framework and shared
libraries, and RSS counts those pages N times though the machine holds them once. Not the sum
of PSS (``smaps_rollup``) either, though it was the plan: PSS also splits a page with processes
outside the set, so it moves with whatever else runs (in a first run one TensorFlow server's
PSS fell from 607 to 484 MiB while 99 models were added to it, its RSS rose from 626 to 763
MiB, because other TensorFlow processes started on the machine). Both sums are shown beside.

Per row: the total, the memory each added model costs, ``(total(N) - total(1)) / (N - 1)``,
and, for one process, the target: at most 1.3x the model's tensors' bytes plus 16 MiB (a model
added to a process should cost little beyond its own weights).
The tensors' bytes are counted with the framework in a child process: torch, parameters and
buffers of ``model.pt`` (one count per storage); TensorFlow, every variable reachable from the
loaded SavedModel; ONNX, the initializers of ``model.onnx`` (the ``onnx`` package); torch.export,
the program's state dict and constants in ``model.pt2`` (one count per storage). The
N-processes column runs only where N times one process's RSS fits under ``--max-gib`` and the
memory available; otherwise its cell says what it would need, never an extrapolated figure.
Prints a Markdown report; ``--out`` writes it too.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

# benchmarks/, for machine.py and host_memory.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from host_memory import Figure, meminfo_mib, memory
from machine import heading, publish

from sharedserve.pack.probe import free_port, get_json, model_state

SHAREDSERVE = [sys.executable, "-m", "sharedserve"]
PACKAGES = ("sharedserve", "tensorflow", "torch", "onnxruntime", "numpy")
FRAMEWORKS = {"torch": "torch", "tf": "TensorFlow", "onnx": "ONNX", "export": "torch.export"}
"""``--models``' frameworks (``models build --framework``) and their names in the report."""
MODELS = ("tiny", "mobilenet_v2")
MIB = 1024 * 1024
TIMEOUT_S = 1200.0


def tensor_bytes_here(framework: str, version_dir: Path) -> int:
    """The model's tensors' bytes, counted with its framework (run in a child process)."""
    if framework == "torch":
        import torch

        model = torch.jit.load(str(version_dir / "model.pt"), map_location="cpu")  # type: ignore[no-untyped-call]
        storages = {t.data_ptr(): t.numel() * t.element_size() for t in model.parameters()}
        storages.update({t.data_ptr(): t.numel() * t.element_size() for t in model.buffers()})
        return sum(storages.values())
    if framework == "export":
        import torch

        program = torch.export.load(str(version_dir / "model.pt2"))
        tensors = [*program.state_dict.values(), *program.constants.values()]
        storages = {
            t.data_ptr(): t.numel() * t.element_size()
            for t in tensors
            if isinstance(t, torch.Tensor)
        }
        return sum(storages.values())
    if framework == "onnx":
        import onnx
        from onnx import numpy_helper

        graph = onnx.load(str(version_dir / "model.onnx")).graph
        return sum(numpy_helper.to_array(t).nbytes for t in graph.initializer)
    import tensorflow as tf

    loaded = tf.saved_model.load(str(version_dir))
    variables = {
        id(v): v.shape.num_elements() * v.dtype.size
        for v in tf.train.TrackableView(loaded).descendants()
        if isinstance(v, tf.Variable)
    }
    return sum(variables.values())


def tensor_bytes(framework: str, version_dir: Path) -> int:
    command = [sys.executable, __file__, "--tensor-bytes", framework, str(version_dir)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return int(out.split()[-1])


def _infer_body(url: str, name: str) -> tuple[str, bytes]:
    """An OIP infer request for one row of zeros, shaped from the model's own metadata."""
    meta = get_json(url, f"/v2/models/{name}", timeout=30)
    inputs = []
    for spec in meta["inputs"]:
        shape = [1 if d < 0 else d for d in spec["shape"]]
        data = [0] * math.prod(shape)
        inputs.append({"name": spec["name"], "shape": shape, "datatype": spec["datatype"]})
        inputs[-1]["data"] = data
    return f"/v2/models/{name}/infer", json.dumps({"inputs": inputs}).encode()


def predict_each(url: str, names: list[str], times: int) -> None:
    port = int(url.rsplit(":", 1)[1])
    path, body = _infer_body(url, names[0])  # every copy has the same signature
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        for name in names:
            for _ in range(times):
                conn.request("POST", path.replace(names[0], name), body)
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    raise RuntimeError(f"{name}: HTTP {response.status}")
    finally:
        conn.close()


@contextmanager
def server(args: list[str], log: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A ``serve`` in its own session (as pack starts replicas); stopped, then killed, on exit."""
    rest = free_port()
    command = [*SHAREDSERVE, "serve", *args, "--host", "127.0.0.1", "--rest-port", str(rest)]
    command += ["--grpc-port", str(free_port()), "--shutdown-grace", "2", "--cpu-limit", "1"]
    with log.open("ab") as sink:
        proc = subprocess.Popen(  # cwd: ``-m`` imports from it before PYTHONPATH
            command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, cwd=log.parent
        )
    try:
        yield proc, f"http://127.0.0.1:{rest}"
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait(proc: subprocess.Popen[bytes], ready: object, log: Path) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not ready():  # type: ignore[operator]
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"a server did not become ready; see {log}")
        time.sleep(0.5)


def _all_ready(url: str, n: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=10)
    try:
        conn.request("POST", "/v2/repository/index", b"{}")
        index = json.loads(conn.getresponse().read())
    except (OSError, http.client.HTTPException, ValueError):
        return False
    finally:
        conn.close()
    return isinstance(index, list) and sum(m.get("state") == "READY" for m in index) == n


def names(n: int) -> list[str]:
    return [f"m{i:03d}" for i in range(n)]


def one_process(pool: Path, n: int, work: Path, predictions: int) -> Figure:
    repository = work / f"repository-{n}"
    shutil.rmtree(repository, ignore_errors=True)
    repository.mkdir()
    for name in names(n):  # hard links of distinct copies: still N distinct models
        shutil.copytree(pool / name, repository / name, copy_function=os.link)
    log = work / "serve.log"
    with server(["--model-repository", str(repository)], log) as (proc, url):
        _wait(proc, lambda: _all_ready(url, n), log)
        predict_each(url, names(n), predictions)
        time.sleep(1)
        figure = memory([proc.pid])
    shutil.rmtree(repository)
    return figure


def processes(pool: Path, n: int, work: Path, predictions: int, batch: int) -> Figure:
    log = work / "serve.log"
    with ExitStack() as stack:
        started: list[tuple[subprocess.Popen[bytes], str, str]] = []
        for first in range(0, n, batch):
            group = names(n)[first : first + batch]
            for name in group:
                args = ["--model", str(pool / name), "--name", name]
                proc, url = stack.enter_context(server(args, log))
                started.append((proc, url, name))
            for proc, url, name in started[first:]:
                _wait(proc, lambda u=url, m=name: model_state(u, m) == "AVAILABLE", log)
        for _, url, name in started:
            predict_each(url, [name], predictions)
        time.sleep(1)
        return memory([proc.pid for proc, _, _ in started])


Column = dict[int, Figure | str]
"""N -> the measured figure, or why the cell was not run."""


def prepare(work: Path, framework: str, model: str, count: int) -> tuple[Path, int]:
    """Build the model once and copy it ``count`` times; (the copies' directory, tensor bytes)."""
    built = work / "built" / framework
    command = [*SHAREDSERVE, "models", "build", model, "--framework", framework]
    subprocess.run([*command, "--out", str(built)], check=True, stdout=subprocess.DEVNULL, cwd=work)
    pool = work / f"pool-{framework}-{model}"
    for name in names(count):
        shutil.copytree(built / model, pool / name)
    return pool, tensor_bytes(framework, built / model / "1")


def processes_column(pool: Path, counts: list[int], work: Path, opts: argparse.Namespace) -> Column:
    column: Column = {}
    for n in counts:
        one = column.get(1)
        need = n * one.rss_mib if isinstance(one, Figure) else 0.0
        room = min(opts.max_gib * 1024, meminfo_mib("MemAvailable") - 2048)
        if n > 1 and (not isinstance(one, Figure) or need > room):
            column[n] = f"not run: would need ~{need / 1024:.0f} GiB"
            continue
        column[n] = processes(pool, n, work, opts.predictions, opts.start_batch)
        print(f"  {n} processes: {column[n]}", file=sys.stderr, flush=True)
    return column


def _added(column: Column, n: int) -> float | None:
    first, here = column.get(1), column.get(n)
    if n == 1 or not isinstance(first, Figure) or not isinstance(here, Figure):
        return None
    return (here.held_mib - first.held_mib) / (n - 1)


def table(label: str, size: int, one: Column, many: Column) -> list[str]:
    target = 1.3 * size / MIB + 16
    lines = [
        "",
        f"### {label}: tensors {size:,} bytes ({size / MIB:.2f} MiB); target per added model "
        f"<= 1.3 x {size / MIB:.2f} + 16 = {target:.1f} MiB",
        "",
        "| N | one process: held MiB (PSS, RSS) | per added model MiB | target "
        "| N processes: held MiB (sum of PSS, of RSS) | per added model MiB |",
        "|---|---|---|---|---|---|",
    ]
    for n in sorted(one.keys() | many.keys()):
        cells = [str(n)]
        for column, judged in ((one, True), (many, False)):
            here, added = column.get(n, "not run"), _added(column, n)
            shown = here if isinstance(here, str) else f"{here.held_mib:.0f} "
            shown += "" if isinstance(here, str) else f"({here.pss_mib:.0f}, {here.rss_mib:.0f})"
            cells += [shown, "-" if added is None else f"{added:.1f}"]
            if judged:
                cells.append("-" if added is None else ("PASS" if added <= target else "FAIL"))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _revision() -> str:
    """The commit of the sharedserve this run imports (a clean clone can stand in for a tree
    that others are editing: PYTHONPATH=CLONE)."""
    import sharedserve

    root = Path(sharedserve.__file__).resolve().parents[1]

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], check=False, capture_output=True, text=True, cwd=root)
        return done.stdout.strip()

    dirty = git("status", "--porcelain", "--", "sharedserve")
    return git("rev-parse", "--short", "HEAD") + (
        " (sharedserve/ with uncommitted edits)" * bool(dirty)
    )


def run(opts: argparse.Namespace, work: Path, head: list[str]) -> str:
    counts = sorted(set(opts.counts))
    prepared = {}
    for key in opts.models:
        framework, model = key.split(":")
        prepared[key] = prepare(work, framework, model, max(counts))
    one: dict[str, Column] = {key: {} for key in opts.models}
    for key, (pool, _) in prepared.items():  # the single-process column first, for every model
        for n in counts:
            one[key][n] = one_process(pool, n, work, opts.predictions)
            print(f"{key} one process, {n} models: {one[key][n]}", file=sys.stderr, flush=True)
    many = {key: processes_column(pool, counts, work, opts) for key, (pool, _) in prepared.items()}
    lines = [
        *head,
        f"- sharedserve revision {_revision()}",
        "",
        f"Memory read once every model is AVAILABLE and has answered {opts.predictions} OIP "
        "predictions (one row of zeros each). Held: the distinct physical pages the server "
        "processes map, each counted once (`/proc/PID/pagemap`). Every "
        "`serve` runs with `--cpu-limit 1`; N processes are started "
        f"{opts.start_batch} at a time, each as `sharedserve pack` starts a replica. Per added "
        "model: (total(N) - total(1)) / (N - 1). Target: per added model in one "
        "process <= 1.3 x the tensors' bytes + 16 MiB. N processes only where N x one "
        f"process's RSS fits in {opts.max_gib:g} GiB and the memory available.",
    ]
    for key, (_, size) in prepared.items():
        framework, model = key.split(":")
        lines += table(f"{FRAMEWORKS[framework]} `{model}`", size, one[key], many[key])
    return "\n".join(lines) + "\n"


def model_keys(text: str) -> list[str]:
    """``--models``' list, each ``FRAMEWORK:MODEL`` checked before anything is built."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    for key in keys:
        framework, _, model = key.partition(":")
        if framework not in FRAMEWORKS or model not in MODELS:
            raise argparse.ArgumentTypeError(
                f"{key!r} is not FRAMEWORK:MODEL with FRAMEWORK one of {', '.join(FRAMEWORKS)} "
                f"and MODEL one of {', '.join(MODELS)}"
            )
    return keys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models",
        type=model_keys,
        default=[f"{f}:{m}" for m in MODELS for f in FRAMEWORKS],
        help=f"FRAMEWORK:MODEL list (FRAMEWORK {', '.join(FRAMEWORKS)}; MODEL "
        f"{', '.join(MODELS)}); onnx needs the [onnx] extra and torch, tf TensorFlow",
    )
    parser.add_argument(
        "--counts", type=lambda s: [int(c) for c in s.split(",")], default=[1, 10, 50, 100]
    )
    parser.add_argument("--predictions", type=int, default=3, help="per model before reading")
    parser.add_argument("--start-batch", type=int, default=2, help="processes started at once")
    parser.add_argument("--max-gib", type=float, default=16.0, help="most for N processes")


def measure(opts: argparse.Namespace) -> None:
    """Run every row and publish the report (``opts``: ``add_arguments``'s and ``out``)."""
    if os.geteuid() != 0:  # pagemap reads every frame as 0 for others: all would look shared
        raise SystemExit("multimodel memory: run as root (it reads /proc/PID/pagemap's frames)")
    # A plain kill still stops every server started (the ExitStacks unwind on SystemExit).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    head = heading("Host memory per added model: one process against N", PACKAGES)
    with tempfile.TemporaryDirectory(prefix="multimodel-memory-") as tmp:
        publish(run(opts, Path(tmp), head), opts.out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensor-bytes", nargs=2, help=argparse.SUPPRESS)  # the child's part
    parser.add_argument("--out", type=Path)
    add_arguments(parser)
    opts = parser.parse_args()
    if opts.tensor_bytes is not None:
        print(tensor_bytes_here(opts.tensor_bytes[0], Path(opts.tensor_bytes[1])))
        return
    measure(opts)


if __name__ == "__main__":
    main()

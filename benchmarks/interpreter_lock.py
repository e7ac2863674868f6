"""What TensorFlow costs the other threads of its process: the figures behind the shared
server's thread sizing and its frozen framework (``server/process/model_server.py``,
``server/version/model_version.py``, ``benchmarks/results/multimodel_cpu.md``).

In one process pinned to one CPU (``--cpu``), TensorFlow's intra-op pool at 1 thread, its
objects frozen once imported (as ``serve`` freezes them before any model loads) and a 1 ms
switch interval (as ``serve`` sets it):

1. a thread sleeping 0.5 ms over and over beside three ``tf.saved_model.load`` of
   ``mobilenet_v2``, then beside the collection that frees one of them: how late it woke (the
   interpreter lock held by the other thread), and the collection's time;
2. full collections with four ``mobilenet_v2`` loaded and everything unfrozen: one with
   nothing to free, one that frees a model, and one with everything frozen.

Percentiles are numpy's exact ones. Prints a Markdown report; ``--out`` writes it too.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from machine import heading, publish  # benchmarks/machine.py, beside this script

SHAREDSERVE = [sys.executable, "-m", "sharedserve"]
PACKAGES = ("sharedserve", "tensorflow", "numpy")


def _tf(inter_op: int) -> Any:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    return tf


def lock_and_walk(models: Path) -> dict[str, Any]:
    """Parts 2 and 3, in this process."""
    tf = _tf(4)
    gc.collect()
    gc.freeze()  # the framework's objects, as serve freezes them
    path = str(models / "mobilenet_v2" / "1")
    sys.setswitchinterval(0.001)  # as serve sets it
    late: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            time.sleep(0.0005)
            late.append((time.perf_counter() - started - 0.0005) * 1000)

    thread = threading.Thread(target=probe)
    thread.start()
    loaded, loads = [], []
    for _ in range(3):
        started = time.perf_counter()
        loaded.append(tf.saved_model.load(path))
        loads.append(time.perf_counter() - started)
    during_loads, late[:] = np.asarray(late), []
    loaded.pop()
    started = time.perf_counter()
    gc.collect()
    freeing = (time.perf_counter() - started) * 1000
    during_collection = np.asarray(late)
    stop.set()
    thread.join()
    loaded += [tf.saved_model.load(path) for _ in range(2)]  # four resident
    gc.unfreeze()
    gc.collect()
    walks: dict[str, float] = {"tracked objects": len(gc.get_objects())}
    started = time.perf_counter()
    gc.collect()
    walks["full collection, nothing frozen, ms"] = (time.perf_counter() - started) * 1000
    loaded.pop()
    started = time.perf_counter()
    gc.collect()
    walks["full collection freeing one model, ms"] = (time.perf_counter() - started) * 1000
    gc.freeze()
    started = time.perf_counter()
    gc.collect()
    walks["full collection, all frozen, ms"] = (time.perf_counter() - started) * 1000
    return {
        "load_s": [round(s, 2) for s in loads],
        "late_during_loads": {
            **_percentiles(during_loads),
            "over_20ms": int((during_loads > 20).sum()),
        },
        "collection_freeing_one_ms": freeing,
        "late_during_collection": _percentiles(during_collection),
        "walk": walks,
    }


def _percentiles(ms: np.ndarray) -> dict[str, float]:
    return {
        "p50": float(np.percentile(ms, 50)),
        "p99": float(np.percentile(ms, 99)),
        "max": float(ms.max()),
    }


def _child(part: list[str], cpu: str) -> dict[str, Any]:
    """The measurement in a fresh process pinned to ``cpu`` (TensorFlow's pools are set once a
    process)."""
    command = ["taskset", "-c", cpu, sys.executable, __file__, "--part", *part]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def report(lock: dict[str, Any], head: list[str], cpu: str) -> str:
    loads, coll = lock["late_during_loads"], lock["late_during_collection"]
    lines = [
        *head,
        "",
        f"One process, pinned to CPU {cpu}; TensorFlow intra-op 1, its objects frozen once "
        "imported, a 1 ms switch interval.",
        "",
        f"Three loads of `mobilenet_v2`: {', '.join(f'{s:g}' for s in lock['load_s'])} s; a "
        f"thread sleeping 0.5 ms beside them woke late by p50 {loads['p50']:.2f} / p99 "
        f"{loads['p99']:.2f} / max {loads['max']:.1f} ms, {loads['over_20ms']} times by over "
        f"20 ms. The collection freeing one of them (two resident): "
        f"{lock['collection_freeing_one_ms']:.0f} ms; beside it, late by max {coll['max']:.1f} ms.",
        "",
        "Full collections with four `mobilenet_v2` loaded, the framework unfrozen:",
        "",
    ]
    lines += [f"- {k}: {v:,.{0 if 'objects' in k else 1}f}" for k, v in lock["walk"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", nargs="+", help=argparse.SUPPRESS)  # a child's part
    parser.add_argument("--cpu", default="0", help="the CPU every part runs on")
    parser.add_argument("--out", type=Path)
    opts = parser.parse_args()
    if opts.part:
        print(json.dumps(lock_and_walk(Path(opts.part[0]))))
        return
    head = heading("What TensorFlow costs the other threads of its process", PACKAGES)
    with tempfile.TemporaryDirectory(prefix="interpreter-lock-") as tmp:
        build = [*SHAREDSERVE, "models", "build", "mobilenet_v2", "--out", tmp]
        subprocess.run(build, check=True, stdout=subprocess.DEVNULL)
        lock = _child([tmp], opts.cpu)
    publish(report(lock, head, opts.cpu), opts.out)


if __name__ == "__main__":
    main()

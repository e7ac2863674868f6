"""overhead: what serving costs over the bare model call on the GPU, batching off and on.

Runs ``benchmarks/server_overhead/measure.py --framework torch`` with ``resnet50`` and
``mobilenet_v2``: in-process vs bare gRPC vs REST vs gRPC at batch 1 with 1 and 8 clients,
batching off and on, and the in-process batching ceiling (one call of 8 rows back to back) beside
what the server reaches. On a GPU a batch of 8 costs little more than one row, so this is where
batching pays.
NVML's utilisation is sampled meanwhile, to show the model ran on the GPU.
"""

# minutes: 5
# order: 40

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kit

SCRIPT = Path(__file__).resolve().parents[2] / "server_overhead" / "measure.py"
REAL = ("--models", "resnet50,mobilenet_v2", "--duration", "6", "--rounds", "3")
DRY = (
    "--models",
    "tiny",
    "--duration",
    "0.6",
    "--rounds",
    "1",
    "--warmup",
    "0.2",
    "--rewarm",
    "0.1",
)


def main() -> None:
    stage = kit.Stage.from_argv("overhead", "Server overhead on the GPU: REST, gRPC, batching")
    gpu = stage.gpu()
    md, js = stage.work / "server_overhead.md", stage.work / "server_overhead.json"
    command = [sys.executable, str(SCRIPT), "--framework", "torch", "--out", str(md)]
    command += ["--json", str(js), *(DRY if stage.dry_run else REAL)]
    backend = stage.gpu_backend()
    busy: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            value = backend.utilization_percent(gpu.uuid)
            if value is not None:
                busy.append(value)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    log = stage.work / "server_overhead.log"
    try:
        with log.open("wb") as sink:
            done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, check=False)
    finally:
        stop.set()
        sampler.join(5)
        backend.close()
    ok = done.returncode == 0 and js.exists()
    stage.check(
        "server_overhead/measure.py measured every path",
        ok,
        "exit 0" if ok else log.read_text(errors="replace")[-300:].replace("\n", " "),
    )
    stage.gpu_check(
        "the GPU was busy during the run",
        bool(busy) and max(busy) > 0,
        f"NVML utilisation max {max(busy) if busy else None}% over {len(busy)} samples",
    )
    if ok:
        stage.results = json.loads(js.read_text()) | {"gpu_util_max": max(busy) if busy else None}
        text = md.read_text()
        body = text[text.index("Framework `") :]  # the script's own head repeats ours
        stage.section(body)
    stage.finish()


if __name__ == "__main__":
    main()

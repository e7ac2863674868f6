"""mps: time-sliced sharing against CUDA MPS, side by side, at the densest feasible point.

Where ``nvidia-cuda-mps-control`` exists, ``sharedserve bench`` runs the torch ``resnet50`` at
densities 1, 2 and the densest the sweep can reach (``pack``'s even split leaves each replica
1 GiB), parallel load over gRPC, twice: time-sliced (no MPS), then under an MPS control daemon
this stage starts and stops, each replica with the ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` the allocator's ``Allocate`` gives one vGPU of that density
(``sharedserve.allocator.allocation.container_grant``). Without the control binary the stage
says so and measures nothing. A dry run measures the same two sides with the MPS variables set
but no daemon: the plumbing, not MPS.

Published anchor (NVIDIA Dynamo's GPU-sharing study, p50 only): two models per A100 keep
64-88% of their dedicated throughput under MPS partitioning and 44-73% with a memory cap alone.
"""

# minutes: 3
# order: 25

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kit
import replicas

from sharedserve.allocator.allocation import GrantOptions, container_grant, grants_by_gpu
from sharedserve.allocator.health import MPS_PID_FILE
from sharedserve.allocator.inventory import Sizing, build_inventory
from sharedserve.config import CONTEXT_RESERVE_MIB
from sharedserve.contract import MPS_ACTIVE_THREAD_PERCENTAGE as MPS_THREADS
from sharedserve.contract import MPS_PINNED_DEVICE_MEM_LIMIT as MPS_PINNED
from sharedserve.contract import MPS_PIPE_DIRECTORY

CONTROL = "nvidia-cuda-mps-control"
MODEL = "resnet50"
CANDIDATES = [1, 2, 4, 8, 16, 32]
FLOOR_MIB, RESERVE_MIB = 1024, CONTEXT_RESERVE_MIB  # as the sweep stage
DURATION, WARMUP, CONCURRENCY = 5.0, 1.0, 4


def mps_env(gpu: Any, density: int, pipe_dir: Path) -> dict[str, str]:
    """What the allocator's Allocate gives a container of one vGPU at this density."""
    inventory = build_inventory([gpu], Sizing(vgpus_per_gpu=density))
    grants = grants_by_gpu(inventory, inventory.vgpu_ids[:1], allow_multi_gpu=False)
    envs = container_grant(grants, GrantOptions(mps_pipe_dir=pipe_dir)).envs
    return {k: envs[k] for k in (MPS_PIPE_DIRECTORY, MPS_THREADS, MPS_PINNED)}


class Daemon:
    """The MPS control daemon, started for this stage and stopped at its end."""

    def __init__(self, work: Path) -> None:
        self.pipe, self.logs = work / "mps-pipe", work / "mps-log"
        for directory in (self.pipe, self.logs):
            directory.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            MPS_PIPE_DIRECTORY: str(self.pipe),
            "CUDA_MPS_LOG_DIRECTORY": str(self.logs),
        }

    def start(self) -> None:
        subprocess.run([CONTROL, "-d"], env=self.env, check=True, timeout=30)
        deadline = time.monotonic() + 15
        # The file the allocator's health check waits for too.
        while not (self.pipe / MPS_PID_FILE).is_file():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the MPS control daemon wrote no {MPS_PID_FILE} in {self.pipe}")
            time.sleep(0.2)

    def ask(self, command: str) -> str:
        done = subprocess.run(
            [CONTROL], input=command + "\n", env=self.env, capture_output=True, text=True,
            timeout=30, check=False,
        )  # fmt: skip
        return done.stdout.strip()

    def stop(self) -> None:
        self.ask("quit")

    def log_tail(self) -> str:
        path = self.logs / "control.log"
        return path.read_text(errors="replace")[-1000:] if path.exists() else ""


def main() -> None:
    stage = kit.Stage.from_argv("mps", "Time-sliced vs MPS at the densest feasible point")
    control = shutil.which(CONTROL)
    if control is None and not stage.dry_run:
        stage.unavailable = f"{CONTROL} is not on this machine's PATH; MPS cannot be measured"
        stage.results = {"mps_control": None}
        stage.section(f"`{CONTROL}` was not found: no MPS run was possible on this machine.")
        stage.finish()
        return
    gpu = stage.gpu()
    model = "tiny" if stage.dry_run else MODEL
    models = replicas.build_models([model], stage.work / "models")
    if stage.dry_run:
        # One shared density: the plumbing (MPS variables per replica), in two bench runs
        # rather than four of the test suite's minutes.
        densities, duration, warmup = [2], 1.0, 0.5
    else:
        feasible = replicas.feasible_densities(CANDIDATES, gpu.memory_mib, RESERVE_MIB, FLOOR_MIB)
        densities, duration, warmup = sorted({1, 2, feasible[-1]}), DURATION, WARMUP
    common = ["--pattern", "parallel", "--concurrency", str(CONCURRENCY), "--protocol", "grpc"]
    common += ["--duration", str(duration), "--warmup", str(warmup), "--cpu-limit", "1"]
    daemon = Daemon(stage.work)
    sides: dict[str, list[dict[str, Any]]] = {"time-sliced": [], "mps": []}
    for density in densities:
        out = stage.work / f"time-sliced-{density}"
        report = replicas.run_bench(
            stage, out, models / model, "--densities", str(density), *common
        )
        sides["time-sliced"].append(row_of(density, report, {}))
    started = False
    server_list = ""
    try:
        if control is not None:
            daemon.start()
            started = True
        for density in densities:
            env = mps_env(gpu, density, daemon.pipe)
            out = stage.work / f"mps-{density}"
            report = replicas.run_bench(
                stage, out, models / model, "--densities", str(density), *common, env=env
            )
            sides["mps"].append(row_of(density, report, env))
        if started:
            server_list = daemon.ask("get_server_list")
    except (subprocess.SubprocessError, RuntimeError, OSError) as e:
        stage.check("MPS control daemon started", False, f"{e}; {daemon.log_tail()}")
    finally:
        if started:
            daemon.stop()
    stage.results = {
        "mps_control": control,
        "model": model,
        "densities": densities,
        "settings": {"duration_s": duration, "warmup_s": warmup, "concurrency": CONCURRENCY},
        "mps_server_pids": server_list.split() if server_list else [],
        "sides": sides,
    }
    judge(stage, sides, server_list, started)
    report_md(stage, sides)
    stage.finish()


def row_of(density: int, report: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    if "error" in report:
        return {"density": density, "error": report["error"], "env": env}
    row = report["rows"][0]
    keys = ("qps", "p50_ms", "p99_ms", "errors", "gpu_util_mean", "gpu_mem_used_mib")
    return {"density": density, **{k: row[k] for k in keys}, "env": env}


def judge(
    stage: kit.Stage, sides: dict[str, list[dict[str, Any]]], servers: str, started: bool
) -> None:
    for side, rows in sides.items():
        failed = [r for r in rows if "error" in r or r["errors"]]
        stage.check(
            f"{side}: every density served without errors",
            bool(rows) and not failed,
            "; ".join(f"density {r['density']}: {r.get('error', '')[:150]}" for r in failed)
            or f"densities {[r['density'] for r in rows]}",
        )
    stage.gpu_check(
        "the replicas ran as clients of an MPS server",
        started and bool(servers),
        f"get_server_list: {servers or 'none'}",
    )


def report_md(stage: kit.Stage, sides: dict[str, list[dict[str, Any]]]) -> None:
    base = {r["density"]: r for r in sides["time-sliced"] if "qps" in r}
    one = base.get(1)
    table = []
    for side, rows in sides.items():
        for r in rows:
            if "qps" not in r:
                table.append([side, r["density"], *[None] * 6, "failed"])
                continue
            kept = None
            if one and r["density"] > 1:
                kept = r["qps"] / (r["density"] * one["qps"])
            table.append(
                [
                    side, r["density"], r["qps"], kept, r["p50_ms"], r["p99_ms"],
                    r["gpu_util_mean"],
                    r["env"].get(MPS_THREADS, "-"),
                    r["env"].get(MPS_PINNED, "-"),
                ]
            )  # fmt: skip
    settings = stage.results["settings"]
    stage.section(
        f"`{stage.results['model']}`, parallel load ({settings['concurrency']} users per "
        f"replica) over gRPC, {settings['warmup_s']:g} s warm-up and {settings['duration_s']:g} "
        "s measured per point, 1 core per replica. *kept* = QPS per replica over the "
        "time-sliced density-1 QPS: the share of dedicated throughput each replica keeps "
        "(NVIDIA Dynamo's study: 64-88% under MPS and 44-73% with a memory cap alone, two "
        "models per A100, p50 only).",
        "",
        *kit.markdown_table(
            [
                *("side", "density", "QPS", "kept", "p50 ms", "p99 ms", "GPU util %"),
                *("MPS thread %", "MPS pinned memory"),
            ],
            table,
        ),
    )


if __name__ == "__main__":
    main()

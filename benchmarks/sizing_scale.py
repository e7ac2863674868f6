"""How long does fleet sizing take at 100, 1,000 and 10,000 models, and how close to the lower
bound does its packing land?

For each size it writes, into a temp dir, a fleet file (YAML, as a user would) and a few dozen
synthetic profiles in bench's own report.json format (rows built by bench's ``build_row``, as
tests/integration/size/test_size.py builds them): each profile a model of its own memory footprint,
QPS per replica, GPU utilisation and p99, measured at densities 1, 2, 4, ... up to its own
densest. Every fleet model draws a profile, a peak QPS (log-normal: few big models, many small),
an objective above its profile's p99 alone and a ``min_replicas``; a few cap replicas per GPU.
Seeded: the same fleets every run.

Then it times the real ``size`` path end to end (``sharedserve.size.run.plan_fleet``: read the
fleet and its profiles, size each model, pack, write the plan's files), and apart its steps up
to the packing (``load_fleet`` and ``load_profiles``, ``demands``, ``place``), so that the rest
(building the plan and writing its files) shows too. Prints a Markdown report; ``--out`` also
writes it.

    .venv/bin/python benchmarks/sizing_scale.py --out benchmarks/results/sizing_scale.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from machine import heading, publish  # benchmarks/machine.py, beside this script

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.summary import Pattern, Samples, TargetResult, build_row
from sharedserve.placement import OpenEnded, place
from sharedserve.size.demand import demands
from sharedserve.size.fleet import load_fleet
from sharedserve.size.grouping import group
from sharedserve.size.profile import load_profiles
from sharedserve.size.run import plan_fleet

PACKAGES = ("sharedserve", "numpy", "PyYAML")
GPU_NAME, GPU_MIB = "NVIDIA H100 80GB HBM3", 81559
GPU = {"name": GPU_NAME, "memory_mib": GPU_MIB}  # as a report's environment lists it
RESERVE_MIB, TARGET, WINDOW_S = 512, 0.8, 10.0


def _profile(rng: random.Random, name: str) -> tuple[dict[str, Any], float]:
    """A density sweep of one synthetic model as a bench report, and its p99 alone (ms)."""
    memory = math.exp(rng.uniform(math.log(300), math.log(30_000)))  # MiB a replica
    qps = math.exp(rng.uniform(math.log(20), math.log(2_000)))  # per replica, alone
    util = rng.uniform(15, 90)  # GPU utilisation, %, of one replica alone at that QPS
    p99 = math.exp(rng.uniform(math.log(4), math.log(150)))  # ms, alone
    densest = rng.choice([2, 4, 8, 16, 32])
    rows, density = [], 1
    while density <= densest and density * (memory + RESERVE_MIB) <= GPU_MIB:
        # Past a busy GPU, replicas share its time: each serves less, and waits longer.
        share = min(1.0, 95 / (density * util))
        tail_us = p99 * 1000 * (1 + 0.1 * (density - 1)) / share
        targets = []
        for i in range(density):
            served = round(qps * share * WINDOW_S)
            hist = LatencyHistogram()  # a tenth of the requests at the tail: it is the p99
            hist.record(round(0.4 * tail_us), served - served // 10)
            hist.record(round(tail_us), served // 10)
            targets.append(TargetResult(f"{name}-{i}", served, 0, 0, hist, model=name,
                                        gpu_mem_mib=round(memory), cpu_limit=1.0))  # fmt: skip
        samples = Samples(gpu_util_mean=min(95.0, density * util), gpu_util_max=100.0,
                          gpu_mem_used_mib=None, cpu_util_mean=0.3 * density)  # fmt: skip
        rows.append(build_row(density=density, pattern=Pattern.PARALLEL, window_s=WINDOW_S,
                              targets=targets, samples=samples, loadgen_cpu_util=0.2,
                              slo_p99_ms=None, gpu_name=GPU_NAME))  # fmt: skip
        density *= 2
    return {"rows": rows, "environment": {"gpus": [GPU]}}, p99


def write_fleet(work: Path, models: int, profiles: int, seed: int) -> Path:
    """A fleet of ``models`` over ``profiles`` synthetic reports, under ``work``; its path."""
    rng = random.Random(seed)
    alone = []
    for i in range(profiles):
        report, p99 = _profile(rng, f"p{i:02d}")
        (work / "profiles" / f"p{i:02d}").mkdir(parents=True)
        (work / "profiles" / f"p{i:02d}" / "report.json").write_text(json.dumps(report))
        alone.append(p99)
    entries = []
    for i in range(models):
        p = rng.randrange(profiles)
        entry: dict[str, Any] = {
            "name": f"m{i:05d}",
            "profile": f"profiles/p{p:02d}/report.json",
            "profile_model": f"p{p:02d}",
            "peak_qps": round(min(math.exp(rng.gauss(math.log(20), 2.0)), 50_000), 3),
            "slo_p99_ms": round(alone[p] * rng.uniform(1.2, 4.0), 1),
            "min_replicas": rng.choice([1, 2, 2, 2, 3]),
        }
        if rng.random() < 0.1:
            entry["max_replicas_per_gpu"] = rng.choice([2, 4, 8])
        entries.append(entry)
    fleet = {
        "gpu": {"name": "H100-80GB", "memory_mib": GPU_MIB, "price_per_hour": 3.0},
        "node": {"gpus": 8, "cpu_cores": 128},
        "utilization_target": TARGET,
        "context_reserve_mib": RESERVE_MIB,
        "models": entries,
    }
    path = work / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    return path


def measure(models: int, profiles: int, seed: int) -> dict[str, Any]:
    """One size: the fleet planned end to end; then, apart, its steps up to the packing."""
    with tempfile.TemporaryDirectory() as tmp:
        fleet_path = write_fleet(Path(tmp), models, profiles, seed)
        start = time.perf_counter()
        plan = plan_fleet(fleet_path, Path(tmp) / "plan")
        total = time.perf_counter() - start
        start = time.perf_counter()
        fleet = load_fleet(fleet_path)
        reports = {str(m.profile): m.profile for m in fleet.models}
        loaded = {key: load_profiles(path) for key, path in reports.items()}
        read = time.perf_counter() - start
        start = time.perf_counter()
        wanted, _ = demands(fleet, loaded)
        sized = time.perf_counter() - start
        start = time.perf_counter()
        grouping = group(wanted, gpu_memory_mib=fleet.gpu.memory_mib, reserve_mib=RESERVE_MIB,
                         target=TARGET)  # fmt: skip
        packing = place(grouping.requests(wanted),
                        OpenEnded(fleet.gpu.memory_mib, fleet.node.gpus),
                        reserve_mib=RESERVE_MIB, target=TARGET)  # fmt: skip
        packed = time.perf_counter() - start
    if len(packing.gpus) != plan.gpu_count:
        raise RuntimeError("the packing alone is not the plan's: the benchmark is out of date")
    bound: dict[str, int] = dataclasses.asdict(plan.lower_bound)
    return {
        "models": models,
        "replicas": sum(d.replicas for d in wanted),
        "gpus": plan.gpu_count,
        "dedicated_gpus": plan.process_per_replica_gpu_count,
        "shared": sum(len(s.models) for s in plan.servers),
        "bound": plan.lower_bound_gpus,
        "binding": max(bound, key=lambda k: bound[k]),
        "above": plan.above_bound,
        "total_s": total,
        "read_s": read,
        "demands_s": sized,
        "pack_s": packed,
    }


def table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| models | replicas | models shared | GPUs | a process per replica GPUs "
        "| lower bound (binding) | above bound | end to end s "
        "| reading fleet and profiles s | demands s | grouping and packing s "
        "| the rest (plan files) s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rest = r["total_s"] - r["read_s"] - r["demands_s"] - r["pack_s"]
        lines.append(
            f"| {r['models']:,} | {r['replicas']:,} | {r['shared']:,} | {r['gpus']:,} "
            f"| {r['dedicated_gpus']:,} | {r['bound']:,} "
            f"({r['binding']}) | {r['above']:.3f}x | {r['total_s']:.2f} | {r['read_s']:.2f} "
            f"| {r['demands_s']:.2f} | {r['pack_s']:.2f} | {rest:.2f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sizes", default="100,1000,10000", help="models per fleet")
    parser.add_argument("--profiles", type=int, default=40)
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args()
    results = []
    for models in (int(s) for s in args.sizes.split(",")):
        results.append(measure(models, args.profiles, args.seed + models))
        print(table(results)[-1], flush=True)
    lines = [
        *heading("Fleet sizing at scale: time, and GPUs against the lower bound", PACKAGES),
        "",
        f"Synthetic fleets on {GPU_NAME} GPUs ({GPU_MIB:,} MiB, 8 to a node, "
        f"{TARGET:.0%} utilisation target, {RESERVE_MIB} MiB reserve a process); "
        f"{args.profiles} synthetic profiles (bench report.json files), seed {args.seed} plus "
        "the fleet's size. See the script's docstring for how they are drawn. End to end is "
        "`plan_fleet` (`sharedserve size --fleet` without its CLI): it reads the YAML fleet file "
        "and the profiles, sizes every model, gathers the cold ones into shared servers "
        "(`size/grouping.py`), packs them, packs again with every model dedicated (the "
        "process-per-replica cost), and writes the plan's files (plan.json, plan.md, plan.html, "
        "k8s.yaml). The steps up to the packing are then timed apart on the same files; the rest "
        "is end to end less those: the second packing, building the plan and writing its files. "
        "One run each, wall time.",
        "",
        *table(results),
        "",
    ]
    publish("\n".join(lines), args.out)


if __name__ == "__main__":
    main()

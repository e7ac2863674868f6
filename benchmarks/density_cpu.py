"""Density sweep of mobilenet_v2 on this machine's CPUs, sequential and parallel, as one table.

Runs `sharedserve bench` twice (the commands are printed into the result) and condenses the two
report.json files into benchmarks/results/density_cpu.md. No GPU: every GPU column is null, and
with all replicas sharing the same few cores the table shows CPU contention, not GPU sharing. It
is the harness's end-to-end result on this machine, and the same command runs on a GPU host.

    .venv/bin/python benchmarks/density_cpu.py --out benchmarks/results/density_cpu.md
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from machine import publish  # benchmarks/machine.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
SHAREDSERVE = [sys.executable, "-m", "sharedserve"]


def _fmt(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def _bench(
    models: Path, pattern: str, args: argparse.Namespace, out: Path
) -> tuple[list[str], dict[str, Any]]:
    command = [
        "bench",
        "--model",
        str(models / "mobilenet_v2"),
        "--densities",
        args.densities,
        "--pattern",
        pattern,
        "--duration",
        str(args.duration),
        "--warmup",
        str(args.warmup),
        "--slo-p99-ms",
        str(args.slo),
        "--cpu-limit",
        str(args.cpu_limit),
        "--out",
        str(out),
    ]
    if pattern == "parallel":
        command += ["--concurrency", str(args.concurrency)]
    subprocess.run([*SHAREDSERVE, *command], check=True, cwd=ROOT)
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return command, report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--densities", default="1,2,4,8")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--cpu-limit", type=float, default=1.0)
    parser.add_argument("--slo", type=float, default=500.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build = [*SHAREDSERVE, "models", "build", "mobilenet_v2", "--out", str(work / "models")]
        subprocess.run(build, check=True, cwd=ROOT)
        runs = [_bench(work / "models", p, args, work / p) for p in ("sequential", "parallel")]
    env = runs[0][1]["environment"]
    lines = [
        "# Density sweep: mobilenet_v2 on CPU (no GPU on this machine)",
        "",
        "Made with `.venv/bin/python benchmarks/density_cpu.py --out "
        "benchmarks/results/density_cpu.md`, which builds `mobilenet_v2` (random weights) and "
        "runs:",
        "",
    ]
    for command, _ in runs:
        shown = [
            ("MODELS/mobilenet_v2" if "mobilenet_v2" in c else ("OUT" if c.startswith("/") else c))
            for c in command
        ]
        lines.append(f"    sharedserve {shlex.join(shown)}")
    lines += [
        "",
        f"Machine: {env['cpu']}, {env['cpu_count']} CPUs, no GPU; Python {env['python']}; "
        + ", ".join(f"{k} {v}" for k, v in env["packages"].items() if v),
        "",
        f"Every replica gets a {args.cpu_limit:g}-core CFS quota (its own cgroup) on a machine "
        f"with {env['cpu_count']} cores, so past density {env['cpu_count']} the replicas compete "
        "for the same cores and the load generator shares them too: this measures CPU contention "
        "and the harness itself, not GPU sharing. GPU columns are null because no GPU was "
        "sampled.",
        "",
        "| pattern | density | requests | errors | QPS | p50 ms | p99 ms | p99.9 ms | scaling | "
        f"server CPU (cores) | loadgen CPU | SLO p99 <= {args.slo:g} ms | gpu util |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for _, report in runs:
        for r in report["rows"]:
            lines.append(
                "| "
                + " | ".join(
                    _fmt(v)
                    for v in (
                        r["pattern"],
                        r["density"],
                        r["requests"],
                        r["errors"],
                        r["qps"],
                        r["p50_ms"],
                        r["p99_ms"],
                        r["p999_ms"],
                        r["scaling_efficiency"],
                        r["cpu_util_mean"],
                        r["loadgen_cpu_util"],
                        r["slo_met"],
                        r["gpu_util_mean"],
                    )
                )
                + " |"
            )
    lines.append("")
    for _, report in runs:
        rec = report["recommendation"]
        pattern = report["settings"]["pattern"]
        lines.append(f"- {pattern}: recommended density {_fmt(rec['density'])} — {rec['reason']}")
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()

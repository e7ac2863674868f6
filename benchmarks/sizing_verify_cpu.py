"""A plan's prediction against a measurement: three models sized from CPU profiles, one GPU's
share run on this machine at its planned rates (``sharedserve size --verify``).

The profiles are the committed ones of examples/fleet-500 (``sharedserve profile`` of tiny,
mobilenet_v2 and resnet50 on this 2-core machine, one core a replica). The fleet asks for the
three models at modest peaks with two replicas each, so that every GPU of the plan holds one
replica of each: the share verified is a real mix. The "GPU" is this host; its busy shares come
from CPU throughput, and nothing here is a GPU figure. Builds the models (random weights) into a
temp dir, runs the CLI as a user would (``size --fleet``, then ``size --verify`` of GPU 0), and
writes predicted against measured QPS and p99 per model, with each prediction's error.

    .venv/bin/python benchmarks/sizing_verify_cpu.py --out benchmarks/results/sizing_verify_cpu.md
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

from machine import heading, publish  # benchmarks/machine.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "examples" / "fleet-500" / "profiles"
SHAREDSERVE = [sys.executable, "-m", "sharedserve"]
PACKAGES = ("sharedserve", "tensorflow", "locust")
# name -> (peak QPS, p99 objective ms): two replicas each, a third to half of a replica's
# capacity each, objectives a team might set for them on two CPU cores.
FLEET = {"tiny": (100, 50), "mobilenet_v2": (8, 500), "resnet50": (3, 1000)}


def _fleet(work: Path) -> Path:
    lines = [
        "gpu: {name: CPU host, memory_mib: 16384, price_per_hour: 1.0}",
        "node: {gpus: 1, cpu_cores: 2}",
        "utilization_target: 0.8",
        "models:",
    ]
    for name, (peak, slo) in FLEET.items():
        lines.append(
            f"  - {{name: {name}, profile: {PROFILES / name}, model: {work / 'models' / name}, "
            f"peak_qps: {peak}, slo_p99_ms: {slo}}}"
        )
    path = work / "fleet.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _error(predicted: float | None, measured: float | None) -> str:
    if predicted is None or not measured:
        return "—"
    return f"{(predicted - measured) / measured:+.0%}"


def _table(plan: dict[str, Any], verified: dict[str, Any]) -> list[str]:
    planned = {m["name"]: m for m in plan["models"]}
    lines = [
        "| model | replicas | QPS planned | QPS measured | QPS error | p99 predicted ms "
        "| p99 measured ms | p99 error | p99 at capacity ms (its point) | its error "
        "| objective ms | held |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in verified["models"]:
        p = planned[m["model"]]
        point = f"{p['measured_at_density']} a GPU, {p['capacity_qps_per_replica']:g} QPS"
        lines.append(
            f"| {m['model']} | {m['replicas']} | {m['planned_qps']:g} | {m['measured_qps']:g} "
            f"| {_error(m['planned_qps'], m['measured_qps'])} | {m['predicted_p99_ms']:g} "
            f"| {m['measured_p99_ms']:g} | {_error(m['predicted_p99_ms'], m['measured_p99_ms'])} "
            f"| {p['p99_at_capacity_ms']:g} ({point}) "
            f"| {_error(p['p99_at_capacity_ms'], m['measured_p99_ms'])} | {m['slo_p99_ms']:g} "
            f"| {'yes' if m['slo_met'] else 'NO'} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build = [*SHAREDSERVE, "models", "build", *FLEET, "--out", str(work / "models")]
        subprocess.run(build, check=True, stdout=subprocess.DEVNULL)
        fleet = _fleet(work)
        subprocess.run([*SHAREDSERVE, "size", "--fleet", str(fleet), "--out", str(work / "plan")],
                       check=True)  # fmt: skip
        spec = work / "plan" / "gpu-000.yaml"
        verify = [*SHAREDSERVE, "size", "--verify", str(spec), "--duration", str(args.duration),
                  "--warmup", str(args.warmup)]  # fmt: skip
        held = subprocess.run(verify, check=False).returncode == 0
        plan = json.loads((work / "plan" / "plan.json").read_text())
        verified = json.loads((work / "plan" / "verify-gpu-000" / "verify.json").read_text())
    shown = ["sharedserve", "size", "--verify", "plan/gpu-000.yaml", *verify[6:]]
    shares = ", ".join(f"{r['model']} ({r['busy_share']:.0%})" for r in plan["gpus"][0]["replicas"])
    lines = [
        *heading("Sizing: predicted against measured on this CPU", PACKAGES),
        "",
        "The fleet (peak QPS, p99 objective ms): "
        + ", ".join(f"{n} ({peak}, {slo})" for n, (peak, slo) in FLEET.items())
        + f", two replicas each, sized from the CPU profiles in examples/fleet-500/profiles. "
        f'The plan: {plan["gpu_count"]} "GPUs" (this host\'s worth each) for '
        f"{sum(m['replicas'] for m in plan['models'])} replicas. GPU 0 holds {shares} (busy "
        f"share from throughput). Verified with `{shlex.join(shown)}`: open loop (Poisson), "
        "each model at its planned rate, "
        f"{args.duration:g} s measured after {args.warmup:g} s.",
        "",
        *_table(plan, verified),
        "",
        f"Every objective held: {'yes' if held else 'no'}. Error is (predicted - measured) / "
        "measured. The predicted p99 is the plan's for GPU 0: the model's sequential profile "
        f"row at the fewest replicas no fewer than the GPU's {len(plan['gpus'][0]['replicas'])} "
        "(one request in flight a replica, beside as many replicas of the same model). The p99 "
        "at capacity is the profile's at the point the replica count was sized from (the "
        "highest QPS per replica that met the objective, closed loop at saturation), which the "
        "plan predicted before.",
        "",
    ]
    publish("\n".join(lines), args.out)


if __name__ == "__main__":
    main()

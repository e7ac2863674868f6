"""The example mix (examples/mix.yaml) at scales 1, 2 and 4 on this machine's CPUs, per model.

Builds the mix's models (random weights) beside a copy of the spec, so its relative model paths
resolve as they do in a checkout, runs `sharedserve bench --spec` once (the command is printed
into the result) and condenses its report.json into benchmarks/results/mix_cpu.md: per scale and
per model, QPS, p50/p99, the model's own objective and whether it met it, CPU throttling, and the
recommendation. No GPU: every GPU figure is null, and with every replica on the same two cores
this shows the mix competing for CPU, not for a GPU; the same command runs on a GPU host.

    .venv/bin/python benchmarks/mix_cpu.py --out benchmarks/results/mix_cpu.md
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from machine import heading, publish  # benchmarks/machine.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
SHAREDSERVE = [sys.executable, "-m", "sharedserve"]
PACKAGES = ("sharedserve", "tensorflow", "torch", "locust")


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def _build(work: Path) -> Path:
    """The models where examples/mix.yaml expects them, relative to a copy of it."""
    build = [*SHAREDSERVE, "models", "build"]
    subprocess.run([*build, "tiny", "mobilenet_v2", "--out", str(work / "models")], check=True)
    torch = [*build, "resnet50", "--framework", "torch", "--out", str(work / "torch-models")]
    subprocess.run(torch, check=True)
    (work / "examples").mkdir()
    return Path(shutil.copy(ROOT / "examples" / "mix.yaml", work / "examples" / "mix.yaml"))


# (heading, key) of the per-model table, after scale, replicas and model; and of the per-scale one.
_MODEL = (
    ("QPS", "qps"), ("p50 ms", "p50_ms"), ("p99 ms", "p99_ms"), ("p99.9 ms", "p999_ms"),
    ("objective ms", "slo_p99_ms"), ("met", "slo_met"), ("throttled", "cpu_throttled_share"),
    ("errors", "errors"), ("dropped", "dropped"),
)  # fmt: skip
_ROW = (
    ("scale", "scale"), ("replicas", "density"), ("QPS", "qps"), ("p99 ms", "p99_ms"),
    ("server CPU (cores)", "cpu_util_mean"), ("loadgen CPU", "loadgen_cpu_util"),
    ("late sent", "late_share"), ("stable", "stable"),
    ("every model met its objective", "slo_met"),
)  # fmt: skip


def _markdown(headings: list[str], lines: list[list[Any]]) -> list[str]:
    return [
        "| " + " | ".join(headings) + " |",
        "|" + " --- |" * len(headings),
        *("| " + " | ".join(_fmt(c) for c in line) + " |" for line in lines),
    ]


def _table(report: dict[str, Any]) -> list[str]:
    lines = [
        [row["scale"], m["replicas"], name, *(m[key] for _, key in _MODEL)]
        for row in report["rows"]
        for name, m in row["models"].items()
    ]
    return _markdown(["scale", "replicas", "model", *(h for h, _ in _MODEL)], lines)


def _rows(report: dict[str, Any]) -> list[str]:
    lines = [[r[key] for _, key in _ROW] for r in report["rows"]]
    return _markdown([h for h, _ in _ROW], lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--scales", default="1,2,4")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--stability-windows", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        spec = _build(work)
        command = [
            *("bench", "--spec", str(spec), "--scales", args.scales, "--pattern", "poisson"),
            *("--rate", f"{args.rate:g}", "--duration", f"{args.duration:g}"),
            *("--stability-windows", str(args.stability_windows)),
            *("--warmup", f"{args.warmup:g}", "--out", str(work / "report")),
        ]
        subprocess.run([*SHAREDSERVE, *command], check=True, cwd=ROOT)
        report: dict[str, Any] = json.loads((work / "report" / "report.json").read_text())
    shown = ["examples/mix.yaml" if c == str(spec) else c for c in command]
    shown = ["OUT" if c.startswith(str(work)) else c for c in shown]
    rec = report["recommendation"]
    lines = [
        *heading("The example mix on CPU: per-model P99 and QPS per scale", PACKAGES),
        "",
        "It builds the mix's models (random weights) beside a copy of `examples/mix.yaml`, then "
        "runs:",
        "",
        f"    sharedserve {shlex.join(shown)}",
        "",
        "The mix at scale 1 is `tiny` x4 (weight 6, objective 50 ms), `mobilenet_v2` x2 (weight "
        "2, 500 ms) and a batching TorchScript `resnet50` x1 (weight 1, 1000 ms), each replica "
        "held to one core by its own cgroup. Open loop: "
        f"{args.rate:g} requests/s at scale 1, split by weight (tiny 2/3, mobilenet_v2 2/9, "
        "resnet50 1/9) and then over each model's replicas; scale s offers s times as much, so "
        "every replica carries the same load at every scale and only the packing changes. "
        f"Each scale is measured in windows of {args.duration / args.stability_windows:g} s "
        f"until the last {args.stability_windows} agree within 10% on QPS and p99 (at most "
        f"{3 * args.duration:g} s); at a few requests per second per model a window's p99 rests "
        "on few requests, so long windows are needed for a row to count as stable.",
        "",
        "This machine has two cores and no GPU: at scale 4 twenty-eight servers and the load "
        "generator share them, so what breaks first is CPU, not GPU memory or time-slicing. GPU "
        "columns are null (nothing was sampled). A GPU run of the same mix is the GPU proof "
        "kit's `mix` stage.",
        "",
        "## Per model",
        "",
        *_table(report),
        "",
        "## Per scale",
        "",
        *_rows(report),
        "",
        "Recommendation: "
        + ("none" if rec["scale"] is None else f"scale {rec['scale']}")
        + f" ({rec['reason']}).",
        "",
    ]
    publish("\n".join(lines), args.out)


if __name__ == "__main__":
    main()

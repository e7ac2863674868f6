"""mix: the example mix of three models on one GPU, at scales 1, 2 and 4, per model.

``sharedserve bench --spec`` with the torch build of ``examples/mix.yaml``: ``tiny`` x4,
``mobilenet_v2`` x2 and a batching ``resnet50`` x1 at scale 1, each with its own share of the
traffic and its own P99 objective, open-loop load split by weight. No entry sets a cap, so
``pack`` shares what the GPU has after each replica's context reserve in proportion to each
model's weights on disk: the caps are enforced (the env contract, read back from every replica's
``/sharedserve/v1/limits``), and NVML gives each process's peak memory and the GPU's utilisation.
The checks: every scale measured without errors, the caps enforced, per-process and per-GPU
figures in every row, and each replica within its cap plus the context reserve.
"""

# minutes: 4
# order: 35

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kit
import replicas

from sharedserve.config import CONTEXT_RESERVE_MIB

# (model, replicas at scale 1, weight, P99 objective in ms); objectives for a GPU, not a laptop.
MIX = [
    ("tiny", 4, 6, 20.0),
    ("mobilenet_v2", 2, 2, 50.0),
    ("resnet50", 1, 1, 100.0),
]
BATCHING = ["--enable-batching", "--max-batch-size", "8", "--batch-timeout-micros", "2000"]
SCALES = [1, 2, 4]
RATE = 300.0  # requests/s of the whole mix at scale 1
RESERVE_MIB = CONTEXT_RESERVE_MIB  # pack's --context-reserve-mib default
DURATION, WARMUP = 6.0, 2.0

ROW_KEYS = (
    *("scale", "density", "requests", "errors", "qps", "p99_ms", "gpu_util_mean"),
    *("gpu_util_max", "gpu_mem_used_mib", "cpu_util_mean", "loadgen_cpu_util", "slo_met"),
)
MODEL_KEYS = (
    *("replicas", "qps", "p50_ms", "p99_ms", "p999_ms", "slo_p99_ms", "slo_met"),
    *("gpu_memory_fraction", "gpu_mem_mib", "errors", "dropped"),
)


def write_spec(path: Path, models: Path, mix: list[tuple[str, int, int, float]]) -> Path:
    lines = ["cpu_limit: 1", "models:"]
    for name, count, weight, slo in mix:
        lines += [
            f"  - model: {models / name}",
            f"    replicas: {count}",
            f"    weight: {weight}",
            f"    slo_p99_ms: {slo:g}",
        ]
        if name == "resnet50":
            lines.append(f"    serve_args: [{', '.join(BATCHING)}]")
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    stage = kit.Stage.from_argv("mix", "A mix of three models on one GPU: per-model P99 per scale")
    gpu = stage.gpu()
    if stage.dry_run:
        # Small models and short windows: the code path, not the figures.
        mix = [("tiny", 1, 3, 2000.0), ("mobilenet_v2", 1, 1, 4000.0)]
        scales, duration, warmup, rate = [1, 2], 1.0, 0.5, 10.0
    else:
        mix, scales, duration, warmup, rate = MIX, SCALES, DURATION, WARMUP, RATE
    models = replicas.build_models([m[0] for m in mix], stage.work / "models")
    spec = write_spec(stage.work / "mix.yaml", models, mix)
    started = time.time()
    report = replicas.run_bench(
        stage,
        stage.work / "report",
        None,
        *("--spec", str(spec), "--scales", ",".join(map(str, scales))),
        *("--pattern", "poisson", "--rate", f"{rate:g}", "--protocol", "grpc"),
        *("--duration", f"{duration:g}", "--warmup", f"{warmup:g}", "--stability-windows", "1"),
    )
    stage.results = {
        "gpu": gpu.uuid,
        "mix": [
            dict(zip(("model", "replicas", "weight", "slo_p99_ms"), m, strict=True)) for m in mix
        ],
        "settings": {"scales": scales, "rate": rate, "duration_s": duration, "warmup_s": warmup},
        "seconds_bench": round(time.time() - started, 1),
    }
    if "error" in report:
        stage.results["error"] = report["error"]
        stage.check("bench --spec ran", False, report["error"].splitlines()[0][:200])
        stage.finish()
        return
    rows = report["rows"]
    stage.results["rows"] = [
        {k: r.get(k) for k in ROW_KEYS}
        | {"models": {n: {k: m.get(k) for k in MODEL_KEYS} for n, m in r["models"].items()}}
        | {"gpus": r.get("gpus")}
        for r in rows
    ]
    stage.results["recommendation"] = report["recommendation"]
    judge(stage, report, scales, gpu.memory_mib)
    describe(stage)
    stage.finish()


def judge(stage: kit.Stage, report: dict[str, Any], scales: list[int], gpu_mib: int) -> None:
    rows = report["rows"]
    errors = sum(r["errors"] for r in rows)
    stage.check(
        "every scale measured without errors",
        [r["scale"] for r in rows] == scales and errors == 0,
        f"scales {[r['scale'] for r in rows]}; {errors} errors",
    )
    names = [m["model"] for m in stage.results["mix"]]
    stage.check(
        "every row has every model, each judged against its own objective",
        all(list(r["models"]) == names for r in rows)
        and all(m["slo_met"] is not None for r in rows for m in r["models"].values()),
        f"models {names}",
    )
    limits = [g["limits"] for g in report["settings"]["replica_limits"]]
    stage.gpu_check(
        "every replica's cap is enforced (its /sharedserve/v1/limits)",
        bool(limits) and all(lim.get("gpu_memory_enforced") is True for lim in limits),
        f"{len(limits)} groups of replicas",
    )
    stage.gpu_check(
        "per-process GPU memory and per-GPU figures in every row",
        all(m.get("gpu_mem_mib") is not None for r in rows for m in r["per_model"])
        and all(r.get("gpus") for r in rows),
        "NVML figures in every row",
    )
    over = [
        f"{m['name']} {m['gpu_mem_mib']} MiB"
        for r in rows
        for m in r["per_model"]
        if m.get("gpu_mem_mib") is not None
        and m.get("gpu_memory_fraction") is not None
        and m["gpu_mem_mib"] > m["gpu_memory_fraction"] * gpu_mib + RESERVE_MIB
    ]
    stage.gpu_check(
        "each replica within its cap plus the context reserve (NVML peak)",
        not over and any(m.get("gpu_mem_mib") for r in rows for m in r["per_model"]),
        "; ".join(over[:5]) or f"cap + {RESERVE_MIB} MiB held by every replica",
    )
    if stage.dry_run:
        stage.check(
            "no GPU figure on a simulated GPU",
            all(r["gpus"] is None and r["gpu_util_mean"] is None for r in rows)
            and all(m["gpu_mem_mib"] is None for r in rows for m in r["models"].values()),
            "GPU columns null",
        )


def describe(stage: kit.Stage) -> None:
    header = [
        *("scale", "model", "replicas", "QPS", "p50 ms", "p99 ms", "p99.9 ms", "objective ms"),
        *("met", "cap (share)", "peak MiB", "errors", "dropped"),
    ]
    table = []
    for r in stage.results["rows"]:
        for name, m in r["models"].items():
            table.append(
                [
                    *(r["scale"], name, m["replicas"], m["qps"], m["p50_ms"], m["p99_ms"]),
                    *(m["p999_ms"], m["slo_p99_ms"], "yes" if m["slo_met"] else "no"),
                    *(m["gpu_memory_fraction"], m["gpu_mem_mib"], m["errors"], m["dropped"]),
                ]
            )
    gpus = [
        [r["scale"], g["name"], g["util_mean"], g["util_max"], g["mem_used_mib"]]
        for r in stage.results["rows"]
        for g in r["gpus"] or []
    ]
    settings = stage.results["settings"]
    stage.section(
        f"`sharedserve bench --spec`, open loop at {settings['rate']:g} requests/s for the mix at "
        "scale 1 (split by weight, then over each model's replicas; scale s offers s times as "
        f"much), {settings['warmup_s']:g} s warm-up and {settings['duration_s']:g} s measured "
        "per scale, one core per replica, caps from pack's proportional split.",
        "",
        *kit.markdown_table(header, table),
        "",
        *(kit.markdown_table(["scale", "GPU", "util %", "max util %", "memory MiB"], gpus)),
        "",
        f"Recommendation: {stage.results['recommendation']['reason']}",
    )


if __name__ == "__main__":
    main()

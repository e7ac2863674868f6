"""sweep: the density sweep on a real GPU, the product's whole point.

``sharedserve bench`` with the torch ``resnet50`` and ``mobilenet_v2``: densities 1, 2, 4, 8, 16
and 32 replicas on one GPU (those at which ``pack``'s even split leaves each replica at least
1 GiB), sequential and parallel load over gRPC, a 1-core CPU quota per replica, NVML utilisation
and per-process memory sampled; then each model once more at density 4 with batching on.
Windows are short (``DURATION`` s after ``WARMUP`` s) so that the stage fits one 10-minute run;
each row's request count is in the JSON. Past ``DEADLINE_S`` the remaining runs are skipped and
listed, never silently dropped.
"""

# minutes: 7
# order: 30

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kit
import replicas

from sharedserve.config import CONTEXT_RESERVE_MIB

MODELS = ("resnet50", "mobilenet_v2")
DENSITIES = [1, 2, 4, 8, 16, 32]
FLOOR_MIB = 1024  # the least cap per replica worth sweeping; resnet50's weights are ~100 MiB
RESERVE_MIB = CONTEXT_RESERVE_MIB  # pack's --context-reserve-mib default
DURATION, WARMUP = 4.0, 1.0
CONCURRENCY = 4
BATCHING_DENSITY = 4
BATCHING = ("--enable-batching", "--max-batch-size", "8", "--batch-timeout-micros", "1000")
SLO_P99_MS = 100.0
DEADLINE_S = 6 * 60

ROW_KEYS = (
    *("density", "requests", "errors", "qps", "p50_ms", "p99_ms", "p999_ms"),
    *("scaling_efficiency", "gpu_util_mean", "gpu_util_max", "gpu_mem_used_mib"),
    *("cpu_util_mean", "loadgen_cpu_util", "unreliable", "slo_met"),
)


def main() -> None:
    stage = kit.Stage.from_argv("sweep", "Density sweep: P99, QPS and GPU use per packing density")
    gpu = stage.gpu()
    if stage.dry_run:
        names, densities, duration, warmup = ["tiny"], [1, 2], 1.0, 0.5
    else:
        names, duration, warmup = list(MODELS), DURATION, WARMUP
        densities = replicas.feasible_densities(DENSITIES, gpu.memory_mib, RESERVE_MIB, FLOOR_MIB)
    models = replicas.build_models(names, stage.work / "models")
    common = ["--protocol", "grpc", "--duration", str(duration), "--warmup", str(warmup)]
    common += ["--cpu-limit", "1", "--slo-p99-ms", str(SLO_P99_MS)]
    runs: list[tuple[str, str, list[str], list[str]]] = []
    for model in names:
        for pattern in ("sequential", "parallel"):
            args = ["--pattern", pattern, "--concurrency", str(CONCURRENCY)]
            # A dry run sweeps one pattern over its densities: each density is a pack's start
            # on a CPU that runs the whole test suite, and both patterns take the same path.
            swept = densities[:1] if stage.dry_run and pattern == "sequential" else densities
            runs.append((model, pattern, [str(d) for d in swept], args))
    batching_density = str(min(BATCHING_DENSITY, densities[-1]))
    for model in names:
        args = ["--pattern", "parallel", "--concurrency", str(2 * CONCURRENCY), *BATCHING]
        runs.append((model, "parallel+batching", [batching_density], args))
    results: list[dict[str, Any]] = []
    stage.results = {
        "gpu": gpu.uuid,
        "densities": densities,
        "settings": {
            "protocol": "grpc",
            "duration_s": duration,
            "warmup_s": warmup,
            "concurrency": CONCURRENCY,
            "cpu_limit": 1,
            "slo_p99_ms": SLO_P99_MS,
            "batching": " ".join(BATCHING),
        },
        "runs": results,
    }
    for model, pattern, dens, args in runs:
        label = f"{model} {pattern}"
        if time.time() - stage.started > DEADLINE_S and not stage.dry_run:
            results.append({"model": model, "pattern": pattern, "skipped": "time budget"})
            stage.check(f"{label}: measured", False, "skipped: the stage ran out of time")
            continue
        out = stage.work / f"{model}-{pattern.replace('+', '-')}"
        report = replicas.run_bench(
            stage, out, models / model, "--densities", ",".join(dens), *common, *args
        )
        results.append(summarize(model, pattern, report))
        judge(stage, label, dens, report)
        report_md(stage, results)
        stage.finish(partial=True)  # cut off at the command's limit, the rows so far survive
    stage.finish()


def summarize(model: str, pattern: str, report: dict[str, Any]) -> dict[str, Any]:
    if "error" in report:
        return {"model": model, "pattern": pattern, "error": report["error"]}
    rows = []
    for row in report["rows"]:
        rows.append(
            {k: row.get(k) for k in ROW_KEYS}
            | {"per_process_gpu_mem_mib": [m.get("gpu_mem_mib") for m in row["per_model"]]}
        )
    return {
        "model": model,
        "pattern": pattern,
        "rows": rows,
        "recommendation": report["recommendation"],
    }


def judge(stage: kit.Stage, label: str, densities: list[str], report: dict[str, Any]) -> None:
    if "error" in report:
        stage.check(f"{label}: bench ran", False, report["error"].splitlines()[0][:200])
        return
    rows = report["rows"]
    got = [str(r["density"]) for r in rows]
    errors = sum(r["errors"] for r in rows)
    stage.check(
        f"{label}: every density measured without errors",
        got == densities and errors == 0,
        f"densities {','.join(got)}; {errors} errors",
    )
    stage.gpu_check(
        f"{label}: GPU utilisation and per-process memory sampled",
        all(r["gpu_util_mean"] is not None for r in rows)
        and all(m.get("gpu_mem_mib") is not None for r in rows for m in r["per_model"]),
        "NVML figures in every row",
    )
    if stage.dry_run:
        stage.check(
            f"{label}: no GPU figure on a simulated GPU",
            all(r["gpu_util_mean"] is None and r["gpu_mem_used_mib"] is None for r in rows),
            "GPU columns null",
        )


def report_md(stage: kit.Stage, results: list[dict[str, Any]]) -> None:
    header = [
        *("model", "pattern", "density", "requests", "QPS", "p50 ms", "p99 ms", "p99.9 ms"),
        *("scaling", "GPU util %", "GPU mem MiB", "max per-process MiB", "CPU cores", "SLO"),
    ]
    table = []
    notes = []
    for run in results:
        if "rows" not in run:
            notes.append(f"- {run['model']} {run['pattern']}: {run.get('error') or run['skipped']}")
            continue
        for r in run["rows"]:
            per_process = [m for m in r["per_process_gpu_mem_mib"] if m is not None]
            table.append(
                [
                    *(run["model"], run["pattern"], r["density"], r["requests"], r["qps"]),
                    *(r["p50_ms"], r["p99_ms"], r["p999_ms"], r["scaling_efficiency"]),
                    *(r["gpu_util_mean"], r["gpu_mem_used_mib"]),
                    max(per_process) if per_process else None,
                    r["cpu_util_mean"],
                    "yes" if r["slo_met"] else "no",
                ]
            )
        rec = run["recommendation"]
        notes.append(
            f"- {run['model']} {run['pattern']}: recommended density {rec['density']} "
            f"({rec['reason']})"
        )
    settings = stage.results["settings"]
    stage.sections.clear()
    stage.section(
        f"`sharedserve bench` over {settings['protocol']}, {settings['warmup_s']:g} s warm-up and "
        f"{settings['duration_s']:g} s measured per density, {settings['cpu_limit']} core per "
        f"replica, parallel = {settings['concurrency']} users per model (twice that with "
        f"batching: `{settings['batching']}`), P99 objective {settings['slo_p99_ms']:g} ms. "
        "Latencies are exact (HDR histogram, microseconds); GPU figures from NVML, `-` where "
        "not measured.",
        "",
        *kit.markdown_table(header, table),
        "",
        *notes,
    )


if __name__ == "__main__":
    main()

"""context: the GPU memory a serve process holds outside its framework's allocator.

A framework's cap governs its allocator only; each process also holds a CUDA context, the
kernels CUDA loads for it (lazily, as shapes are first seen) and cuBLAS/cuDNN workspaces. ``pack``
keeps ``--context-reserve-mib`` per replica outside the cap for this; this stage measures it.

Method: for each example torch model, three ``sharedserve serve`` processes started together
on the GPU, each capped at a 0.1 share through the env contract. Each is read once
after warm-up (one batch of one) and again after gRPC batches of 1, 8 and 32 rows have loaded the
kernels a served batch needs: NVML's figure for the process minus the allocator's reserved pool
(``sharedserve_gpu_memory_allocator_bytes``, ``torch.cuda.memory_reserved``). The figure per
model is the median over its processes after the batches; the suggested reserve is the largest
of those medians rounded up to 64 MiB.
"""

# minutes: 2
# order: 20

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kit
import replicas

MODELS = ("tiny", "mobilenet_v2", "resnet50")
PROCESSES = 3
FRACTION = 0.1
BATCHES = (1, 8, 32)
CURRENT_DEFAULT_MIB = 512  # pack's --context-reserve-mib before this was measured


def outside(memory: dict[str, float | None]) -> float | None:
    used, pool = memory["used"], memory["allocator"]
    return None if used is None or pool is None else used - pool


def main() -> None:
    stage = kit.Stage.from_argv("context", "GPU memory outside the framework's cap, per process")
    names = ["tiny"] if stage.dry_run else list(MODELS)
    count = 2 if stage.dry_run else PROCESSES
    models = replicas.build_models(names, stage.work / "models")
    per_model: dict[str, Any] = {}
    for model in names:
        with replicas.packed(stage, models / model, count, FRACTION) as servers:
            warm = [s.gpu_memory() for s in servers]
            answers = []
            for server in servers:
                client = replicas.GrpcClient(server)
                for rows in BATCHES:
                    request = client.request(replicas.example_inputs(model, rows))
                    answers.append(f"{rows}: {' '.join(client.predict(request))}".strip())
                client.close()
            served = [s.gpu_memory() for s in servers]
        stage.check(
            f"{model}: every process served batches of {', '.join(map(str, BATCHES))} rows",
            all(a.endswith(": OK") for a in answers),
            "; ".join(sorted(set(answers))),
        )
        figures = [outside(m) for m in served]
        known = [f for f in figures if f is not None]
        per_model[model] = {
            "after_warm_up": warm,
            "after_batches": served,
            "outside_mib": figures,
            "median_outside_mib": statistics.median(known) if known else None,
            "median_outside_after_warm_up_mib": _median([outside(m) for m in warm]),
        }
        print(f"[context] {model}: outside the allocator {figures} MiB", flush=True)
    medians = [m["median_outside_mib"] for m in per_model.values()]
    suggested = None
    if medians and None not in medians:
        suggested = 64 * math.ceil(max(medians) / 64)
    stage.results = {
        "method": __doc__,
        "fraction": FRACTION,
        "processes_per_model": count,
        "batches": BATCHES,
        "models": per_model,
        "suggested_context_reserve_mib": suggested,
        "current_default_mib": CURRENT_DEFAULT_MIB,
    }
    for model, found in per_model.items():
        median = found["median_outside_mib"]
        stage.gpu_check(
            f"{model}: memory outside the allocator measured in every process",
            None not in found["outside_mib"],
            f"{found['outside_mib']} MiB, median {median}",
        )
    stage.gpu_check(
        f"the current default reserve ({CURRENT_DEFAULT_MIB} MiB) covers every model's median",
        suggested is not None and suggested <= CURRENT_DEFAULT_MIB,
        f"largest median {max(medians) if suggested else None} MiB; suggested reserve "
        f"{suggested} MiB",
    )
    report(stage, per_model, suggested)
    stage.finish()


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def report(stage: kit.Stage, per_model: dict[str, Any], suggested: int | None) -> None:
    rows = []
    for model, found in per_model.items():
        for i, (warm, served) in enumerate(
            zip(found["after_warm_up"], found["after_batches"], strict=True)
        ):
            rows.append(
                [
                    f"{model}-{i}",
                    served["cap"],
                    warm["used"],
                    served["used"],
                    served["allocator"],
                    outside(warm),
                    outside(served),
                ]
            )
    stage.section(
        "## Method",
        "",
        (__doc__ or "").split("\n\n", 2)[2].strip(),
        "",
        "## Per process (MiB)",
        "",
        *kit.markdown_table(
            [
                "process",
                "cap",
                "NVML after warm-up",
                "NVML after batches",
                "allocator after batches",
                "outside after warm-up",
                "outside after batches",
            ],
            rows,
        ),
        "",
        "## Per model",
        "",
        *kit.markdown_table(
            ["model", "median outside after warm-up (MiB)", "median outside after batches (MiB)"],
            [
                [m, f["median_outside_after_warm_up_mib"], f["median_outside_mib"]]
                for m, f in per_model.items()
            ],
        ),
        "",
        f"**Suggested `--context-reserve-mib`: {suggested if suggested is not None else '-'}** "
        f"(the largest median, rounded up to 64 MiB; the default was {CURRENT_DEFAULT_MIB}).",
    )


if __name__ == "__main__":
    main()

"""caps: two capped torch servers on one GPU; one runs out of memory, the other serves on.

Two ``sharedserve serve`` processes of the torch ``resnet50``, started by ``pack``'s machinery with
a 0.2 share of the GPU each, given through the env contract. Then:

1. both report the cap on ``/sharedserve/v1/limits`` as enforced, on this GPU's UUID;
2. server A gets ever larger batches over gRPC until one needs more than its cap, while a thread
   sends server B batch-1 requests back to back: A must answer RESOURCE_EXHAUSTED, B must answer
   every request, and A must serve a batch of one afterwards;
3. NVML's figure for each process, sampled every 50 ms throughout, must stay within the cap plus
   the memory the process holds outside its framework's allocator (CUDA context, cuBLAS/cuDNN
   workspaces), measured in the same process at the end: NVML's figure minus the allocator's.
"""

# minutes: 2
# order: 10

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kit
import replicas

FRACTION = 0.2
# Rows of the escalating batches. 3072 images of 224x224x3 float32 are 1.85 GB, under gRPC's
# 2 GiB message ceiling; a 0.2 cap is 16 GiB on an H100 and 28 GiB on an H200.
ROWS = (256, 1024, 2048, 3072)
DRY_ROWS = (4, 16)


def main() -> None:
    stage = kit.Stage.from_argv("caps", "GPU memory caps: out of memory inside the cap")
    model = "tiny" if stage.dry_run else "resnet50"
    models = replicas.build_models([model], stage.work / "models")
    gpu = stage.gpu()
    extra = ("--max-body-bytes", str((1 << 31) - 1), "--grpc-max-message-bytes", str((1 << 31) - 1))
    backend = stage.gpu_backend()
    results: dict[str, Any] = {"model": model, "fraction": FRACTION, "gpu": gpu.uuid}
    try:
        with replicas.packed(stage, models / model, 2, FRACTION, extra) as (a, b):
            check_limits(stage, gpu, [a, b])
            clients = replicas.GrpcClient(a), replicas.GrpcClient(b)
            one = clients[0].request(replicas.example_inputs(model, 1))
            before = {s.name: s.gpu_memory() for s in (a, b)}
            attempts = []
            with (
                replicas.MemoryWatch(backend, gpu.uuid, [a.pid, b.pid]) as watch,
                replicas.Background(clients[1], model) as neighbour,
            ):
                for rows in DRY_ROWS if stage.dry_run else ROWS:
                    request = clients[0].request(replicas.example_inputs(model, rows))
                    code, message = clients[0].predict(request, timeout=300)
                    attempts.append({"rows": rows, "code": code, "message": message[:300]})
                    print(f"[caps] batch of {rows}: {code} {message[:120]}", flush=True)
                    if code != "OK":
                        break
                after_code, _ = clients[0].predict(one)
            after = {s.name: s.gpu_memory() for s in (a, b)}
            results |= {
                "attempts": attempts,
                "neighbour_codes": neighbour.codes,
                "a_after_batch_1": after_code,
                "memory_mib_before": before,
                "memory_mib_after": after,
                "nvml_peak_mib": {a.name: watch.peak_mib[a.pid], b.name: watch.peak_mib[b.pid]},
                "nvml_errors": watch.errors[:5],
            }
            judge(stage, results, a.name, b.name)
            for client in clients:
                client.close()
    finally:
        backend.close()
    stage.results = results
    report(stage, results)
    stage.finish()


def check_limits(stage: kit.Stage, gpu: object, servers: list[replicas.Server]) -> None:
    for server in servers:
        limits = server.limits()
        uuid = getattr(gpu, "uuid", None)
        stage.check(
            f"{server.name}: cap from the env contract",
            # pack writes the MiB too, which the server prefers: the fraction read back is that
            # MiB figure over the GPU's, a hair under the share asked for.
            abs(limits["gpu_memory_fraction"] - FRACTION) < 1e-3
            and limits["gpu_memory_source"] == "env",
            f"fraction {limits['gpu_memory_fraction']}, {limits['gpu_memory_mib']} MiB of "
            f"{limits['gpu_memory_total_mib']}, source {limits['gpu_memory_source']}",
        )
        stage.gpu_check(
            f"{server.name}: limits report the cap enforced on this GPU",
            limits["gpu_memory_enforced"] is True and limits["device"] == uuid,
            f"gpu_memory_enforced {limits['gpu_memory_enforced']}, device {limits['device']}",
        )
        if stage.dry_run:  # nothing is enforced on a simulated GPU, and the server says so
            stage.check(
                f"{server.name}: limits say not enforced on a simulated GPU",
                limits["gpu_memory_enforced"] is False and limits["device"] == "cpu",
                f"gpu_memory_enforced {limits['gpu_memory_enforced']}, device {limits['device']}",
            )


def judge(stage: kit.Stage, results: dict[str, Any], a: str, b: str) -> None:
    attempts = results["attempts"]
    last = attempts[-1]
    stage.gpu_check(
        f"{a}: a batch past the cap gets RESOURCE_EXHAUSTED",
        last["code"] == "RESOURCE_EXHAUSTED",
        f"batch of {last['rows']}: {last['code']} {last['message'][:160]}",
    )
    codes = results["neighbour_codes"]
    stage.check(
        f"{b}: the neighbour answered every request meanwhile",
        set(codes) == {"OK"} and codes["OK"] > 0,
        f"{codes}",
    )
    stage.check(
        f"{a}: serves a batch of one afterwards",
        results["a_after_batch_1"] == "OK",
        results["a_after_batch_1"],
    )
    for name in (a, b):
        memory = results["memory_mib_after"][name]
        peak = results["nvml_peak_mib"][name]
        used, cap, pool = memory["used"], memory["cap"], memory["allocator"]
        known = None not in (used, cap, pool, peak)
        context = used - pool if known else None
        memory["outside_allocator"] = context
        stage.gpu_check(
            f"{name}: framework allocator within the cap",
            known and pool <= cap,
            f"allocator {pool} MiB, cap {cap} MiB",
        )
        stage.gpu_check(
            f"{name}: NVML peak within cap + memory outside the allocator",
            known and peak <= cap + context,
            f"NVML peak {peak} MiB <= cap {cap} + {context} MiB outside the allocator",
        )


def report(stage: kit.Stage, results: dict[str, Any]) -> None:
    rows = [[t["rows"], t["code"], t["message"][:120]] for t in results["attempts"]]
    stage.section(
        f"Model `{results['model']}` (torch), two servers, each "
        f"a {FRACTION} share of `{results['gpu']}` given by pack's env contract; server A gets the "
        "escalating batches over gRPC while server B gets batch-1 requests back to back.",
        "",
        *kit.markdown_table(["rows", "gRPC status", "message"], rows),
        "",
        f"Server B's answers meanwhile: {results['neighbour_codes']}.",
        "",
    )
    table = []
    for name, memory in results["memory_mib_after"].items():
        peak = results["nvml_peak_mib"][name]
        table.append(
            [
                name,
                memory["cap"],
                memory["allocator"],
                memory["used"],
                peak,
                memory.get("outside_allocator"),
            ]
        )
    stage.section(
        "GPU memory in MiB at the end (NVML per process; the allocator's reserved pool from "
        "`sharedserve_gpu_memory_allocator_bytes`); *outside* = NVML - allocator, the CUDA "
        "context and library workspaces the cap does not cover:",
        "",
        *kit.markdown_table(
            ["server", "cap", "allocator", "NVML used", "NVML peak", "outside"], table
        ),
    )


if __name__ == "__main__":
    main()

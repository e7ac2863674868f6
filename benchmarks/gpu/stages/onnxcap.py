"""onnxcap: ONNX models on the GPU, each held to its budget by onnxruntime's CUDA provider.

One ``sharedserve serve --model-repository`` process under a GPU cap (``--gpu-memory-mib``)
serves two copies of the ONNX build of ``mobilenet_v2``, ``big`` and ``neighbour``, each with a
budget (``gpu_memory_mib`` in its ``sharedserve.yaml``): the backend gives each session the CUDA
provider's ``gpu_mem_limit`` of its budget. Then:

1. ``/sharedserve/v1/limits`` says the cap is enforced on this GPU's UUID, and each model's
   budget is enforced by its runtime;
2. ``big`` gets ever larger batches over REST (the Open Inference Protocol's binary tensors, so
   the body is the tensor's size, not JSON's) until one needs more than its budget, while
   ``neighbour`` gets batch-1 requests back to back for as long as each of big's is under way
   (one at least): ``big`` must answer 503 with
   onnxruntime's out-of-memory error, ``neighbour`` 200 to every request, and ``big`` must
   serve a batch of one afterwards;
3. NVML's figure for the process, sampled every 50 ms throughout, must stay within what it held
   once both models were loaded plus ``big``'s budget: its session's arena is all that grows
   (and, for a moment, cuDNN's search workspace beside it, 32 MiB).

Needs ``onnxruntime-gpu`` (its CUDA provider) and ``onnx`` (to build the model) on the GPU
machine; without the provider the stage says so and is ``unavailable``, as ``mps`` without MPS.
A dry run serves ``tiny`` on onnxruntime's CPU provider, whose arena holds the same budgets.
"""

# minutes: 2
# order: 50

from __future__ import annotations

import http.client
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kit
import many
import replicas

CAP_MIB = 4096  # the process's cap: both budgets and the CUDA context fit well inside
BUDGET_MIB = 256
# Rows of big's escalating batches. sharedserve's own estimate counts a batch's inputs and
# outputs (onnxruntime's Python API does not count its CUDA arena), 0.6 MB a row, so it lets 256
# rows (169 MB) through to the runtime, whose activations between the layers are over a GB.
ROWS = (16, 64, 256)
# cuDNN's algorithm search takes its workspace (32 MiB, with cudnn_conv_use_max_workspace off)
# beside the arena, as onnxruntime reserves it, for a moment at a batch size not seen before.
SEARCH_WORKSPACE_MIB = 32
# tiny on the CPU provider: 32,768 rows hold about 3 MiB between the layers, past a 2 MiB
# budget, though their inputs and outputs (the estimate) take 1.5 MiB.
DRY_BUDGET_MIB, DRY_ROWS = 2, (1024, 32768)
OUT_OF_MEMORY = "out of memory running the model"


def main() -> None:
    stage = kit.Stage.from_argv("onnxcap", "ONNX models on the GPU: each held to its budget")
    cuda = cuda_provider()
    if cuda is not None and not stage.dry_run:
        stage.unavailable = cuda
        stage.results = {"cuda_provider": False}
        stage.section(f"Not run: {cuda}.")
        stage.finish()
        return
    model = "tiny" if stage.dry_run else "mobilenet_v2"
    budget = DRY_BUDGET_MIB if stage.dry_run else BUDGET_MIB
    built = replicas.build_models([model], stage.work / "models-onnx", "onnx")
    repository = stage.work / "repository"
    many.add_copies(repository, built / model, ["big", "neighbour"], f"gpu_memory_mib: {budget}\n")
    gpu = stage.gpu()
    limit = str((1 << 31) - 1)
    extra: tuple[str, ...] = ("--gpu-memory-mib", str(CAP_MIB), "--max-body-bytes", limit)
    extra += ("--max-request-elements", limit)  # 256 images: 38.5 M elements
    results: dict[str, Any] = {"model": model, "budget_mib": budget, "cap_mib": CAP_MIB}
    backend = stage.gpu_backend()
    try:
        results |= measure(stage, backend, gpu, repository, (model, budget), extra=extra)
    except RuntimeError as e:  # a model that did not load (its CUDA provider, say): a FAIL
        stage.check("big and neighbour served", False, str(e)[:600])
        stage.results = results
        stage.finish()
        return
    finally:
        backend.close()
    judge(stage, results)
    stage.results = results
    report(stage, results)
    stage.finish()


def measure(
    stage: kit.Stage,
    backend: Any,
    gpu: Any,
    repository: Path,
    served: tuple[str, int],
    *,
    extra: tuple[str, ...],
) -> dict[str, Any]:
    """Serve the two models (``served``: the example model and each one's budget in MiB),
    escalate ``big``'s batches with ``neighbour`` busy: the figures."""
    model, budget = served
    with many.serving(stage, repository, "onnxcap", *extra) as server:
        check_limits(stage, gpu, server, budget)
        after_load = many.gpu_mib(backend, gpu.uuid, [server.pid])
        attempts: list[dict[str, Any]] = []
        statuses: dict[str, int] = {}
        with (
            replicas.MemoryWatch(backend, gpu.uuid, [server.pid]) as watch,
            ThreadPoolExecutor(1) as pool,
        ):
            for rows in DRY_ROWS if stage.dry_run else ROWS:
                big = pool.submit(infer, server, "big", model, rows)
                while True:  # neighbour's requests while big's is under way, one at least
                    answer = str(infer(server, "neighbour", model, 1)[0])
                    statuses[answer] = statuses.get(answer, 0) + 1
                    if big.done():
                        break
                status, error = big.result()
                attempts.append({"rows": rows, "status": status, "error": error[:300]})
                print(f"[onnxcap] big, batch of {rows}: {status} {error[:120]}", flush=True)
                if status != 200:
                    break
        return {
            "attempts": attempts,
            "neighbour_statuses": statuses,
            "big_after_batch_1": infer(server, "big", model, 1)[0],
            "nvml_after_load_mib": after_load,
            "nvml_peak_mib": watch.peak_mib[server.pid],
        }


def cuda_provider() -> str | None:
    """Why the stage cannot build an ONNX model and run its session on the GPU here (None: it
    can, as far as onnxruntime says)."""
    import importlib.util

    if importlib.util.find_spec("onnx") is None:
        return "onnx is not installed: `models build --framework onnx` needs it (the [onnx] extra)"
    try:
        import onnxruntime as ort
    except ImportError:
        return "onnxruntime is not installed (onnxruntime-gpu, for its CUDA provider)"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return (
            f"onnxruntime {ort.__version__} has no CUDA provider "
            f"({', '.join(ort.get_available_providers())}): install onnxruntime-gpu"
        )
    return None


def infer(server: replicas.Server, name: str, model: str, rows: int) -> tuple[int, str]:
    """One OIP REST infer of ``rows`` example rows: (HTTP status, the error's text or "")."""
    from sharedserve.bench.payload import oip_rest_request

    body, headers = oip_rest_request(replicas.example_inputs(model, rows))
    port = int(server.rest.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("POST", f"/v2/models/{name}/infer", body, headers)
        response = conn.getresponse()
        data = response.read()
    except OSError as e:
        return 0, f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    if response.status == 200:
        return 200, ""
    try:
        return response.status, str(json.loads(data)["error"])
    except (ValueError, KeyError, TypeError):
        return response.status, f"(no JSON error) {data[:200]!r}"


def check_limits(stage: kit.Stage, gpu: Any, server: replicas.Server, budget: int) -> None:
    limits = server.limits()
    stage.gpu_check(
        "limits report the cap enforced on this GPU (onnxruntime's CUDA provider)",
        limits["gpu_memory_enforced"] is True and limits["device"] == gpu.uuid,
        f"gpu_memory_enforced {limits['gpu_memory_enforced']}, device {limits['device']}",
    )
    if stage.dry_run:  # onnxruntime's CPU provider: the cap recorded, not enforced
        stage.check(
            "limits say not enforced on a simulated GPU",
            limits["gpu_memory_enforced"] is False and limits["device"] == "cpu",
            f"gpu_memory_enforced {limits['gpu_memory_enforced']}, device {limits['device']}",
        )
    for name in ("big", "neighbour"):
        version = limits["models"][name]["versions"]["1"]
        stage.check(
            f"{name}: its budget enforced by its runtime",
            version["enforced"] is True and version["budget_mib"] == budget,
            f"enforced {version['enforced']}, budget {version['budget_mib']} MiB",
        )


def judge(stage: kit.Stage, results: dict[str, Any]) -> None:
    last = results["attempts"][-1]
    stage.check(
        "big: a batch past its budget gets 503 with an error",
        last["status"] == 503 and bool(last["error"]),
        f"batch of {last['rows']}: {last['status']} {last['error'][:160]}",
    )
    # On the GPU the refusal must be the CUDA arena's, not sharedserve's estimate before it.
    stage.gpu_check(
        "big: refused by onnxruntime's arena, at its budget",
        last["error"].startswith(OUT_OF_MEMORY),
        last["error"][:160],
    )
    statuses = results["neighbour_statuses"]
    stage.check(
        "neighbour: answered 200 to every request meanwhile",
        set(statuses) == {"200"} and statuses["200"] > 0,
        f"{statuses}",
    )
    stage.check(
        "big: serves a batch of one afterwards",
        results["big_after_batch_1"] == 200,
        str(results["big_after_batch_1"]),
    )
    loaded, peak = results["nvml_after_load_mib"], results["nvml_peak_mib"]
    known = None not in (loaded, peak)
    bound = None if not known else loaded + results["budget_mib"] + SEARCH_WORKSPACE_MIB
    stage.gpu_check(
        "NVML peak within what the process held loaded + big's budget",
        known and peak <= bound,
        f"NVML peak {peak} MiB <= {loaded} MiB after load + {results['budget_mib']} MiB budget "
        f"+ {SEARCH_WORKSPACE_MIB} MiB cuDNN search workspace",
    )


def report(stage: kit.Stage, results: dict[str, Any]) -> None:
    rows = [[t["rows"], t["status"], t["error"][:120]] for t in results["attempts"]]
    stage.section(
        f"ONNX `{results['model']}` as `big` and `neighbour` in one process under a "
        f"{results['cap_mib']} MiB cap, each with a {results['budget_mib']} MiB budget "
        "(`gpu_memory_mib`); `big` gets the escalating batches (OIP REST, binary tensors) while "
        "`neighbour` gets batch-1 requests back to back.",
        "",
        *kit.markdown_table(["rows", "HTTP status", "error"], rows),
        "",
        f"`neighbour`'s answers meanwhile: {results['neighbour_statuses']}; `big` afterwards, "
        f"a batch of one: {results['big_after_batch_1']}. NVML, the process: "
        f"{results['nvml_after_load_mib']} MiB once loaded, {results['nvml_peak_mib']} MiB at "
        "its peak (`-`/None: not measured).",
        "",
    )


if __name__ == "__main__":
    main()

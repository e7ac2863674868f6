"""multimodel: many models in one server process against one process per model; paging over PCIe.

1. Density. Copies of the torch ``tiny`` (1, 8, 32, 128) and ``mobilenet_v2`` (1, 8, 32), and of
   ``mobilenet_v2`` as ONNX and as a torch.export program (1, 8, 16 each), under distinct
   names, served by ONE ``sharedserve serve --model-repository`` process (models added
   while it serves, through the repository API) against as many ``serve`` processes of one model
   each (started by ``pack``, each capped at an even share of what the largest count leaves
   after pack's context reserve). At each count: NVML memory of the processes summed, host
   memory (PSS) summed, the memory each added model costs, and the QPS of a fixed number of
   requests per model, round-robin over the models from a few client threads. Separate
   processes are added only while the memory the last ones took says the next ones fit (GPU
   and host); where that stops is recorded, never skipped silently.
2. Paging over PCIe, run as soon as the torch ``mobilenet_v2`` rows are in. A repository of
   16 ``mobilenet_v2`` copies, each with a budget
   (``gpu_memory_mib``: its peak measured in part 1, plus a quarter), served with ``--paging
   lru`` and a ``--gpu-memory-mib`` that holds about four: requests go round-robin, one at a
   time, so each one pages its model in (a device copy from host memory) and another out. The
   page-in is each such request's latency minus a resident request's (p50), beside the
   server's own ``sharedserve_model_page_in_seconds``; ``/sharedserve/v1/limits`` gives each
   model's state. The target: a page-in under 50 ms, the most a fleet file's
   ``page_in_ms`` allows.

ONNX models run on the GPU where onnxruntime has its CUDA provider (``onnxruntime-gpu``) and a
cap is in force, so the one process of ONNX models gets one (the GPU less pack's reserve) as
each of pack's processes has its own; without the provider they run on the CPU, and their NVML
checks say so (n/a), as does every ONNX check where onnxruntime or onnx is not installed.

A dry run serves ``tiny`` only (``mobilenet_v2`` takes seconds a request on a CPU running the test
suite): at 1 and 4 models (1 and 2 as ONNX and as torch.export), and 4 copies paged of which 2
fit. Every NVML figure is null and every check only a GPU answers is n/a.
"""

# minutes: 9
# order: 45

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kit
import many
import paged
import replicas

from sharedserve.config import CONTEXT_RESERVE_MIB
from sharedserve.errors import SharedServeError


@dataclass(frozen=True)
class Kind:
    """One density sweep: an example model as one framework builds it."""

    model: str
    framework: str
    """``models build --framework``: torch (TorchScript), onnx, export (torch.export)."""

    @property
    def label(self) -> str:
        """Its key in the results: the model's name for TorchScript, as before the others."""
        return self.model if self.framework == "torch" else f"{self.model} ({self.framework})"

    @property
    def slug(self) -> str:
        """Its models' and logs' names."""
        return self.model if self.framework == "torch" else f"{self.model}-{self.framework}"


DENSITIES = {
    Kind("tiny", "torch"): [1, 8, 32, 128],
    Kind("mobilenet_v2", "torch"): [1, 8, 32],
    Kind("mobilenet_v2", "onnx"): [1, 8, 16],
    Kind("mobilenet_v2", "export"): [1, 8, 16],
}
DRY_DENSITIES = {
    Kind("tiny", "torch"): [1, 4],
    Kind("tiny", "onnx"): [1, 2],
    Kind("tiny", "export"): [1, 2],
}
ROUNDS, THREADS = 20, 8  # requests per model at each count; client threads
RESERVE_MIB = CONTEXT_RESERVE_MIB  # pack's --context-reserve-mib default
MARGIN = 1.25  # the next processes are started if this times what they should take is free
DEADLINE_S = 280  # past it no more separate processes start; paging takes ~20 s more

Row = dict[str, Any]


def main() -> None:
    stage = kit.Stage.from_argv("multimodel", "Many models in one process; paging over PCIe")
    model_paged = "tiny" if stage.dry_run else "mobilenet_v2"  # mobilenet_v2 on 2 cores: slow
    densities = DRY_DENSITIES if stage.dry_run else DENSITIES
    built = replicas.build_models([model_paged], stage.work / "models")
    sweep = Density(stage, stage.gpu_backend(), stage.gpu())
    stage.results = {"gpu": sweep.gpu.uuid, "rounds": sweep.rounds, "density": {}}
    try:
        for kind, counts in densities.items():
            why = unavailable(kind)
            if why is not None:  # not installed here: said, not failed
                stage.results["density"][kind.label] = {"not run": why}
                stage.check(f"{kind.label}: not run", None, why)
                continue
            try:
                model_dir = built_model(stage, kind)
            except RuntimeError as e:  # its build failed: the others still run
                stage.results["density"][kind.label] = {"not run": str(e)[:600]}
                stage.check(f"{kind.label}: built", False, str(e)[:300])
                continue
            sides = {
                "one process": sweep.guarded(sweep.one_process, model_dir, kind, counts),
                "separate processes": sweep.guarded(sweep.separate, model_dir, kind, counts),
            }
            stage.results["density"][kind.label] = sides
            judge_density(stage, kind, sides, onnx_on_cpu(stage, kind))
            report_density(stage)
            stage.finish(partial=True)  # cut off at the command's limit, the rows so far survive
            if kind == Kind(model_paged, "torch"):
                # Paging as soon as its budgets (this kind's peaks) are known, before the other
                # formats' rows: a GPU run cut off at its command's limit still has it.
                paging_model = built / model_paged
                paged.paging(stage, paging_model, model_paged, sweep.peaks.get(model_paged, []))
                stage.finish(partial=True)
    finally:
        sweep.backend.close()
    stage.finish()


def unavailable(kind: Kind) -> str | None:
    """Why ``kind`` cannot be built and served with what is installed here (None: it can)."""
    if kind.framework != "onnx":
        return None  # TorchScript and torch.export need torch only, as the kit does
    import importlib.util

    missing = [m for m in ("onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        return (
            f"{' and '.join(missing)} not installed: ONNX models need the [onnx] extra "
            "(onnxruntime-gpu for the GPU), see benchmarks/gpu/README.md"
        )
    return None


def onnx_on_cpu(stage: kit.Stage, kind: Kind) -> str | None:
    """Why ``kind``'s models ran on the CPU on this GPU machine (None: they did not)."""
    if kind.framework != "onnx" or stage.dry_run:
        return None
    import onnxruntime as ort

    providers = ort.get_available_providers()
    if "CUDAExecutionProvider" in providers:
        return None
    return f"onnxruntime {ort.__version__} has no CUDA provider ({', '.join(providers)})"


def built_model(stage: kit.Stage, kind: Kind) -> Path:
    """``kind``'s model, built, in a folder named for it (its replicas' logs are named so).
    RuntimeError if the build failed or made another format than ``kind``'s: a row labelled
    ONNX must have served ONNX."""
    from sharedserve.server import find_model

    if kind.framework == "torch":
        model_dir = replicas.build_models([kind.model], stage.work / "models") / kind.model
    else:
        built = replicas.build_models(
            [kind.model], stage.work / f"models-{kind.framework}", kind.framework
        )
        many.add_copies(stage.work / "built", built / kind.model, [kind.slug])
        model_dir = stage.work / "built" / kind.slug
    found = find_model(model_dir).framework.value
    if found != kind.framework:
        raise RuntimeError(f"{model_dir} holds a {found} model, not {kind.framework}")
    return model_dir


@dataclass
class Density:
    """Part 1: the same models in one process and in as many, measured alike."""

    stage: kit.Stage
    backend: Any
    gpu: Any
    peaks: dict[str, list[float]] = field(default_factory=dict)
    """Each model's peaks (MiB) as the one-process server measured them at load."""

    @property
    def rounds(self) -> int:
        return 2 if self.stage.dry_run else ROUNDS

    def guarded(self, side: Callable[[Path, Kind, list[int]], list[Row]], *args: Any) -> list[Row]:
        """A side's rows or, if it failed (a server that would not start), one row saying why,
        so that the other side, the other model and the paging part still run."""
        try:
            return side(*args)
        except (RuntimeError, OSError, SharedServeError) as e:
            print(f"[multimodel] {side.__name__} failed: {e}", flush=True)
            return [{"models": args[2][0], "processes": None, "stopped": f"failed: {e}"[:600]}]

    def measure(self, servers: list[replicas.Server], names: list[str], model: str) -> Row:
        jobs = many.jobs_for(servers, names, model)
        measured = many.drive(jobs, self.rounds, 2 if self.stage.dry_run else THREADS)
        for client in {id(c): c for c, _ in jobs}.values():
            client.close()
        pids = sorted({s.pid for s in servers})
        row = {
            "models": len(names),
            "processes": len(pids),
            "gpu_mib": many.gpu_mib(self.backend, self.gpu.uuid, pids),
            "host_pss_mib": many.host_pss_mib(pids),
        }
        row |= measured
        print(f"[multimodel] {model} x{len(names)}, {len(pids)} processes: {row}", flush=True)
        return row

    def one_process(self, built: Path, kind: Kind, counts: list[int]) -> list[Row]:
        model = kind.model
        repository = self.stage.work / f"repository-{kind.slug}"
        names = [f"{kind.slug}-{i:03d}" for i in range(counts[-1])]
        many.add_copies(repository, built, names[: counts[0]])
        rows: list[Row] = []
        # ONNX runs on the GPU under a cap only (backends/onnx.py): the GPU less pack's reserve.
        cap = str(self.gpu.memory_mib - RESERVE_MIB)
        extra = ("--gpu-memory-mib", cap) if kind.framework == "onnx" else ()
        with many.serving(self.stage, repository, f"{kind.slug}-one-process", *extra) as server:
            loaded = counts[0]
            for n in counts:  # the models past the first added while it serves, as Triton's are
                many.add_copies(repository, built, names[:n])
                failed = many.load(server, names[loaded:n])
                loaded = n
                rows.append(self.measure([server], names[:n], model) | {"load_failures": failed})
            self.peaks[kind.label] = [
                v["peak_mib"]
                for m in server.limits().get("models", {}).values()
                for v in m.get("versions", {}).values()
                if v.get("peak_mib")
            ]
        _added(rows)
        return rows

    def separate(self, built: Path, kind: Kind, counts: list[int]) -> list[Row]:
        model = kind.model
        # Every process gets the cap the largest count allows, so the ones started first still
        # fit beside the ones added later.
        gpu_mib = self.gpu.memory_mib
        fraction = (gpu_mib - counts[-1] * RESERVE_MIB) / counts[-1] / gpu_mib
        rows: list[Row] = []
        servers: list[replicas.Server] = []
        with ExitStack() as stack:
            for n in counts:
                stop = self.no_room(rows, n - len(servers))
                more = n - len(servers)
                if stop is None:
                    try:
                        started = replicas.packed(self.stage, built, more, fraction)
                        servers += stack.enter_context(started)
                    except (RuntimeError, OSError, SharedServeError) as e:
                        # The counts measured so far stand; where it stopped is written down.
                        stop = f"failed to start {more} more: {e}"[:600]
                if stop is not None:
                    rows.append({"models": n, "processes": n, "stopped": stop})
                    print(f"[multimodel] {kind.label}: not {n} processes: {stop}", flush=True)
                    break
                served = [built.name] * n  # each replica serves its model under its folder's name
                rows.append(self.measure(servers, served, model) | {"cap_fraction": fraction})
        _added([r for r in rows if "stopped" not in r])
        return rows

    def no_room(self, rows: list[Row], more: int) -> str | None:
        """Why ``more`` processes should not start now (None: they fit, as far as the last
        count's processes tell), from what those took each and what is free now."""
        if not rows:
            return None
        if not self.stage.dry_run and time.time() - self.stage.started > DEADLINE_S:
            return f"the stage's time ({DEADLINE_S} s) is spent"
        last, reasons = rows[-1], []
        host = many.host_available_mib()
        if last["host_pss_mib"] is not None and host is not None:
            need = more * last["host_pss_mib"] / last["processes"] * MARGIN
            if need > host:
                reasons.append(f"host memory: {need:.0f} MiB needed, {host:.0f} MiB available")
        used = self.backend.memory_used_mib(self.gpu.uuid)
        if last["gpu_mib"] is not None and used is not None:
            need = more * last["gpu_mib"] / last["processes"] * MARGIN
            free = self.gpu.memory_mib - used
            if need > free:
                reasons.append(f"GPU memory: {need:.0f} MiB needed, {free} MiB free")
        return "; ".join(reasons) or None


def _added(rows: list[Row]) -> None:
    """Each row's memory per model added since the row before it."""
    for before, row in zip([None, *rows], rows, strict=False):
        for key in ("gpu_mib", "host_pss_mib"):
            added = None
            if before is not None and None not in (row[key], before[key]):
                added = round((row[key] - before[key]) / (row["models"] - before["models"]), 2)
            row[f"added_{key}_per_model"] = added


def judge_density(
    stage: kit.Stage, kind: Kind, sides: dict[str, list[Row]], on_cpu: str | None
) -> None:
    """``on_cpu``: why ONNX ran on the CPU on this GPU, where no NVML figure is to be had."""
    model = kind.label
    for side, rows in sides.items():
        measured = [r for r in rows if "stopped" not in r]
        stage.check(
            f"{model}, {side}: every model answered every request",
            bool(measured)
            and all(r["errors"] == 0 and not r.get("load_failures") for r in measured),
            "; ".join(
                f"x{r['models']}: {r['requests']} requests, {r['errors']} errors "
                f"{r.get('load_failures') or ''}"
                for r in measured
            ),
        )
        if on_cpu is not None:
            stage.check(f"{model}, {side}: NVML memory of every process", None, on_cpu)
            continue
        stage.gpu_check(
            f"{model}, {side}: NVML memory of every process",
            all(r["gpu_mib"] is not None for r in measured),
            ", ".join(f"x{r['models']}: {r['gpu_mib']} MiB" for r in measured),
        )
        if stage.dry_run:
            stage.check(
                f"{model}, {side}: no GPU figure on a simulated GPU",
                all(r["gpu_mib"] is None for r in measured),
                "NVML figures null",
            )
    one = {r["models"]: r for r in sides["one process"]}
    both = [r for r in sides["separate processes"] if "stopped" not in r and r["models"] in one]
    for r in both:  # the throughput one process keeps: its QPS over the separate processes'
        one[r["models"]]["qps_vs_separate"] = round(one[r["models"]]["qps"] / r["qps"], 2)
    if both and on_cpu is None:
        n, sep = both[-1]["models"], both[-1]["gpu_mib"]
        stage.gpu_check(
            f"{model}: {n} models take less GPU memory in one process than in {n}",
            None not in (sep, one[n]["gpu_mib"]) and one[n]["gpu_mib"] < sep,
            f"{one[n]['gpu_mib']} MiB in one process, {sep} MiB in {n}",
        )


COLUMNS = {
    "models": "models",
    "processes": "processes",
    "gpu_mib": "GPU MiB",
    "added_gpu_mib_per_model": "GPU MiB per added model",
    "host_pss_mib": "host PSS MiB",
    "added_host_pss_mib_per_model": "host MiB per added model",
    **{"qps": "QPS", "qps_vs_separate": "QPS / separate's"},
    **{"p50_ms": "p50 ms", "p99_ms": "p99 ms"},
}


def report_density(stage: kit.Stage) -> None:
    table, notes = [], []
    for model, sides in stage.results["density"].items():
        if "not run" in sides:
            notes.append(f"- {model}: not run: {sides['not run']}")
            continue
        for side, rows in sides.items():
            for r in rows:
                if "stopped" in r:
                    notes.append(f"- {model}, {side}: not {r['models']}: {r['stopped']}")
                else:
                    table.append([model, side, *(r.get(k) for k in COLUMNS)])
    threads = 2 if stage.dry_run else THREADS
    stage.sections[:1] = [  # the density section comes first and grows model by model
        "\n".join(
            [
                f"Density: {stage.results['rounds']} requests per model after one warm-up each, "
                f"round-robin over the models from {threads} client threads over gRPC. GPU memory "
                "is NVML's per process, summed (`-`: not measured); host memory is the processes' "
                "PSS summed; *per added model* is the growth since the row above.",
                "",
                *kit.markdown_table(["model", "side", *COLUMNS.values()], table),
                "",
                *notes,
            ]
        )
    ]


if __name__ == "__main__":
    main()

"""multimodel: many models in one server process against one process per model; paging over PCIe.

1. Density. Copies of the torch ``tiny`` (1, 8, 32, 128) and ``mobilenet_v2`` (1, 8, 32) under
   distinct names, served by ONE ``sharedserve serve --model-repository`` process (models added
   while it serves, through the repository API) against as many ``serve`` processes of one model
   each (started by ``pack``, each capped at an even share of what the largest count leaves
   after pack's context reserve). At each count: NVML memory of the processes summed, host
   memory (PSS) summed, the memory each added model costs, and the QPS of a fixed number of
   requests per model, round-robin over the models from a few client threads. Separate
   processes are added only while the memory the last ones took says the next ones fit (GPU
   and host); where that stops is recorded, never skipped silently.
2. Paging over PCIe. A repository of 16 ``mobilenet_v2`` copies, each with a budget
   (``gpu_memory_mib``: its peak measured in part 1, plus a quarter), served with ``--paging
   lru`` and a ``--gpu-memory-mib`` that holds about four: requests go round-robin, one at a
   time, so each one pages its model in (a device copy from host memory) and another out. The
   page-in is each such request's latency minus a resident request's (p50), beside the
   server's own ``sharedserve_model_page_in_seconds``; ``/sharedserve/v1/limits`` gives each
   model's state. The target (issue 30): a page-in under 50 ms.

A dry run serves ``tiny`` only (``mobilenet_v2`` takes seconds a request on a CPU running the test
suite): at 1 and 4 models, and 4 copies paged of which 2 fit. Every NVML figure is null and
every check only a GPU answers is n/a.
"""

# minutes: 3
# order: 45

from __future__ import annotations

import math
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kit
import many
import replicas

DENSITIES = {"tiny": [1, 8, 32, 128], "mobilenet_v2": [1, 8, 32]}
DRY_DENSITIES = {"tiny": [1, 4]}
ROUNDS, THREADS = 20, 8  # requests per model at each count; client threads
RESERVE_MIB = 512  # pack's --context-reserve-mib default
MARGIN = 1.25  # the next processes are started if this times what they should take is free
DEADLINE_S = 180  # past it no more separate processes start; paging takes ~20 s more
PAGING = {"copies": 16, "resident": 4, "rounds": 3}
DRY_PAGING = {"copies": 4, "resident": 2, "rounds": 2}
PAGE_IN_TARGET_MS = 50.0

Row = dict[str, Any]


def main() -> None:
    stage = kit.Stage.from_argv("multimodel", "Many models in one process; paging over PCIe")
    paged = "tiny" if stage.dry_run else "mobilenet_v2"  # mobilenet_v2 on 2 cores: seconds
    built = replicas.build_models(
        ["tiny"] if stage.dry_run else list(DENSITIES), stage.work / "models"
    )
    sweep = Density(stage, stage.gpu_backend(), stage.gpu())
    stage.results = {"gpu": sweep.gpu.uuid, "rounds": sweep.rounds, "density": {}}
    try:
        for model, counts in (DRY_DENSITIES if stage.dry_run else DENSITIES).items():
            sides = {
                "one process": sweep.one_process(built / model, model, counts),
                "separate processes": sweep.separate(built / model, model, counts),
            }
            stage.results["density"][model] = sides
            judge_density(stage, model, sides)
            report_density(stage)
            stage.finish(partial=True)  # cut off at the command's limit, the rows so far survive
        paging(stage, built / paged, paged, sweep.peaks.get(paged, []))
    finally:
        sweep.backend.close()
    stage.finish()


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

    def measure(self, servers: list[replicas.Server], names: list[str], model: str) -> Row:
        jobs = many.jobs_for(servers, names, model)
        measured = many.drive(jobs, self.rounds, 2 if self.stage.dry_run else THREADS)
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

    def one_process(self, built: Path, model: str, counts: list[int]) -> list[Row]:
        repository = self.stage.work / f"repository-{model}"
        names = [f"{model}-{i:03d}" for i in range(counts[-1])]
        many.add_copies(repository, built, names[: counts[0]])
        rows: list[Row] = []
        with many.serving(self.stage, repository, f"{model}-one-process") as server:
            loaded = counts[0]
            for n in counts:  # the models past the first added while it serves, as Triton's are
                many.add_copies(repository, built, names[:n])
                failed = many.load(server, names[loaded:n])
                loaded = n
                rows.append(self.measure([server], names[:n], model) | {"load_failures": failed})
            self.peaks[model] = [
                v["peak_mib"]
                for m in server.limits().get("models", {}).values()
                for v in m.get("versions", {}).values()
                if v.get("peak_mib")
            ]
        _added(rows)
        return rows

    def separate(self, built: Path, model: str, counts: list[int]) -> list[Row]:
        # Every process gets the cap the largest count allows, so the ones started first still
        # fit beside the ones added later.
        gpu_mib = self.gpu.memory_mib
        fraction = (gpu_mib - counts[-1] * RESERVE_MIB) / counts[-1] / gpu_mib
        rows: list[Row] = []
        servers: list[replicas.Server] = []
        with ExitStack() as stack:
            for n in counts:
                stop = self.no_room(rows, n - len(servers))
                if stop is not None:
                    rows.append({"models": n, "processes": n, "stopped": stop})
                    print(f"[multimodel] {model}: not {n} processes: {stop}", flush=True)
                    break
                more = n - len(servers)
                servers += stack.enter_context(replicas.packed(self.stage, built, more, fraction))
                rows.append(self.measure(servers, [model] * n, model) | {"cap_fraction": fraction})
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


def judge_density(stage: kit.Stage, model: str, sides: dict[str, list[Row]]) -> None:
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
    if both:
        n, sep = both[-1]["models"], both[-1]["gpu_mib"]
        stage.gpu_check(
            f"{model}: {n} models take less GPU memory in one process than in {n}",
            None not in (sep, one[n]["gpu_mib"]) and one[n]["gpu_mib"] < sep,
            f"{one[n]['gpu_mib']} MiB in one process, {sep} MiB in {n}",
        )


def paging(stage: kit.Stage, built: Path, model: str, peaks: list[float]) -> None:
    settings = DRY_PAGING if stage.dry_run else PAGING
    # The budget: the peak part 1 measured (the model in one process), plus a quarter; without
    # one (its /limits said none), twice its weights on disk.
    weights = sum(f.stat().st_size for f in (built / "1").iterdir()) / (1 << 20)
    budget = math.ceil(max(peaks) * MARGIN) if peaks else math.ceil(2 * weights)
    cap = math.floor(budget * (settings["resident"] + 0.5))
    names = [f"paged-{i:02d}" for i in range(settings["copies"])]
    repository = stage.work / "repository-paging"
    many.add_copies(repository, built, names, f"gpu_memory_mib: {budget}\n")
    results: dict[str, Any] = {
        "budget_mib": budget,
        "cap_mib": cap,
        "model": model,
        "budget_from": "part 1's peak" if peaks else "2x weights",
        **settings,
    }
    stage.results["paging"] = results
    try:
        with many.serving(
            stage, repository, "paging", "--paging", "lru", "--gpu-memory-mib", str(cap)
        ) as server:
            results |= many.page_round_robin(server, names, model, settings["rounds"])
    except RuntimeError as e:
        results["error"] = str(e)
    judge_paging(stage, results)
    report_paging(stage, results)


def judge_paging(stage: kit.Stage, r: dict[str, Any]) -> None:
    if "error" in r:
        detail = r["error"][-300:].replace("\n", " ")
        stage.check("paging: the server served its repository", False, detail)
        return
    stage.check(
        "paging: every request answered",
        r["errors"] == 0,
        f"{r['requests']} requests, {r['errors']} errors",
    )
    ins = r["page_ins"]
    stage.check(
        "paging: each round-robin request paged its model in by a device copy",
        ins["device_copy"] >= r["paged_requests"] and ins["reload"] == 0 and r["page_outs"] > 0,
        f"{ins} page-ins, {r['page_outs']:g} page-outs for {r['paged_requests']} requests",
    )
    memory, resident = r["memory"] or {}, r["states"].get("resident", 0)
    stage.check(
        "paging: the resident models held within the cap",
        resident <= r["resident"] and memory.get("held_mib", math.inf) <= r["cap_mib"],
        f"states {r['states']}; held {memory.get('held_mib')} of {memory.get('capacity_mib')} MiB",
    )
    page_in = r["page_in_ms"]["p50_ms"]
    stage.gpu_check(
        f"paging: a {r['model']} page-in under {PAGE_IN_TARGET_MS:g} ms",
        page_in is not None and page_in < PAGE_IN_TARGET_MS,
        f"p50 {page_in} ms (p99 {r['page_in_ms']['p99_ms']} ms) over a resident request's "
        f"{r['resident_ms']['p50_ms']} ms; server: {r['server_page_in']}",
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


def report_paging(stage: kit.Stage, r: dict[str, Any]) -> None:
    lines = [
        f"Paging: {r['copies']} `{r['model']}` copies, each with a budget of {r['budget_mib']} "
        f"MiB ({r['budget_from']}), `--paging lru --gpu-memory-mib {r['cap_mib']}` (about "
        f"{r['resident']} resident); {r['rounds']} rounds of one request per model, one at a time.",
        "",
    ]
    if "error" in r:
        lines.append(f"The server did not serve: {r['error'][-600:]}")
    else:
        lines += kit.markdown_table(
            ["figure", "p50 ms", "p99 ms"],
            [
                ["a resident model's request", *r["resident_ms"].values()],
                ["a request that pages its model in", *r["request_ms"].values()],
                ["page-in (that minus a resident request's p50)", *r["page_in_ms"].values()],
                [
                    "server's page_in_seconds (bucket bound)",
                    r["server_page_in"]["p50_le_ms"],
                    r["server_page_in"]["p99_le_ms"],
                ],
            ],
        )
        lines += [
            "",
            f"Page-ins {r['page_ins']}, page-outs {r['page_outs']:g}, cold starts "
            f"{r['cold_starts']:g}; states at the end {r['states']}; memory {r['memory']}.",
        ]
    stage.section(*lines)


if __name__ == "__main__":
    main()

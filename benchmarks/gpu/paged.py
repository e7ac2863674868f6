"""Part 2 of the GPU kit's ``multimodel`` stage: paging over PCIe.

Copies of one model, each with a budget (``gpu_memory_mib`` in its ``sharedserve.yaml``), served
by one ``sharedserve serve --model-repository --paging lru`` whose ``--gpu-memory-mib`` holds a
few of them. Requests go round-robin, one at a time, so each pages its model in (torch: a
device copy from host memory) and another out. The page-in is such a request's latency minus a
resident request's (p50), shown beside the server's own ``sharedserve_model_page_in_seconds``
(whose buckets give bounds, not figures) and the states ``/sharedserve/v1/limits`` reports.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import kit
import many
import replicas

PAGING = {"copies": 16, "resident": 4, "rounds": 3}
DRY_PAGING = {"copies": 4, "resident": 2, "rounds": 2}
PAGE_IN_TARGET_MS = 50.0
MARGIN = 1.25  # a budget over the measured peak


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
            results |= page_round_robin(server, names, model, settings["rounds"])
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


def metric_families(server: replicas.Server) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    _, body = replicas.http_get(server.rest, "/metrics")
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def counter(families: dict[str, Any], name: str, **labels: str) -> float:
    """A counter's value summed over models (and any labels not given)."""
    family = families.get(name)
    samples = family.samples if family else []
    return sum(
        float(s.value)
        for s in samples
        if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items())
    )


def histogram(families: dict[str, Any], name: str) -> dict[str, float | None]:
    """A histogram summed over models: count, mean, and p50/p99 as the upper bound of the
    bucket they fall in (a bound, not a figure: the buckets say no more)."""
    family = families.get(name)
    buckets: dict[float, float] = {}
    count = total = 0.0
    for s in family.samples if family else []:
        if s.name.endswith("_bucket"):
            le = float(s.labels["le"])
            buckets[le] = buckets.get(le, 0.0) + s.value
        elif s.name.endswith("_count"):
            count += s.value
        elif s.name.endswith("_sum"):
            total += s.value

    def bound(q: float) -> float | None:
        return next((le for le in sorted(buckets) if count and buckets[le] >= q * count), None)

    return {
        "count": count,
        "mean_ms": round(total / count * 1000, 3) if count else None,
        "p50_le_ms": _ms(bound(0.5)),
        "p99_le_ms": _ms(bound(0.99)),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def page_round_robin(
    server: replicas.Server, names: list[str], model: str, rounds: int
) -> dict[str, Any]:
    """``rounds`` requests per model, round-robin and one at a time, to a server that holds
    fewer of them than that: each request after the first round pages its model in (and
    another out). Then ten requests to the last one, resident: the floor the page-in is
    measured over. With the server's paging metrics and its models' states at the end."""
    jobs = many.jobs_for([server], names, model)
    codes, missed = [], []
    for _ in range(rounds):  # one at a time: each request pages its model in, another out
        for client, request in jobs:
            start = time.perf_counter()
            codes.append(client.predict(request)[0])
            missed.append(time.perf_counter() - start)
    client, request = jobs[-1]  # the model just paged in: resident now
    resident = []
    for _ in range(10):
        start = time.perf_counter()
        codes.append(client.predict(request)[0])
        resident.append(time.perf_counter() - start)
    floor = many.percentiles_ms(resident)["p50_ms"] or 0.0
    excess = [max(0.0, t - floor / 1000) for t in missed[len(names) :]]  # after the first round
    families = metric_families(server)
    limits = server.limits()
    states = [
        v.get("state")
        for m in limits.get("models", {}).values()
        for v in m.get("versions", {}).values()
    ]
    return {
        "requests": len(codes),
        "errors": sum(c != "OK" for c in codes),
        "resident_ms": many.percentiles_ms(resident),
        "request_ms": many.percentiles_ms(missed[len(names) :]),
        "page_in_ms": many.percentiles_ms(excess),
        "server_page_in": histogram(families, "sharedserve_model_page_in_seconds"),
        "page_ins": {
            how: counter(families, "sharedserve_model_page_ins", how=how)
            for how in ("device_copy", "reload")
        },
        "page_outs": counter(families, "sharedserve_model_page_outs"),
        "cold_starts": counter(families, "sharedserve_model_cold_starts"),
        "states": {s: states.count(s) for s in set(states)},
        "memory": limits.get("memory"),
        "paged_requests": len(missed) - len(names),
    }

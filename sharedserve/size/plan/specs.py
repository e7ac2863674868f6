"""Each planned GPU's share as a pack spec (``pack --spec``), shared servers included. Pure.

A dedicated model's replicas on the GPU are an entry of ``models:``, a shared server's replicas
an entry of ``servers:``: each model with its planned memory as its cap or budget (when measured:
a model's files are not a cap), the CPU limit its profile was measured under, its objective and
its share of the GPU's traffic as its weight. A server that pages writes ``paging: lru``, its
cap room for its pinned models and its largest paged one.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path

from sharedserve.pack.spec import PackSpecFile, ServerGroup, ServerModel, SpecEntry
from sharedserve.size.fleet import Fleet
from sharedserve.size.plan.document import Plan, PlanGpu, PlanModel, PlanServer

__all__ = ["gpu_specs", "model_cap"]


def _r(value: float) -> float:
    return round(value, 3)


def model_cap(model: PlanModel) -> int | None:
    # A measured figure (or the cap it ran under) is a cap; a model's files are only its least
    # need: pack then shares out what the GPU has, in proportion to them.
    if model.gpu_memory_source == "weights":
        return None
    return max(1, math.floor(model.gpu_memory_mib))


def _shared_server_cap(
    server: PlanServer, members: list[PlanModel], budgets: list[int | None]
) -> int | None:
    """The models' budgets summed, when every one was measured (the reserve is kept beside the
    cap, once for the process); paging, the pinned ones' and the largest paged one's."""
    if None in budgets:
        return None
    pinned = [b or 0 for m, b in zip(members, budgets, strict=True) if m.name not in server.paged]
    paged = [b or 0 for m, b in zip(members, budgets, strict=True) if m.name in server.paged]
    return sum(pinned) + max(paged, default=0)


def gpu_specs(plan: Plan, fleet: Fleet, out_dir: Path) -> list[PackSpecFile]:
    """Each GPU's share as a pack spec to write in ``out_dir``. Needs every model's files
    (``model:``)."""
    models = {m.name: m for m in plan.models}
    servers = {s.name: s for s in plan.servers}
    files = {m.name: m.model for m in fleet.models}
    return [_spec(gpu, models, servers, files, out_dir) for gpu in plan.gpus]


def _path(name: str, files: dict[str, Path | None], out_dir: Path) -> str:
    path = files[name]
    if path is None:
        raise ValueError(f"model {name} has no files (model:) for a pack spec")
    return os.path.relpath(path, out_dir)


def _spec(
    gpu: PlanGpu,
    models: dict[str, PlanModel],
    servers: dict[str, PlanServer],
    files: dict[str, Path | None],
    out_dir: Path,
) -> PackSpecFile:
    entries = []
    for name, count in Counter(r.model for r in gpu.replicas if r.server is None).items():
        model = models[name]
        entries.append(
            SpecEntry(
                model=_path(name, files, out_dir),
                name=name,
                replicas=count,
                gpu_memory_mib=model_cap(model),
                slo_p99_ms=model.slo_p99_ms,
                weight=_r(model.rate_per_replica * count),
                cpu_limit=model.cpu_limit or None,  # as its profile was measured
            )
        )
    shared = []
    # Each server's replica lists its models once each: a server's replicas here are its first
    # model's count.
    held = Counter(r.server for r in gpu.replicas if r.server is not None)
    for name, listed in held.items():
        server = servers[name]
        count = listed // len(server.models)
        members = [models[m] for m in server.models]
        budgets = [model_cap(m) for m in members]
        shared.append(
            ServerGroup(
                name=name,
                models=tuple(
                    ServerModel(
                        model=_path(m.name, files, out_dir),
                        name=m.name,
                        slo_p99_ms=m.slo_p99_ms,
                        weight=_r(m.rate_per_replica * count),
                        gpu_memory_mib=budget,
                        # Paging: the models it does not page stay in memory.
                        pinned=bool(server.paged) and m.name not in server.paged,
                    )
                    for m, budget in zip(members, budgets, strict=True)
                ),
                replicas=count,
                gpu_memory_mib=_shared_server_cap(server, members, budgets),
                cpu_limit=server.cpu_limit or None,
                paging=server.paging,
            )
        )
    # No `gpu:`: pack packs the share on the host's first GPU it fits (bundle), and runs it
    # without one too, caps recorded as not enforced, so a plan can be checked on a laptop.
    return PackSpecFile(models=tuple(entries) or None, servers=tuple(shared) or None)

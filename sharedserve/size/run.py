"""``sharedserve size --fleet``: read the fleet and its profiles, plan, write the plan's files.

With ``--corrections``, verify runs' factors (``predict.corrections``) correct each verified
model's predictions, and a plan that was optimistic is re-planned to meet its objectives: a
corrected model over its objective leaves its shared server, then gets more replicas or fewer
processes on its GPUs (``predict.corrections.meet_objective``), and the fleet is grouped and
packed again; where nothing meets it, the plan warns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from sharedserve.errors import ConfigError
from sharedserve.files import write_atomic
from sharedserve.pack.prepare import footprint_mib
from sharedserve.pack.spec import write_spec
from sharedserve.placement import OpenEnded, Placement, place
from sharedserve.server import find_model
from sharedserve.size.demand import Demand, demands
from sharedserve.size.fleet import Fleet, PagingSettings, listed, load_fleet
from sharedserve.size.grouping import Grouping, dedicated, group
from sharedserve.size.manifests import CLOSE, plan_manifests
from sharedserve.size.plan import (
    Plan,
    build_plan,
    gpu_specs,
    spec_index,
    spec_name,
    write_pages,
    write_plan,
)
from sharedserve.size.predict import (
    Correction,
    LatencyForecaster,
    load_corrections,
    meet_objective,
    replanned,
)
from sharedserve.size.profile import ModelProfile, load_profiles

__all__ = ["REPLANS", "plan_fleet"]

REPLANS = 3
"""Times at most the fleet is re-planned for corrected models over their objectives: each round
moves a model out of its server, or gives it more replicas or fewer neighbours, and a new
packing may crowd another corrected model's GPU."""


UNASKED = 0.02
"""The share of the plan's GPUs its manifests may leave unasked before the plan warns."""


def _files(fleet: Fleet) -> tuple[dict[str, float], dict[str, str]]:
    """The size on disk (their weights, at least) and the directory name of every model whose
    files the fleet gives."""
    sizes, directories = {}, {}
    for m in fleet.models:
        if m.model is not None:
            try:
                source = find_model(m.model)
            except ConfigError as e:
                raise ConfigError(f"model {m.name}: {e.message}") from e
            sizes[m.name] = footprint_mib(source.path)
            directories[m.name] = source.name
    return sizes, directories


def _write_manifests(plan: Plan, fleet: Fleet, directories: dict[str, str], out_dir: Path) -> Plan:
    """Write k8s.yaml and the Helm chart's values.yaml; the plan with what it asks of the
    allocator (and a warning if its cut makes a planned GPU's share overflow)."""
    files = {m.name: m.model for m in fleet.models if m.model is not None}
    manifests = plan_manifests(plan, fleet, directories, files)
    write_atomic(out_dir / "k8s.yaml", manifests.text.encode())
    write_atomic(out_dir / "values.yaml", manifests.values.encode())
    kubernetes = manifests.kubernetes
    warnings = list(plan.warnings)
    if manifests.unfit:
        warnings.append(
            f"k8s.yaml: with the allocator's {kubernetes.allocator_flag} "
            f"({kubernetes.vgpus_per_gpu} vGPUs a GPU), {listed(manifests.unfit)} "
            "would need more vGPUs than a GPU has: the cluster needs more GPUs than the plan; "
            "cut GPUs finer (kubernetes.vgpus_per_gpu)"
        )
    if kubernetes.gpus_worth < (1 - UNASKED) * plan.gpu_count:
        warnings.append(
            f"k8s.yaml: its pods ask for {kubernetes.gpus_worth:g} GPUs' worth against the "
            f"plan's {plan.gpu_count} GPUs: all pods of a Deployment ask the same, as much as "
            "its fullest GPU leaves room for, so room the plan left on its other GPUs goes "
            "unasked, and a scheduler filling GPUs by what pods ask may put more on a GPU than "
            "the plan did"
        )
    if kubernetes.under_share > CLOSE:
        warnings.append(
            f"k8s.yaml: with the allocator's {kubernetes.allocator_flag}, a pod asks for less "
            f"than its planned busy share by up to {kubernetes.under_share:.0%} of a GPU, so a "
            "scheduler may put more busy share on a GPU than the plan did: a vGPU counts one "
            "figure a pod, and where the plan put pods bound by memory beside pods bound by "
            "time on one GPU, their larger shares add up to more than the GPU (a coarse cut's "
            "rounding does too); DRA claims count memory and compute apart (kubernetes: "
            "{dra: true}), or cut GPUs finer (kubernetes.vgpus_per_gpu)"
        )
    return dataclasses.replace(plan, kubernetes=kubernetes, warnings=warnings)


def _pack(
    wanted: list[Demand],
    gpus: OpenEnded,
    reserve: float,
    target: float,
    *,
    paging: PagingSettings | None = None,
    runtime_mib: float = 0.0,
    predict: LatencyForecaster | None = None,
    kept_dedicated: dict[str, str] | None = None,
) -> tuple[Grouping, Placement, int]:
    """The grouping, its packing, and the GPUs a process per replica takes. Packed both ways
    without the GPU limit (only the plan chosen must keep to it); shared servers are dropped
    where a process per replica takes fewer GPUs. ``predict``: the plan's forecaster, by which a
    server's models must keep within their objectives; ``kept_dedicated``: models re-planned
    out of shared servers, with why."""
    factors = {} if predict is None else {m: c.p99_factor for m, c in predict.corrections.items()}
    grouping = group(wanted, gpu_memory_mib=gpus.memory_mib, reserve_mib=reserve, target=target,
                     paging=paging, runtime_mib=runtime_mib,
                     p99_of=None if predict is None else predict.server_p99,
                     p99_factors=factors, kept_dedicated=kept_dedicated)  # fmt: skip
    unlimited = OpenEnded(gpus.memory_mib, gpus.gpus_per_node)
    packing = place(grouping.requests(wanted), unlimited, reserve_mib=reserve, target=target)
    alone = packing
    if grouping.servers:
        alone = place([d.placed_as() for d in wanted], unlimited, reserve_mib=reserve,
                      target=target)  # fmt: skip
        if len(alone.gpus) < len(packing.gpus):
            grouping = dedicated(
                wanted,
                f"dedicated: with shared servers the fleet packed onto {len(packing.gpus)} GPUs, "
                f"with a process per replica onto {len(alone.gpus)}",
            )
            packing = alone
    if gpus.max_gpus is not None and len(packing.gpus) > gpus.max_gpus:
        raise ConfigError(
            f"the fleet needs {len(packing.gpus)} GPUs and gpu.max_gpus allows {gpus.max_gpus}"
        )
    return grouping, packing, len(alone.gpus)


def _replan(
    wanted: list[Demand],
    over: set[str],
    grouping: Grouping,
    predict: LatencyForecaster,
    *,
    kept: dict[str, str],
    changed: dict[str, str],
) -> tuple[list[Demand], bool]:
    """``wanted`` with each model of ``over`` re-planned to meet its objective as corrected:
    out of its shared server (into ``kept``, with why), with the replicas and density
    ``meet_objective`` finds; what changed, in words, into ``changed``. Whether anything did. A
    model nothing makes meet it is left as it was: a plan that costs more and still misses
    would be no better (the plan warns)."""
    moved, out = False, []
    for d in wanted:
        better = meet_objective(d, predict.alone) if d.model in over else None
        if better is None:
            out.append(d)
            continue
        words = []
        server = grouping.serving[d.model].server
        if server is not None and d.model not in kept:
            kept[d.model] = (
                f"dedicated: re-planned out of shared server {server}, where its p99 as "
                f"corrected by size --verify was over its {d.slo_p99_ms:g} ms objective"
            )
            words.append(f"out of shared server {server}, into replicas of its own")
        if better != d:
            words.append(replanned(d, better))
        if words:  # after an earlier round's, if any
            changed[d.model] = "; ".join([*filter(None, [changed.get(d.model)]), *words])
            moved = True
        out.append(better)
    return out, moved


def _plan(
    fleet: Fleet, wanted: list[Demand], warnings: list[str], corrections: dict[str, Correction]
) -> Plan:
    """The fleet grouped, packed and made a plan; re-planned, up to ``REPLANS`` times, while a
    corrected model is predicted over its objective and re-planning changes something."""
    gpus = OpenEnded(fleet.gpu.memory_mib, fleet.node.gpus, fleet.gpu.max_gpus)
    reserve, target = fleet.context_reserve_mib, fleet.utilization_target
    # One forecaster, so the plan reuses grouping's simulations (and a re-plan all of them).
    predict = LatencyForecaster.for_fleet(fleet, corrections)
    kept: dict[str, str] = {}
    changed: dict[str, str] = {}
    for attempt in range(REPLANS + 1):
        grouping, packing, separate = _pack(wanted, gpus, reserve, target, paging=fleet.paging,
                                            runtime_mib=fleet.host_memory_per_process_mib,
                                            predict=predict, kept_dedicated=kept)  # fmt: skip
        plan = build_plan(fleet, wanted, packing, warnings, grouping=grouping,
                          process_per_replica_gpus=separate, predict=predict,
                          replanned=changed)  # fmt: skip
        over = {m.name for m in plan.models if m.correction and m.predicted_p99_ms > m.slo_p99_ms}
        if not over or attempt == REPLANS:
            break
        wanted, moved = _replan(wanted, over, grouping, predict, kept=kept,
                                changed=changed)  # fmt: skip
        if not moved:
            break
        predict.forget()  # the models changed: their predictions, not the simulations
    return plan


def plan_fleet(fleet_path: Path, out_dir: Path, corrections: Sequence[Path] = ()) -> Plan:
    """Plan the fleet; write plan.json, plan.md, plan.html, k8s.yaml, the Helm chart's
    values.yaml and, when every model has files, a pack spec per GPU into ``out_dir``; return
    the plan plan.json holds.
    ``corrections``: ``size --verify``'s verify.json files, whose factors correct the verified
    models' predictions (``predict.corrections``)."""
    fleet = load_fleet(fleet_path)
    factors, corrected = load_corrections(corrections, [m.name for m in fleet.models])
    profiles: dict[str, dict[str, ModelProfile]] = {}
    for m in fleet.models:
        if str(m.profile) not in profiles:
            profiles[str(m.profile)] = load_profiles(m.profile)
    sizes, directories = _files(fleet)
    wanted, warnings = demands(fleet, profiles, sizes)
    plan = _plan(fleet, wanted, warnings + corrected, factors)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("gpu-*.yaml"):
        if spec_index(old) is not None:
            old.unlink()  # a smaller plan than the last must not leave its extra GPUs behind
    specs: list[str] = []
    bare = [m.name for m in fleet.models if m.model is None]
    if bare:
        plan.warnings.append(
            f"no pack specs: model {listed(bare)} has no files (`model:` in the fleet file)"
        )
    else:
        for index, spec in enumerate(gpu_specs(plan, fleet, out_dir)):
            specs.append(write_spec(spec, out_dir / spec_name(index)).name)
    plan = _write_manifests(
        dataclasses.replace(plan, pack_specs=specs), fleet, directories, out_dir
    )
    write_plan(plan, out_dir / "plan.json")
    # Without the verify runs a directory may hold from an earlier plan: they judged that one.
    write_pages(plan, out_dir)
    return plan

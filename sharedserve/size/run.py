"""``sharedserve size --fleet``: read the fleet and its profiles, plan, write the plan's files."""

from __future__ import annotations

import dataclasses
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
from sharedserve.size.manifests import plan_manifests
from sharedserve.size.plan import (
    Plan,
    PlanKubernetes,
    build_plan,
    gpu_specs,
    spec_index,
    spec_name,
    write_pages,
    write_plan,
)
from sharedserve.size.predict import LatencyForecaster
from sharedserve.size.profile import ModelProfile, load_profiles

__all__ = ["plan_fleet"]


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
    """Write k8s.yaml; the plan with what it asks of the allocator (and a warning if its cut
    makes a planned GPU's share overflow)."""
    files = {m.name: m.model for m in fleet.models if m.model is not None}
    manifests = plan_manifests(plan, fleet, directories, files)
    write_atomic(out_dir / "k8s.yaml", manifests.text.encode())
    size = manifests.size
    kubernetes = PlanKubernetes(
        manifests="k8s.yaml",
        allocator_flag=size.allocator_flag,
        vgpu_memory_mib=size.vgpu_memory_mib,
        vgpus_per_gpu=size.per_gpu,
        vgpus=manifests.vgpus,
        gpus_worth=round(manifests.vgpus / size.per_gpu, 2),
    )
    warnings = list(plan.warnings)
    if manifests.unfit:
        warnings.append(
            f"k8s.yaml: with the allocator's {size.allocator_flag} ({size.per_gpu} vGPUs a GPU), "
            f"{listed(manifests.unfit)} "
            "would need more vGPUs than a GPU has: the cluster needs more GPUs than the plan; "
            "cut GPUs finer (kubernetes.vgpus_per_gpu)"
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
) -> tuple[Grouping, Placement, int]:
    """The grouping, its packing, and the GPUs a process per replica takes. Packed both ways
    without the GPU limit (only the plan chosen must keep to it); shared servers are dropped
    where a process per replica takes fewer GPUs. ``predict``: the plan's forecaster, by which a
    server's models must keep within their objectives."""
    grouping = group(wanted, gpu_memory_mib=gpus.memory_mib, reserve_mib=reserve, target=target,
                     paging=paging, runtime_mib=runtime_mib,
                     p99_of=None if predict is None else predict.server_p99)  # fmt: skip
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


def plan_fleet(fleet_path: Path, out_dir: Path) -> Plan:
    """Plan the fleet; write plan.json, plan.md, plan.html, k8s.yaml and, when every model has
    files, a pack spec per GPU into ``out_dir``; return the plan plan.json holds."""
    fleet = load_fleet(fleet_path)
    profiles: dict[str, dict[str, ModelProfile]] = {}
    for m in fleet.models:
        if str(m.profile) not in profiles:
            profiles[str(m.profile)] = load_profiles(m.profile)
    sizes, directories = _files(fleet)
    wanted, warnings = demands(fleet, profiles, sizes)
    gpus = OpenEnded(fleet.gpu.memory_mib, fleet.node.gpus, fleet.gpu.max_gpus)
    reserve, target = fleet.context_reserve_mib, fleet.utilization_target
    predict = LatencyForecaster.for_fleet(fleet)  # one, so the plan reuses grouping's simulations
    grouping, packing, separate = _pack(wanted, gpus, reserve, target, paging=fleet.paging,
                                        runtime_mib=fleet.host_memory_per_process_mib,
                                        predict=predict)  # fmt: skip
    plan = build_plan(fleet, wanted, packing, warnings, grouping=grouping,
                      process_per_replica_gpus=separate, predict=predict)  # fmt: skip
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

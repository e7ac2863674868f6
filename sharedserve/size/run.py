"""``sharedserve size --fleet``: read the fleet and its profiles, plan, write the plan's files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from sharedserve.errors import ConfigError
from sharedserve.files import write_atomic
from sharedserve.pack.prepare import footprint_mib
from sharedserve.server.model_source import find_model
from sharedserve.size.binpack import pack
from sharedserve.size.demand import demands
from sharedserve.size.fleet import Fleet, listed, load_fleet
from sharedserve.size.manifests import plan_manifests
from sharedserve.size.plan import build_plan, gpu_specs, plan_markdown, spec_name
from sharedserve.size.plan_html import plan_html
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


def _write_manifests(
    plan: dict[str, Any], fleet: Fleet, directories: dict[str, str], out_dir: Path
) -> None:
    manifests = plan_manifests(plan, fleet, directories)
    write_atomic(out_dir / "k8s.yaml", manifests.text.encode())
    size = manifests.size
    plan["kubernetes"] = {
        "manifests": "k8s.yaml",
        "allocator_flag": size.allocator_flag,
        "vgpu_memory_mib": size.vgpu_memory_mib,
        "vgpus_per_gpu": size.per_gpu,
        "vgpus": manifests.vgpus,
        "gpus_worth": round(manifests.vgpus / size.per_gpu, 2),
    }
    if manifests.unfit:
        plan["warnings"].append(
            f"k8s.yaml: with the allocator's {size.allocator_flag} ({size.per_gpu} vGPUs a GPU), "
            f"{listed(manifests.unfit)} "
            "would need more vGPUs than a GPU has: the cluster needs more GPUs than the plan; "
            "cut GPUs finer (kubernetes.replicas_per_gpu)"
        )


def plan_fleet(fleet_path: Path, out_dir: Path) -> dict[str, Any]:
    """Plan the fleet; write plan.json, plan.md, plan.html, k8s.yaml and, when every model has
    files, a pack spec per GPU into ``out_dir``; return the plan."""
    fleet = load_fleet(fleet_path)
    profiles: dict[str, dict[str, ModelProfile]] = {}
    for m in fleet.models:
        if str(m.profile) not in profiles:
            profiles[str(m.profile)] = load_profiles(m.profile)
    sizes, directories = _files(fleet)
    wanted, warnings = demands(fleet, profiles, sizes)
    packing = pack(
        wanted,
        gpu_memory_mib=fleet.gpu.memory_mib,
        reserve_mib=fleet.context_reserve_mib,
        target=fleet.utilization_target,
        gpus_per_node=fleet.node.gpus,
        max_gpus=fleet.gpu.max_gpus,
    )
    plan = build_plan(fleet, wanted, packing, warnings)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("gpu-*.yaml"):
        old.unlink()  # a smaller plan than the last must not leave its extra GPUs behind
    specs: list[str] = []
    bare = [m.name for m in fleet.models if m.model is None]
    if bare:
        plan["warnings"].append(
            f"no pack specs: model {listed(bare)} has no files (`model:` in the fleet file)"
        )
    else:
        for index, spec in enumerate(gpu_specs(plan, fleet, out_dir)):
            name = spec_name(index)
            write_atomic(out_dir / name, yaml.safe_dump(spec, sort_keys=False).encode())
            specs.append(name)
    plan["pack_specs"] = specs
    _write_manifests(plan, fleet, directories, out_dir)
    write_atomic(out_dir / "plan.json", (json.dumps(plan, indent=2) + "\n").encode())
    write_atomic(out_dir / "plan.md", plan_markdown(plan, specs).encode())
    write_atomic(out_dir / "plan.html", plan_html(plan).encode())
    return plan

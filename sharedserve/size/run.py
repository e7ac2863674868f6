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
from sharedserve.size.fleet import Fleet, load_fleet
from sharedserve.size.plan import build_plan, gpu_specs, plan_markdown, spec_name
from sharedserve.size.plan_html import plan_html
from sharedserve.size.profile import ModelProfile, load_profiles

__all__ = ["plan_fleet"]


def _weights(fleet: Fleet) -> dict[str, float]:
    """The size on disk of every model whose files the fleet gives (their weights, at least)."""
    out = {}
    for m in fleet.models:
        if m.model is not None:
            try:
                out[m.name] = footprint_mib(find_model(m.model).path)
            except ConfigError as e:
                raise ConfigError(f"model {m.name}: {e.message}") from e
    return out


def plan_fleet(fleet_path: Path, out_dir: Path) -> dict[str, Any]:
    """Plan the fleet; write plan.json, plan.md, plan.html and, when every model has files, a
    pack spec per GPU into ``out_dir``; return the plan."""
    fleet = load_fleet(fleet_path)
    profiles: dict[str, dict[str, ModelProfile]] = {}
    for m in fleet.models:
        if str(m.profile) not in profiles:
            profiles[str(m.profile)] = load_profiles(m.profile)
    wanted, warnings = demands(fleet, profiles, _weights(fleet))
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
            f"no pack specs: model {', '.join(bare)} has no files (`model:` in the fleet file)"
        )
    else:
        for index, spec in enumerate(gpu_specs(plan, fleet, out_dir)):
            name = spec_name(index)
            write_atomic(out_dir / name, yaml.safe_dump(spec, sort_keys=False).encode())
            specs.append(name)
    plan["pack_specs"] = specs
    write_atomic(out_dir / "plan.json", (json.dumps(plan, indent=2) + "\n").encode())
    write_atomic(out_dir / "plan.md", plan_markdown(plan, specs).encode())
    write_atomic(out_dir / "plan.html", plan_html(plan).encode())
    return plan

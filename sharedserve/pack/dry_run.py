"""``sharedserve pack --dry-run``: the placement, printed; nothing is made or started."""

from __future__ import annotations

from rich.console import Console

from sharedserve.config import PackSettings
from sharedserve.pack.display import placement_lines, placement_table
from sharedserve.pack.prepare import PreparedPack, prepare_pack

__all__ = ["dry_run", "shared_server_lines"]


def dry_run(settings: PackSettings, console: Console | None = None) -> int:
    """Check the pack as a run would, print where each replica would go and what it would get,
    and return the exit status (0); ConfigError where a run would refuse."""
    plan = prepare_pack(settings, dry_run=True)
    console = console or Console()  # the terminal's width: the table fits 80 columns
    console.print(placement_table(plan))
    for line in [*placement_lines(plan), *shared_server_lines(plan)]:
        console.print(line, highlight=False, soft_wrap=True)
    console.print("dry run: nothing was started", highlight=False)
    return 0


def shared_server_lines(plan: PreparedPack) -> list[str]:
    """A line for each shared server, then one for each of its models: what every one of its
    processes holds, with the settings its model file will say."""
    lines = []
    seen: set[str] = set()
    for spec, entry in zip(plan.specs, plan.entries, strict=True):
        if not entry.is_shared_server or spec.model in seen:
            continue
        seen.add(spec.model)
        paging = ", paging lru" if entry.paging else ""
        lines.append(
            f"shared server {spec.model}: {entry.replicas} process"
            f"{'' if entry.replicas == 1 else 'es'} (serve --model-repository), each holding "
            f"{len(entry.models)} models{paging}:"
        )
        for held, model in zip(spec.models, entry.models, strict=True):
            budget = (
                "peak at load" if model.gpu_memory_mib is None else f"{model.gpu_memory_mib} MiB"
            )
            slo = "" if held.slo_p99_ms is None else f", P99 objective {held.slo_p99_ms:g} ms"
            extra = ", pinned" if model.pinned else ""
            if model.max_inflight is not None:
                extra += f", max_inflight {model.max_inflight}"
            lines.append(
                f"  {held.name} ({model.model_dir}): weight {held.weight:g}{slo}, "
                f"budget {budget}{extra}"
            )
    return lines

"""``sharedserve pack --dry-run``: the placement, printed; nothing is made or started."""

from __future__ import annotations

from rich.console import Console

from sharedserve.config import PackSettings
from sharedserve.pack.display import placement_lines, placement_table
from sharedserve.pack.prepare import prepare_pack

__all__ = ["dry_run"]


def dry_run(settings: PackSettings, console: Console | None = None) -> int:
    """Check the pack as a run would, print where each replica would go and what it would get,
    and return the exit status (0); ConfigError where a run would refuse."""
    plan = prepare_pack(settings, dry_run=True)
    console = console or Console(width=max(120, Console().width))
    console.print(placement_table(plan))
    for line in placement_lines(plan):
        console.print(line, highlight=False, soft_wrap=True)
    console.print("dry run: nothing was started", highlight=False)
    return 0

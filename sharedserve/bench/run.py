"""``sharedserve bench`` below its flags: a sweep with a progress bar, stopped in order by
SIGINT or SIGTERM with the rows so far kept, marked partial.

Every command that runs a bench (``bench``, ``profile``, ``size --verify``) goes through
``run_stoppable``: one that did not (``profile``, once) left its replicas' cgroups behind when
killed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from sharedserve.config import BenchSettings, PackEntry, PackSettings
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import ConfigError
from sharedserve.pack.stopping import StopSignals

__all__ = ["model_pack", "parse_scales", "run_stoppable", "run_with_progress"]


def model_pack(
    entry: PackEntry,
    policy: PlacementPolicy,
    fake_gpus: Path | None,
    environment: dict[str, str],
) -> PackSettings:
    """A density sweep's pack: the one entry at one replica, which each scale multiplies."""
    return PackSettings(
        entries=(replace(entry, replicas=1),),
        placement_policy=policy,
        fake_gpus=fake_gpus,
        environment=environment,
    )


def parse_scales(flag: str, text: str) -> tuple[int, ...]:
    """Comma-separated positive integers (``--densities``, ``--scales``); ConfigError names
    ``flag``."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ConfigError(f"{flag} must be positive integers, got {text!r}")
    return values


def run_stoppable(
    settings: BenchSettings,
    console: Console,
    on_scale: Callable[[int, int], None] = lambda scale, replicas: None,
    on_row: Callable[[dict[str, Any]], None] = lambda row: None,
) -> dict[str, Any]:
    """``run_bench`` under ``StopSignals``; the report. Stopped by a signal (or Ctrl-C), it says
    on ``console`` where the partial report is and raises ``StoppedBySignal``."""
    from sharedserve.bench.sweep import BenchInterrupted, run_bench

    with StopSignals("stopping (rows so far are kept)") as stop:
        try:
            return run_bench(settings, on_scale=on_scale, on_row=on_row, should_stop=stop.is_set)
        except (BenchInterrupted, KeyboardInterrupt):
            console.print(
                f"interrupted: the rows measured so far are in {settings.out_dir} (marked partial)"
            )
            raise stop.stopped() from None


def run_with_progress(settings: BenchSettings, *, mix: bool) -> dict[str, Any]:
    """``run_stoppable`` with a progress bar and a line per row on stderr (the bar only on a
    terminal); ``mix``: a spec's scales, else one model's densities."""
    settings.validate()
    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task("scale" if mix else "density", total=len(settings.scales))

        def label(scale: int, replicas: int) -> str:
            return f"scale {scale} ({replicas} replicas)" if mix else f"density {replicas}"

        def on_scale(scale: int, replicas: int) -> None:
            progress.update(task, description=label(scale, replicas))

        def on_row(row: dict[str, Any]) -> None:
            progress.advance(task)
            console.log(
                f"{label(row['scale'], row['density'])}: {row['qps']:.1f} qps, "
                f"p99 {row['p99_ms']} ms"
            )

        return run_stoppable(settings, console, on_scale=on_scale, on_row=on_row)

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

from sharedserve.bench.estimate import Estimate, estimate
from sharedserve.bench.progress import step_progress
from sharedserve.config import BenchSettings, PackEntry, PackSettings
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import ConfigError
from sharedserve.pack import Target, check_pack, read_targets
from sharedserve.pack.stopping import StopSignals

__all__ = [
    "ENDPOINTS",
    "check_sweep",
    "describe_targets",
    "model_pack",
    "parse_scales",
    "run_stoppable",
    "run_with_progress",
]

ENDPOINTS = "the running endpoints"
"""What a ``--targets`` run measures, as its estimate, its step and its row name it: one
measurement of servers as they are, neither a density nor a scale."""


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


def check_sweep(settings: BenchSettings) -> None:
    """Every refusal the sweep would meet, met now, before anything is printed or written: the
    settings, the targets file, or the first scale's pack (its models found, their frameworks
    installed, its replicas placed) as ``pack --dry-run`` checks it. ConfigError."""
    settings.validate()
    if settings.targets_file is not None:
        read_targets(settings.targets_file)
        return
    assert settings.pack is not None  # validate: a pack or a targets file
    first = settings.scales[0]
    check_pack(
        replace(
            settings.pack,
            entries=tuple(replace(e, replicas=e.replicas * first) for e in settings.pack.entries),
        )
    )


def describe_targets(targets: list[Target]) -> str:
    """What a targets run measures, in a few words: its servers (the processes a row's density
    counts) and the models they serve."""
    servers = len({t.rest for t in targets})
    models = len({t.model for t in targets})
    return (
        f"{ENDPOINTS} ({servers} server{'' if servers == 1 else 's'}, "
        f"{models} model{'' if models == 1 else 's'})"
    )


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


def run_with_progress(
    settings: BenchSettings,
    *,
    mix: bool,
    console: Console | None = None,
    plan: Estimate | None = None,
    done: int = 0,
    prefix: str = "",
) -> dict[str, Any]:
    """``run_stoppable`` with the time left (a bar on a terminal, a line per step elsewhere) and
    a line per row, on ``console`` (stderr by default); ``mix``: a spec's scales, else one
    model's densities. ``plan`` is the estimate the time left counts down (this sweep's unless
    given), of which ``done`` steps ran before; ``prefix`` leads each step's label."""
    settings.validate()
    console = console or Console(stderr=True)
    plan = plan or estimate(settings)

    def label(scale: int, replicas: int) -> str:
        if settings.targets_file is not None:
            return prefix + ENDPOINTS  # its estimate said what they are, once
        return prefix + (f"scale {scale} ({replicas} replicas)" if mix else f"density {replicas}")

    with step_progress(console, plan, done) as steps:

        def on_row(row: dict[str, Any]) -> None:
            steps.finish(
                f"{label(row['scale'], row['density'])}: {row['qps']:.1f} qps, "
                f"p99 {row['p99_ms']} ms"
            )

        return run_stoppable(
            settings, console, on_scale=lambda s, r: steps.start(label(s, r)), on_row=on_row
        )

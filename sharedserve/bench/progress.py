"""How long a sweep will take, said before it starts, and how much of it is left while it runs.

The estimate is arithmetic on the settings: every step (a density, or a scale of a mix) takes its
warm-up and its measured ``--duration``, plus an allowance for what is not measured (starting
and stopping the replicas and the load generator). The allowance comes from CPU runs here: tiny
and mobilenet_v2 took 5 to 11 s a step beyond warm-up and measurement at densities 1 to 4, so
10 s. A step whose windows do not agree measures on, up to ``--max-duration``: the estimate
gives that upper bound too, so neither figure is a promise.

On a terminal the time left is a column of a ``rich`` progress bar; elsewhere (a log, CI) each
step gets one line as it starts, since a bar redrawn in a file is noise.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from sharedserve.config import BenchSettings

__all__ = ["STARTUP_ALLOWANCE_S", "Estimate", "StepProgress", "estimate", "span", "step_progress"]

STARTUP_ALLOWANCE_S = 10.0
"""Seconds a packed step takes beyond warm-up and measurement (replicas and load generator
starting and stopping): 5 to 11 s measured on two cores."""
TARGETS_ALLOWANCE_S = 3.0
"""The same for ``--targets``, which starts no replica: the load generator alone."""


def span(seconds: float) -> str:
    """A duration as people read it: ``45 s``, ``3 min 20 s``, ``1 h 5 min``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        minutes, rest = divmod(s, 60)
        return f"{minutes} min" + (f" {rest} s" if rest else "")
    hours, rest = divmod(s, 3600)
    return f"{hours} h" + (f" {rest // 60} min" if rest // 60 else "")


@dataclass(frozen=True)
class Estimate:
    """A sweep's expected length: ``steps`` steps of warm-up, measurement and an allowance."""

    steps: int
    warmup_s: float
    duration_s: float
    """Seconds measured per step when its windows agree at once."""
    max_duration_s: float
    """Seconds measured per step at most (``--max-duration``)."""
    allowance_s: float
    """Seconds per step for starting and stopping what it measures (not measured, estimated)."""

    @property
    def step_s(self) -> float:
        return self.warmup_s + self.duration_s + self.allowance_s

    @property
    def total_s(self) -> float:
        return self.steps * self.step_s

    @property
    def longest_s(self) -> float:
        return self.steps * (self.warmup_s + self.max_duration_s + self.allowance_s)

    def left_s(self, done: int, into_step_s: float = 0.0) -> float:
        """Seconds left after ``done`` steps and ``into_step_s`` of the one running."""
        current = max(0.0, self.step_s - into_step_s) if done < self.steps else 0.0
        return current + max(0, self.steps - done - 1) * self.step_s

    def describe(self, what: str) -> str:
        """One line: the expected total, what it is made of, and the longest it may take."""
        step = (
            f"{self.warmup_s:g} s warm-up + {self.duration_s:g} s measured + ~{self.allowance_s:g} "
            "s to start and stop"
        )
        line = f"estimate: about {span(self.total_s)} for {what} (each {step})"
        if self.max_duration_s > self.duration_s:
            line += (
                f"; up to {span(self.longest_s)} if every step's windows take until "
                f"--max-duration ({self.max_duration_s:g} s) to agree"
            )
        return line


def estimate(settings: BenchSettings, sweeps: int = 1) -> Estimate:
    """The estimate of ``sweeps`` sweeps of ``settings`` (profile runs two: two patterns)."""
    targets = settings.targets_file is not None
    return Estimate(
        steps=sweeps * (1 if targets else len(settings.scales)),
        warmup_s=settings.warmup_s,
        duration_s=settings.duration_s,
        max_duration_s=(
            settings.max_measured_s if settings.stability_windows > 1 else settings.duration_s
        ),
        allowance_s=TARGETS_ALLOWANCE_S if targets else STARTUP_ALLOWANCE_S,
    )


class _Left(ProgressColumn):
    """The time the estimate leaves, from the steps done and the running step's start."""

    def __init__(self, plan: Estimate) -> None:
        super().__init__()
        self._plan = plan

    def render(self, task: Task) -> Text:
        started = task.fields.get("started")
        into = 0.0 if started is None else time.monotonic() - started
        return Text(f"about {span(self._plan.left_s(int(task.completed), into))} left")


class StepProgress:
    """Says each step as it starts (with the time left) and each step's result as it ends."""

    def __init__(
        self, console: Console, plan: Estimate, progress: Progress | None, done: int
    ) -> None:
        self._console, self._plan, self._progress = console, plan, progress
        self._task = (
            None if progress is None else progress.add_task("", total=plan.steps, completed=done)
        )
        self.done = done

    def start(self, label: str) -> None:
        """Step ``label`` (e.g. ``density 2``) starts now."""
        where = f"{label} (step {self.done + 1} of {self._plan.steps})"
        if self._progress is None or self._task is None:
            left = span(self._plan.left_s(self.done))
            self._console.print(f"{where}: about {left} left", highlight=False, soft_wrap=True)
        else:
            self._progress.update(self._task, description=where, started=time.monotonic())

    def finish(self, line: str) -> None:
        """The running step ended; ``line`` says what it measured."""
        self.done += 1
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.done)
        self._console.print(line, highlight=False, soft_wrap=True)


@contextmanager
def step_progress(console: Console, plan: Estimate, done: int = 0) -> Iterator[StepProgress]:
    """A bar with the time left on a terminal, a line per step elsewhere; ``done`` steps of the
    plan ran before (profile's second sweep continues its first's count)."""
    if not console.is_terminal:
        yield StepProgress(console, plan, None, done)
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        _Left(plan),
        console=console,
    ) as progress:
        yield StepProgress(console, plan, progress, done)

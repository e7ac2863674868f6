"""How much of a sweep is left while it runs (``bench.estimate`` says the whole before it starts).

On a terminal the time left is a column of a ``rich`` progress bar; elsewhere (a log, CI) each
step gets one line as it starts, since a bar redrawn in a file is noise. Once a step has run, the
time left is paced by how long the steps so far took against their estimate: a machine slower to
start its replicas than the allowance is slower for the rest of the sweep too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from sharedserve.bench.estimate import Estimate, span

__all__ = ["StepProgress", "step_progress"]


class _Left(ProgressColumn):
    """The time the estimate leaves, from the steps done and the running step's start."""

    def __init__(self, plan: Callable[[], Estimate]) -> None:
        super().__init__()
        self._plan = plan

    def render(self, task: Task) -> Text:
        started = task.fields.get("started")
        into = 0.0 if started is None else time.monotonic() - started
        return Text(f"about {span(self._plan().left_s(int(task.completed), into))} left")


class StepProgress:
    """Says each step as it starts (with the time left) and each step's result as it ends."""

    def __init__(
        self,
        console: Console,
        plan: Estimate,
        progress: Progress | None,
        done: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._console, self._progress, self._clock = console, progress, clock
        self._estimate = self.plan = plan
        self._task = (
            None if progress is None else progress.add_task("", total=plan.steps, completed=done)
        )
        self.done = done
        self._first: tuple[int, float] | None = None
        """The first step this shows and when it started: what the pace is measured from."""

    def start(self, label: str) -> None:
        """Step ``label`` (e.g. ``density 2``) starts now."""
        now = self._clock()
        if self._first is None:
            self._first = (self.done, now)
        elif self.done > self._first[0]:
            first, since = self._first
            self.plan = self._estimate.paced(first, self.done, now - since)
        where = (
            label
            if self.plan.steps == 1
            else f"{label} (step {self.done + 1} of {self.plan.steps})"
        )
        if self._progress is None or self._task is None:
            left = span(self.plan.left_s(self.done))
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
    shown: list[StepProgress] = []
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        _Left(lambda: shown[0].plan if shown else plan),
        console=console,
    ) as progress:
        shown.append(StepProgress(console, plan, progress, done))
        yield shown[0]

"""The CLI's commands, each as the path of names a user types (``("models", "build")``), and the
click command at a path: for tests that hold every command to the same rule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from sharedserve.cli import app

__all__ = ["COMMANDS", "command_at", "commands"]


def commands(command: Any, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The path of every leaf command under ``command``, itself at ``path``."""
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from commands(sub, (*path, name))
    else:
        yield path


def command_at(path: tuple[str, ...]) -> Any:
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return command


# Every command a user runs; bench-worker is the bench's own child process, not a user's.
COMMANDS = sorted(p for p in commands(typer.main.get_command(app), ()) if p != ("bench-worker",))

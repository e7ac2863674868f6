"""The ``sharedserve`` command line. Thin: parse flags, read the environment, build settings, run.

This package is the only place that reads environment variables (the env contract's included),
so every lower layer can be driven and tested from settings objects alone. Each command group
lives in its own module and registers itself on the one typer ``app`` when imported here.
"""

from __future__ import annotations

import sys

import typer

from sharedserve.cli import allocator, bench, convert, k8s, pack, profile, schema, serve, size
from sharedserve.cli._app import app
from sharedserve.errors import ConfigError, SharedServeError

__all__ = ["app", "main"]

_COMMAND_MODULES = (
    allocator,
    bench,
    convert,
    k8s,
    pack,
    profile,
    schema,
    serve,
    size,
)  # imported for the commands they register


def main() -> None:
    try:
        app()
    except ConfigError as e:
        typer.echo(f"error: {e.message}", err=True)
        sys.exit(2)
    except SharedServeError as e:
        typer.echo(f"error: {e.message}", err=True)
        sys.exit(1)

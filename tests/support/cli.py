"""Run ``sharedserve`` in this process, through the same ``main`` a shell reaches.

For what a command decides before it starts anything (help texts, usage errors, refusals): a
child Python costs a second or more on a loaded machine just to import the CLI, and twelve of
them made up a visible share of the suite. ``main`` is the entry point itself, so a
``ConfigError`` reaches the test as exit status 2 with its ``error:`` line, as in a shell; what
the root callback sets in the environment, in ``framework_output`` and in logging is undone
afterwards, so one invocation does not change the next test's process.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, cast

import click
from click.testing import CliRunner, Result

from sharedserve import framework_output
from sharedserve.cli import main
from sharedserve.contract import VARIABLES

__all__ = ["invoke"]


class _Main:
    """What ``CliRunner.invoke`` calls: ``sharedserve.cli.main`` with ``args`` as its argv."""

    name = "sharedserve"

    def main(self, args: Sequence[str], prog_name: str, **_: Any) -> None:
        saved = sys.argv
        sys.argv = [prog_name, *args]
        try:
            main()
        finally:
            sys.argv = saved


def invoke(*args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """``sharedserve ARGS`` in process: ``exit_code``, ``stdout`` and ``stderr`` as a shell sees
    them. ``env`` overrides variables for the call (``None`` unsets one); the env contract's
    variables and the log level are unset unless given, as ``clean_env`` does for a child."""
    base: dict[str, str | None] = {name: None for name in (*VARIABLES, "SHAREDSERVE_LOG_LEVEL")}
    saved_env = dict(os.environ)
    # The root callback configures logging for a process of its own: a handler on the root
    # logger (bound to this call's captured stderr, closed afterwards) and the frameworks' levels.
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    saved_levels = {n: logging.getLogger(n).level for n in framework_output.FRAMEWORK_LOGGERS}
    try:
        # And the warnings' filters and display (framework_output.route_upstream_deprecations).
        with warnings.catch_warnings():
            return CliRunner().invoke(
                cast(click.Command, _Main()), list(args), env={**base, **(env or {})}
            )
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        framework_output.hide_startup_output(False)  # inert again, as for a library user
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)

"""Help texts and usage errors as a new user meets them.

Every option shows its default (a value, or what happens without it); nothing in a help text is
eaten as rich markup (``[default: x]`` was, leaving a stray `` .``); command descriptions are
reflowed, not hard-wrapped at the docstring's line breaks; usage errors name the command the
user typed.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from sharedserve.cli import app
from sharedserve.cli._app import ExampleModelName
from sharedserve.models import CATALOG
from tests.support.cli import invoke
from tests.support.cli_commands import COMMANDS, command_at

WIDTH = 80
# What rich takes for a markup tag and drops: "[" then a letter, "#", "/" or "@", up to "]".
RICH_TAG = re.compile(r"(?<!\\)\[[a-z#/@][^\[]*?\]")


def render_help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_option_says_its_default(path: tuple[str, ...]) -> None:
    for param in command_at(path).params:
        if not type(param).__name__.endswith("Option") or param.required or param.hidden:
            continue
        if param.name == "help":
            continue
        shown = isinstance(param.show_default, str) or (
            param.show_default is not False and param.default is not None
        )
        assert shown, f"{' '.join(path)} {param.opts[0]}: no default shown"
        assert not RICH_TAG.search(param.help or ""), f"{param.opts[0]}: markup in {param.help!r}"


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_has_no_stray_marks_and_is_reflowed(path: tuple[str, ...]) -> None:
    text = render_help(path)
    assert " ." not in text.replace("...", "")
    assert "<list[str]>" not in text and "{names}" not in text
    description = text.split("╭", 1)[0].splitlines()
    # Greedy wrapping: a line is only broken where the next word would not fit on it.
    for line, following in itertools.pairwise(description):
        if line.strip() and following.strip():
            next_word = following.split()[0]
            assert len(line.rstrip()) + 1 + len(next_word) > WIDTH - 2, (
                f"ragged help of {' '.join(path)}:\n{line}\n{following}"
            )


def test_models_build_names_its_arguments() -> None:
    usage = render_help(("models", "build")).splitlines()[1]
    assert "{MODEL}..." in usage  # typer's way of saying "one or more, required"
    assert {m.value for m in ExampleModelName} == set(CATALOG)


def test_a_mistyped_pass_through_option_names_pack() -> None:
    result = invoke("pack", "--model", ".", "--replicas", "1", "--enable-batchin")
    assert result.exit_code == 2, result.output
    assert "Usage: serve" not in result.stderr
    assert "--enable-batchin" in result.stderr and "--enable-batching" in result.stderr
    assert "sharedserve serve" in result.stderr


def test_bench_with_model_and_targets_says_not_both(tmp_path: Any) -> None:
    result = invoke("bench", "--model", ".", "--targets", "t.json", "--out", str(tmp_path))
    assert result.exit_code == 2 and "not both" in result.stderr

"""Nothing a user reads sends them somewhere they cannot follow: the README's and every
command's help name only documents the repository holds, and the options that read a fake-GPU
inventory say where its format is written down."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from sharedserve.cli import app
from tests.support.cli_commands import COMMANDS, command_at

ROOT = Path(__file__).resolve().parents[2]
# A document named in prose or help: a path to a .md file (links' targets included), or a
# capitalised one such as README.md; a bare lower-case name (plan.md, report.md) is an output.
DOCUMENT = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+\.md|[A-Z][A-Z_]*\.md)\b")
PLACEHOLDERS = {"NAME.md"}  # what a stage of the GPU kit writes, one per stage


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result.output


def _missing(text: str, base: Path) -> set[str]:
    named = set(DOCUMENT.findall(text)) - PLACEHOLDERS
    return {n for n in named if not (base / n).exists() and not (ROOT / n).exists()}


def test_readme_and_docs_name_only_documents_that_exist() -> None:
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        assert "DESIGN.md" not in text, doc
        assert _missing(text, doc.parent) == set(), doc


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_names_only_documents_that_exist(path: tuple[str, ...]) -> None:
    text = _help(path)
    assert "DESIGN.md" not in text
    assert _missing(text, ROOT) == set()


def test_every_fake_gpus_option_says_where_the_format_is() -> None:
    taking = [p for p in COMMANDS if any(q.name == "fake_gpus" for q in command_at(p).params)]
    assert {("serve",), ("pack",), ("allocator",)} <= set(taking)
    for path in taking:
        (option,) = (q for q in command_at(path).params if q.name == "fake_gpus")
        assert isinstance(option, typer.core.TyperOption)
        assert "docs/fake-gpus.md" in (option.help or ""), " ".join(path)
    assert (ROOT / "docs" / "fake-gpus.md").is_file()


def test_the_gpu_kit_readme_is_written_for_a_user_with_a_gpu_and_a_shell() -> None:
    # Not for an internal tool's audience: no lent machine, no "device" runs, nothing carried.
    text = (ROOT / "benchmarks" / "gpu" / "README.md").read_text()
    for word in ("carry", "carried", "lent", "`device`", "device run", "$OUT"):
        assert word not in text, word
    for heading in ("## What you need", "## Running it", "## Where the results go"):
        assert heading in text
    # The stages its table describes are the ones run.sh runs.
    stages = {p.stem for p in (ROOT / "benchmarks" / "gpu" / "stages").glob("*.py")}
    described = set(re.findall(r"^\| `(\w+)` \|", text, flags=re.M))
    assert described == stages
    assert _missing(text, ROOT / "benchmarks" / "gpu") == set()

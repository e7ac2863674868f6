"""History lives in git: no issue numbers or commit hashes in the code, tests or benchmarks.

A sentence that cites an issue or a commit says when something changed, which git already
records, and leaves a reader without the tracker or the old tree nothing to follow; it should
say why instead. Only what reads as a citation counts: the word "issue" and a number, or the
word "commit" and a hex token of 7 to 40 digits. Hex constants, UUIDs and a ``--commit`` flag
(the source a vendoring script fetches, not when anything happened) are not matched. Generated
protobuf modules are skipped (their text is protoc's).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The word then a number, alone or after '#', one or several.
ISSUE = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)
# The word then a hex token of 7 to 40 digits, not as a command-line flag ("--commit SHA").
COMMIT = re.compile(r"(?<![-\w])commits?\s+[0-9a-f]{7,40}\b", re.IGNORECASE)


def _areas() -> list[str]:
    """Each package of sharedserve apart (a failure names the room to clean), its top-level
    modules together, the tests and the benchmarks."""
    packages = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "sharedserve").iterdir()
        if p.is_dir() and (p / "__init__.py").is_file()
    )
    return [*packages, "sharedserve/*.py", "tests", "benchmarks"]


def _files(area: str) -> list[Path]:
    if area.endswith("*.py"):
        found = (ROOT / area).parent.glob("*.py")
    else:
        found = (ROOT / area).rglob("*.py")
    return sorted(p for p in found if "_pb2" not in p.name)


def citations(area: str) -> list[str]:
    """``path:line: text`` of every line in ``area`` that cites an issue or a commit."""
    found = []
    for path in _files(area):
        relative = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if ISSUE.search(line) or COMMIT.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    return found


@pytest.mark.parametrize("area", _areas())
def test_no_issue_numbers_or_commit_hashes(area: str) -> None:
    cited = citations(area)
    assert not cited, "say why, not when (git keeps the history):\n" + "\n".join(cited)


# The citations the table checks are put together here, not written out, so that this file,
# which the check reads too, cites no issue or commit of its own: a made-up number and hashes.
_ISSUE, _COMMIT, _NUMBER, _SHORT, _FULL = "issue", "commit", "7", "f" * 7, "f" * 40


@pytest.mark.parametrize(
    ("text", "cites"),
    [
        (f"the fuzz corpus of {_ISSUE} {_NUMBER}", True),
        (f"({_ISSUE.title()} #{_NUMBER}, item 2)", True),
        (f"{_ISSUE}s {_NUMBER}-8", True),
        (f"a verify run before {_COMMIT} {_SHORT} measured", True),
        (f"as of {_COMMIT.title()} {_FULL}", True),
        (f"--{_COMMIT} {_FULL} --root CLONE", False),
        ("the commit the ref points at", False),
        ("GPU-8f1c2d3e-0000-4000-8000-000000000000", False),
        ("max_batch_size { value: 1000000 }", False),
        ("a client may issue requests", False),
    ],
)
def test_only_citations_are_matched(text: str, cites: bool) -> None:
    assert bool(ISSUE.search(text) or COMMIT.search(text)) == cites

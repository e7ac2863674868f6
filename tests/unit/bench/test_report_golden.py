"""Bench reports rendered now against the ones committed in ``tests/data/report/*/expected/``,
which the code drew before the report modules shared one row label (``bench.mix.row_label``):
a change that alters what a report says fails here and says so. A density sweep with GPU
figures and a mix of models; the inputs are report.json files as bench writes them.

Where a change is meant to alter reports, regenerate from the checkout and read the diff::

    python -c "import json, pathlib; from sharedserve.bench.report import write_report; \
[write_report(d / 'expected', json.loads((d / 'report.json').read_text())) \
for d in pathlib.Path('tests/data/report').iterdir()]"

and keep only the files this test compares.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharedserve.bench.report import write_report

DATA = Path(__file__).resolve().parents[2] / "data" / "report"
CASES = sorted(d.name for d in DATA.iterdir() if d.is_dir())


@pytest.mark.parametrize("case", CASES)
def test_the_report_is_the_committed_one(case: str, tmp_path: Path) -> None:
    written = write_report(tmp_path, json.loads((DATA / case / "report.json").read_text()))
    expected = sorted((DATA / case / "expected").iterdir())
    assert expected, f"nothing committed to compare {case} with"
    for path in expected:
        assert tmp_path / path.name in written
        assert (tmp_path / path.name).read_text() == path.read_text(), (
            f"{case}/{path.name} differs from the committed one: regenerate it (this module's "
            "docstring) only if the change is meant to alter reports"
        )


def test_both_kinds_of_report_are_compared() -> None:
    assert CASES == ["mix-gpu", "sweep-gpu"]

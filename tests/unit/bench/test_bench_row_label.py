"""One name for a bench row, in every view: the terminal, report.md, report.html and the verdict."""

from __future__ import annotations

from typing import Any

import pytest

from sharedserve.bench.mix import row_label

ROW = {"density": 6, "scale": 2, "pattern": "parallel"}


@pytest.mark.parametrize(
    ("row", "options", "expected"),
    [
        (ROW, {"mix": False}, "density 6"),
        (ROW, {"mix": False, "pattern": True}, "density 6 (parallel)"),
        (ROW, {"mix": True}, "scale 2"),
        (ROW, {"mix": True, "replicas": True}, "scale 2 (6 replicas)"),
        (ROW, {"mix": True, "replicas": True, "pattern": True}, "scale 2 (6 replicas) (parallel)"),
        (ROW, {"mix": False, "replicas": True}, "density 6"),  # one model: its replicas say it
        # A row from before scales were recorded reads its density as its scale.
        ({"density": 4, "pattern": "sequential"}, {"mix": True}, "scale 4"),
    ],
)
def test_a_row_is_named_by_what_its_report_varies(
    row: dict[str, Any], options: dict[str, bool], expected: str
) -> None:
    assert row_label(row, **options) == expected

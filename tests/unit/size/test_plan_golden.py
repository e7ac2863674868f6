"""A plan made now against the one committed in ``tests/data/plan/expected/``: a change that
alters what ``size`` plans (placement, sizing, the files' formats) fails here and says so.

The fleet's profiles are bench reports as a GPU gives them (NVML memory, utilisation), so the
plan needs no model files. Where a change is meant to alter plans, regenerate from the checkout
and read the diff before committing it::

    sharedserve size --fleet tests/data/plan/fleet.yaml --out tests/data/plan/expected
    rm tests/data/plan/expected/plan.html
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from sharedserve.documents import dump
from sharedserve.size.plan import read_plan
from sharedserve.size.run import plan_fleet

ROOT = Path(__file__).resolve().parents[3]
DATA = Path("tests/data/plan")
# Not plan.html: its styles are report.html's.
FILES = ("plan.json", "plan.md", "k8s.yaml", "values.yaml")


@pytest.fixture
def plan_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # From the checkout, as the regeneration command runs: the plan names its files as given.
    monkeypatch.chdir(ROOT)
    plan_fleet(DATA / "fleet.yaml", tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", FILES)
def test_the_plan_is_the_committed_one(plan_dir: Path, name: str) -> None:
    expected = (ROOT / DATA / "expected" / name).read_text()
    assert (plan_dir / name).read_text() == expected, (
        f"{name} differs from tests/data/plan/expected/{name}: regenerate it (this module's "
        "docstring) only if the change is meant to alter plans"
    )


def test_the_plan_reads_back_as_written_and_meets_its_schema(plan_dir: Path) -> None:
    written = json.loads((plan_dir / "plan.json").read_text())
    plan = read_plan(plan_dir / "plan.json")
    assert dump(plan) == written
    assert [g.index for g in plan.gpus] == list(range(plan.gpu_count))
    schema = json.loads((ROOT / "docs" / "schemas" / "plan.schema.json").read_text())
    jsonschema.validate(written, schema)

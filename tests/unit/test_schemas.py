"""The published JSON Schemas (``sharedserve schema``, ``docs/schemas/``): the committed files are
what the command prints, the shipped examples meet them, and a broken file is refused by the
schema and by sharedserve's own reader, which names the key at fault."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from sharedserve.cli import app
from sharedserve.documents import parse
from sharedserve.errors import ConfigError
from sharedserve.pack.spec import load_spec, parse_spec
from sharedserve.size.fleet import load_fleet, parse_fleet
from sharedserve.size.plan import Plan, read_plan

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("fleet", "pack", "plan")


def schema(kind: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (ROOT / "docs" / "schemas" / f"{kind}.schema.json").read_text()
    )
    return loaded


@pytest.mark.parametrize("kind", KINDS)
def test_the_committed_schema_is_what_the_command_prints(kind: str) -> None:
    result = CliRunner().invoke(app, ["schema", kind])
    assert result.exit_code == 0, result.output
    committed = (ROOT / "docs" / "schemas" / f"{kind}.schema.json").read_text()
    assert result.output == committed, (
        f"docs/schemas/{kind}.schema.json is stale: sharedserve schema {kind} > "
        f"docs/schemas/{kind}.schema.json"
    )
    jsonschema.Draft202012Validator.check_schema(json.loads(committed))


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("fleet", "examples/fleet.yaml"),
        ("fleet", "examples/fleet-500/fleet.yaml"),
        ("pack", "examples/mix.yaml"),
        ("plan", "tests/data/plan/expected/plan.json"),
    ],
)
def test_the_shipped_files_meet_their_schema_and_their_reader(kind: str, path: str) -> None:
    data = yaml.safe_load((ROOT / path).read_text())
    jsonschema.validate(data, schema(kind))
    read: Callable[[Path], Any] = {"fleet": load_fleet, "pack": load_spec, "plan": read_plan}[kind]
    assert read(ROOT / path) is not None


FLEET = {
    "gpu": {"name": "T4", "memory_mib": 15360, "price_per_hour": 0.35},
    "node": {"gpus": 4, "cpu_cores": 32},
    "models": [{"name": "fraud", "profile": "p.json", "peak_qps": 10, "slo_p99_ms": 50}],
}
PACK = {
    "cpu_limit": 1,
    "models": [{"model": "models/tiny"}, {"model": "models/big", "replicas": 2}],
}
PLAN = json.loads((ROOT / "tests/data/plan/expected/plan.json").read_text())


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    *parents, last = path.split(".")

    def change(data: dict[str, Any]) -> None:
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return change


_DELETE = object()


def _parse(kind: str, data: Any) -> Any:
    if kind == "fleet":
        return parse_fleet(data, base_dir=Path("."))
    if kind == "pack":
        return parse_spec(data, base_dir=Path("."))
    return parse(Plan, data, where="plan.json")


@pytest.mark.parametrize(
    ("kind", "base", "change", "message"),
    [
        # A wrong type
        ("fleet", FLEET, _set("models.0.peak_qps", "fast"),
         "models[0] (fraud): peak_qps must be a positive number, got 'fast'"),
        ("pack", PACK, _set("models.1.replicas", "two"),
         "models[1]: replicas must be a positive whole number, got 'two'"),
        ("plan", PLAN, _set("gpus.0.replicas.0.busy_share", "high"),
         "gpus[0]: replicas[0]: busy_share: Input should be a valid number"),
        # An unknown key
        ("fleet", FLEET, _set("node.gpu", 4), "node: unknown key 'gpu'; did you mean 'gpus'?"),
        ("pack", PACK, _set("models.0.gpu_mem", 1),
         "models[0]: unknown key 'gpu_mem'; did you mean 'gpu_memory_mib'?"),
        ("plan", PLAN, _set("models.0.qps", 1), "models[0] (tiny): unknown key 'qps'"),
        # A required key missing
        ("fleet", FLEET, _set("gpu.memory_mib", _DELETE),
         "gpu: memory_mib must be a positive whole number (required)"),
        ("pack", PACK, _set("models", _DELETE),
         "give 'models' (a list of entries), 'servers' (server groups) or both"),
        ("plan", PLAN, _set("gpu_count", _DELETE), "plan.json: gpu_count is required"),
    ],
)  # fmt: skip
def test_a_broken_file_is_refused_by_its_schema_and_its_reader_names_the_key(
    kind: str, base: dict[str, Any], change: Callable[[dict[str, Any]], None], message: str
) -> None:
    data = copy.deepcopy(base)
    jsonschema.validate(data, schema(kind))  # the unbroken file passes
    change(data)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema(kind))
    with pytest.raises(ConfigError) as refused:
        _parse(kind, data)
    assert message in refused.value.message

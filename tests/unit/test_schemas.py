"""The published JSON Schemas (``sharedserve schema``, ``docs/schemas/``): the committed files are
what the command prints, the shipped examples meet them, and a broken file is refused by the
schema and by sharedserve's own reader, which names the key at fault."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from sharedserve.bench.row import read_report
from sharedserve.cli import app
from sharedserve.documents import parse
from sharedserve.errors import ConfigError
from sharedserve.gpu.fake import parse_inventory
from sharedserve.pack.spec import load_spec, parse_spec
from sharedserve.size.fleet import load_fleet, parse_fleet
from sharedserve.size.plan import Plan, read_plan
from tests.support.gpus import fake_gpu_file, gpu

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("fleet", "pack", "plan", "report", "fake-gpus")


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
        ("report", "tests/data/report/sweep-gpu/report.json"),
        ("report", "tests/data/report/mix-gpu/report.json"),
        ("report", "tests/data/plan/profiles/tiny/sequential/report.json"),
        ("report", "tests/data/plan/profiles/vision/parallel/report.json"),
    ],
)
def test_the_shipped_files_meet_their_schema_and_their_reader(kind: str, path: str) -> None:
    data = yaml.safe_load((ROOT / path).read_text())
    jsonschema.validate(data, schema(kind))
    read: Callable[[Path], Any] = {
        "fleet": load_fleet,
        "pack": load_spec,
        "plan": read_plan,
        "report": read_report,
    }[kind]
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
         "give 'models' (a list of entries), 'servers' (shared servers) or both"),
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


def _docs_inventories() -> list[Any]:
    """The fake-GPU inventories the docs show: docs/fake-gpus.md's JSON blocks and README's
    inline one."""
    page = (ROOT / "docs" / "fake-gpus.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", page, flags=re.S)]
    readme = (ROOT / "README.md").read_text()
    inline = [json.loads(s) for s in re.findall(r"`(\{\"gpus\": .*?\})`", readme, flags=re.S)]
    assert blocks and inline, "the docs show no fake-GPU inventory"
    return [*blocks, *inline]


def test_the_fake_gpu_files_of_the_docs_and_tests_meet_the_schema_and_the_reader(
    tmp_path: Path,
) -> None:
    written = fake_gpu_file(tmp_path, (16384, 81559), healthy=(True, False))
    for data in [json.loads(written.read_text()), *_docs_inventories()]:
        jsonschema.validate(data, schema("fake-gpus"))
        assert parse_inventory(data)


GPU = gpu(0, 16384)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({**GPU, "memory_mib": "16G"}, "gpus[0].memory_mib: must be a whole number, got '16G'"),
        ({**GPU, "memory_mib": 1 << 80}, "gpus[0].memory_mib: must be in 1..16777216"),
        ({k: v for k, v in GPU.items() if k != "uuid"}, "gpus[0].uuid: required"),
        ({**GPU, "healthy": "yes"}, "gpus[0].healthy: must be true or false"),
        ({**GPU, "name": "x" * 97}, "gpus[0].name: at most 96 characters"),
        ({**GPU, "index": -1}, "gpus[0].index: must be in 0..1023"),
    ],
    ids=["memory-text", "memory-huge", "no-uuid", "healthy-text", "long-name", "negative-index"],
)
def test_a_broken_fake_gpu_file_is_refused_by_the_schema_and_the_reader(
    entry: dict[str, Any], message: str
) -> None:
    data = {"gpus": [entry]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema("fake-gpus"))
    with pytest.raises(ConfigError) as refused:
        parse_inventory(data)
    assert message in refused.value.message

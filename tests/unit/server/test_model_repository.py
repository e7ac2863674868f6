"""A model repository (``--model-repository DIR``): every subdirectory a model, its optional
``sharedserve.yaml`` checked key by key, and its JSON Schema published like the other files'."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from sharedserve.cli import app
from sharedserve.config import BatchingSettings
from sharedserve.enums import Framework
from sharedserve.errors import ConfigError
from sharedserve.server.repository.config_file import PolicyKind, VersionPolicy, versions_to_serve
from sharedserve.server.repository.directory import (
    MODEL_FILE,
    read_model_file,
    read_model_repository,
    read_repository_model,
)

ROOT = Path(__file__).resolve().parents[3]


def model(root: Path, name: str, *numbers: int, file: str = "saved_model.pb") -> Path:
    for n in numbers:
        (root / name / str(n)).mkdir(parents=True)
        (root / name / str(n) / file).touch()
    return root / name


def model_file(model_dir: Path, text: str) -> Path:
    path = model_dir / MODEL_FILE
    path.write_text(text)
    return path


def test_every_subdirectory_is_a_model_of_either_framework(tmp_path: Path) -> None:
    model(tmp_path, "resnet", 1, 2)
    model(tmp_path, "tiny", 3, file="model.pt")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "saved_model.pb").touch()  # no version directory: version 1
    (tmp_path / ".git").mkdir()  # hidden: passed over
    (tmp_path / "README.md").write_text("models")
    entries = read_model_repository(tmp_path)
    assert [e.name for e in entries] == ["bare", "resnet", "tiny"]
    assert all(e.framework is None and e.settings.batching is None for e in entries)
    assert all(e.version_policy == VersionPolicy() for e in entries)
    served = {e.name: versions_to_serve(e) for e in entries}
    assert [(s.version, s.framework) for s in served["resnet"]] == [(2, Framework.TENSORFLOW)]
    assert [(s.version, s.framework) for s in served["tiny"]] == [(3, Framework.TORCH)]
    assert [s.version for s in served["bare"]] == [1]


def test_the_model_file_sets_batching_versions_and_labels(tmp_path: Path) -> None:
    resnet = model(tmp_path, "resnet", 1, 2, 3)
    model_file(
        resnet,
        "batching:\n  max_batch_size: 32\n  batch_timeout_micros: 2000\n"
        "version_policy:\n  latest: {num_versions: 2}\n"
        "version_labels: {stable: 2, canary: 3}\n"
        "weight: 2.5\nmax_inflight: 16\n",
    )
    for name, policy in [
        ("all", "all: {}"),
        ("specific", "specific: {versions: [3, 1]}"),
    ]:
        model_file(model(tmp_path, name, 1, 2, 3), f"version_policy:\n  {policy}\n")
    model_file(model(tmp_path, "empty", 1), "")  # an empty model file sets nothing
    entries = {e.name: e for e in read_model_repository(tmp_path)}
    assert entries["resnet"].settings.batching == BatchingSettings(
        max_batch_size=32, batch_timeout_micros=2000
    )
    assert entries["resnet"].version_policy == VersionPolicy(PolicyKind.LATEST, num_versions=2)
    assert entries["resnet"].version_labels == (("canary", 3), ("stable", 2))
    assert [s.version for s in versions_to_serve(entries["resnet"])] == [2, 3]
    assert [s.version for s in versions_to_serve(entries["all"])] == [1, 2, 3]
    assert [s.version for s in versions_to_serve(entries["specific"])] == [1, 3]
    assert (entries["resnet"].settings.weight, entries["resnet"].settings.max_inflight) == (2.5, 16)
    assert entries["empty"].settings.batching is None
    assert (entries["empty"].settings.weight, entries["empty"].settings.max_inflight) == (
        None,
        None,
    )


def test_a_subdirectory_with_no_model_is_an_error_naming_it(tmp_path: Path) -> None:
    model(tmp_path, "good", 1)
    (tmp_path / "notes" / "1").mkdir(parents=True)  # a version directory with nothing in it
    with pytest.raises(ConfigError, match=r"model repository: 'notes' holds no model: .*notes"):
        read_model_repository(tmp_path)


def test_a_half_copied_version_is_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "half" / "1" / "variables").mkdir(parents=True)  # no saved_model.pb yet
    with pytest.raises(ConfigError, match=r"its version folders \[1\] hold no saved_model.pb"):
        read_repository_model(tmp_path, "half")


def test_a_model_copied_into_an_existing_folder_is_named_not_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # `cp -r models/tiny repository/tf-tiny` run twice: the second copy lands one level down.
    model(tmp_path / "nested", "tiny", 1)
    with pytest.raises(ConfigError) as raised:
        read_repository_model(tmp_path, "nested")
    assert raised.value.message == (
        "model repository: 'nested' holds no version folder (1/, 2/, ...) of its own but a "
        "model one folder down, nested/tiny/ (a copy made into a folder that already "
        f"existed?): move the version folders of {tmp_path / 'nested' / 'tiny'} up into "
        f"{tmp_path / 'nested'}"
    )
    model(tmp_path, "twice", 1)
    model(tmp_path / "twice", "tiny", 1)
    with caplog.at_level("WARNING", logger="sharedserve.server.repository.directory"):
        entry = read_repository_model(tmp_path, "twice")
    assert entry is not None and [s.version for s in versions_to_serve(entry)] == [1]
    assert caplog.messages == [
        "model repository: 'twice' also holds a model one folder down, twice/tiny/ (versions "
        "[1]), which is not served: a copy made into a folder that already existed?"
    ]


def test_a_model_is_not_taken_for_a_repository(tmp_path: Path) -> None:
    base = model(tmp_path, "resnet", 1)
    with pytest.raises(ConfigError, match=r"resnet is one model .*not a model repository"):
        read_model_repository(base)
    with pytest.raises(ConfigError, match=r"model repository .*absent does not exist"):
        read_model_repository(tmp_path / "absent")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "paged: true\n",
            r": unknown key 'paged'; known keys: batching, version_policy, version_labels, "
            r"weight, max_inflight, gpu_memory_mib, pinned",
        ),
        ("gpu_memory_mib: 0\n", r"gpu_memory_mib must be a positive whole number, got 0"),
        ("max_inflight: 0\n", r"max_inflight must be a positive whole number, got 0"),
        ("max_inflight: 2.5\n", r"max_inflight must be a positive whole number, got 2.5"),
        ("weight: 0\n", r"weight must be a positive number, got 0"),
        ("weight: fast\n", r"weight must be a positive number, got 'fast'"),
        ("batchng: {}\n", r"unknown key 'batchng'; did you mean 'batching'\?"),
        (
            "batching: {max_batch_size: 0}\n",
            r"batching: max_batch_size must be a positive "
            r"whole number, got 0",
        ),
        (
            "batching: {max_batch_size: '8'}\n",
            r"max_batch_size must be a positive whole number, "
            r"got '8'",
        ),
        (
            "batching: {batch_timeout_micros: -1}\n",
            r"batch_timeout_micros must be a whole "
            r"number >= 0",
        ),
        (
            "batching: {max_batch_size: 8, allowed_batch_sizes: [8]}\n",
            r"batching: unknown key "
            r"'allowed_batch_sizes'",
        ),
        (
            "version_policy: {latest: {num_versions: 1}, all: {}}\n",
            r"version_policy: give "
            r"exactly one of latest, all, specific, got latest, all",
        ),
        ("version_policy: {}\n", r"give exactly one of latest, all, specific, got none"),
        ("version_policy: {specific: {versions: []}}\n", r"versions must be a non-empty list"),
        ("version_policy: {newest: {}}\n", r"unknown key 'newest'"),
        (
            "version_policy: {specific: {versions: [1]}}\nversion_labels: {canary: 2}\n",
            r"label 'canary' names version 2, which its version policy does not serve",
        ),
        ("version_labels: {1: 2}\n", r"version_labels must be a mapping of label to version"),
        ("version_labels: {a: -1}\n", r"version_labels must be .* got \{'a': -1\}"),
        (
            "version_policy: {specific: {versions: [-1]}}\n",
            r"version_policy: specific: "
            r"versions must be a non-empty list of version numbers >= 0, got \[-1\]",
        ),
        (
            "version_policy: {latest: {num_versions: 0}}\n",
            r"version_policy: latest: "
            r"num_versions must be a positive whole number, got 0",
        ),
        ("version_labels: [stable]\n", r"version_labels must be a mapping of label to version"),
        ("- batching\n", r"expected a mapping"),
        ("batching: {max_batch_size: 8\n", r"is not valid YAML"),
    ],
)
def test_a_model_file_that_cannot_work_names_the_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = model_file(model(tmp_path, "m", 1), text)
    with pytest.raises(ConfigError, match=rf"{path}.*{message}"):
        read_model_repository(tmp_path)


def test_a_label_for_a_version_not_on_disk_is_refused_when_resolved(tmp_path: Path) -> None:
    model_file(model(tmp_path, "m", 1, 2), "version_labels: {old: 1}\n")
    (entry,) = read_model_repository(tmp_path)
    with pytest.raises(ConfigError, match=r"label 'old' names version 1, which is not served"):
        versions_to_serve(entry)


def test_the_committed_schema_is_what_the_command_prints_and_files_meet_it(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(app, ["schema", "model"])
    assert result.exit_code == 0, result.output
    committed = (ROOT / "docs" / "schemas" / "model.schema.json").read_text()
    assert result.output == committed, (
        "docs/schemas/model.schema.json is stale: sharedserve schema model > "
        "docs/schemas/model.schema.json"
    )
    schema = json.loads(committed)
    jsonschema.Draft202012Validator.check_schema(schema)
    good = "batching: {max_batch_size: 8}\nversion_policy: {all: {}}\nversion_labels: {a: 1}\n"
    jsonschema.validate(yaml.safe_load(good), schema)
    read_model_file(model_file(model(tmp_path, "m", 1), good))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"gpu_memory_mib": 0}, schema)

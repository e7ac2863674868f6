"""Pack spec files: defaults, paths relative to the file, and errors naming entry and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedserve.config import CapSource, GpuCapRequest
from sharedserve.errors import ConfigError
from sharedserve.pack.spec import load_spec, parse_spec


def test_top_level_keys_are_defaults_and_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    spec = tmp_path / "specs" / "pack.yaml"
    spec.parent.mkdir()
    spec.write_text(
        "replicas: 2\ncpu_limit: 0.5\nmodels:\n"
        "  - model: ../models/resnet\n    replicas: 3\n    gpu_memory_mib: 6000\n"
        "    serve_args: [--enable-batching, --max-batch-size, 8]\n"
        "    slo_p99_ms: 50\n    weight: 3\n    gpu: 1\n"
        "  - model: /abs/tiny\n    name: tiny-a\n    gpu_memory_fraction: 0.25\n"
    )
    first, second = load_spec(spec).entries
    assert first.model_dir == spec.parent / "../models/resnet"
    assert (first.replicas, first.cpu_limit_cores, first.gpu) == (3, 0.5, "1")
    assert first.cap == GpuCapRequest.of(CapSource.FLAG, mib=6000)
    assert first.server_args == ("--enable-batching", "--max-batch-size", "8")
    assert (first.slo_p99_ms, first.weight, first.name) == (50.0, 3.0, None)
    assert second.model_dir == Path("/abs/tiny")
    assert (second.replicas, second.name, second.weight, second.slo_p99_ms) == (
        2,
        "tiny-a",
        1.0,
        None,
    )
    assert second.cap == GpuCapRequest.of(CapSource.FLAG, fraction=0.25)


def test_json_is_accepted_and_its_errors_say_json(tmp_path: Path) -> None:
    spec = tmp_path / "pack.json"
    spec.write_text('{"models": [{"model": "tiny", "replicas": 2}]}')
    (entry,) = load_spec(spec).entries
    assert (entry.model_dir, entry.replicas, entry.cap.source) == (
        tmp_path / "tiny",
        2,
        CapSource.NONE,
    )
    spec.write_text('{"models": [}')
    with pytest.raises(ConfigError, match="is not valid JSON"):
        load_spec(spec)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected a mapping"),
        ({"models": []}, "non-empty list"),
        ({"modles": []}, "unknown key 'modles'; did you mean 'models'"),
        (
            {"models": [{"model": "m", "replica": 2}]},
            r"models\[0\]: unknown key 'replica'; did you mean 'replicas'",
        ),
        ({"models": [{"model": "m", "zzz": 2}]}, "known keys: model, name"),
        ({"name": "n", "models": [{"model": "a"}, {"model": "b"}]}, "not at the top"),
        ({"models": [{"model": "m", "serve_args": ["--x", True]}]}, "list of strings"),
        ({"models": [{"replicas": 2}]}, r"models\[0\]: 'model' .* is required"),
        (
            {"models": [{"model": "m", "name": "a", "replicas": 0}]},
            r"models\[0\] \(a\): replicas must be a positive whole",
        ),
        ({"models": [{"model": "m", "replicas": 1.5}]}, "replicas must be a positive whole"),
        ({"models": [{"model": "m", "replicas": True}]}, "replicas must be a positive whole"),
        (
            {"models": [{"model": "m", "gpu_memory_fraction": 1.5}]},
            r"gpu_memory_fraction must be in \(0, 1\]",
        ),
        (
            {"models": [{"model": "m", "gpu_memory_mib": "lots"}]},
            "gpu_memory_mib must be a whole number",
        ),
        ({"models": [{"model": "m", "gpu_memory_mib": 1, "gpu_memory_fraction": 0.1}]}, "not both"),
        (
            {"models": [{"model": "m", "serve_args": "--enable-batching"}]},
            "serve_args must be a list",
        ),
        ({"models": [{"model": "m", "weight": -1}]}, "weight must be a positive number"),
        (
            {"models": [{"model": "m", "slo_p99_ms": "fast"}]},
            "slo_p99_ms must be a positive number",
        ),
        ({"models": [{"model": "m", "gpu": [0]}]}, "gpu must be an index or a UUID"),
        ({"models": ["m"]}, r"models\[0\] must be a mapping"),
        (
            {"models": [{"model": "m", "name": "a"}, {"model": "n", "name": "a"}]},
            "unique; repeated: a",
        ),
    ],
)
def test_refusals_name_the_entry_and_key(data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_spec(data, base_dir=Path("."))


def test_unreadable_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read pack spec"):
        load_spec(tmp_path / "nope.yaml")
    bad = tmp_path / "pack.yaml"
    bad.write_text("models: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_spec(bad)


def test_the_example_mix_loads_and_points_at_the_readmes_models() -> None:
    root = Path(__file__).resolve().parents[3]
    spec = load_spec(root / "examples" / "mix.yaml")
    models = {e.model_dir.resolve(): e for e in spec.entries}
    assert set(models) == {
        root / "models" / "tiny",
        root / "models" / "mobilenet_v2",
        root / "torch-models" / "resnet50",
    }
    assert [e.replicas for e in spec.entries] == [4, 2, 1]
    assert all(e.cpu_limit_cores == 1.0 and e.slo_p99_ms for e in spec.entries)
    assert spec.entries[2].server_args[:1] == ("--enable-batching",)


def test_each_entry_knows_its_place_in_the_file_for_the_errors_found_later(
    tmp_path: Path,
) -> None:
    # A model path is checked when the pack is prepared, not here (k8s render --spec reads
    # specs whose models are elsewhere): the entry must still be named then.
    spec = tmp_path / "pack.yaml"
    spec.write_text(
        "servers:\n  - name: shared\n    models: [{model: a}, {model: b, name: bee}]\n"
        "models:\n  - {model: c}\n  - {model: d, name: dee}\n"
    )
    shared, c, d = load_spec(spec).entries
    assert [m.origin for m in shared.models] == [
        f"{spec}: servers[0] (shared): models[0]",
        f"{spec}: servers[0] (shared): models[1] (bee)",
    ]
    assert (shared.origin, c.origin, d.origin) == (
        f"{spec}: servers[0] (shared)",
        f"{spec}: models[0]",
        f"{spec}: models[1] (dee)",
    )
    # Where an entry was written is not what it is: equal entries from two places are equal.
    assert parse_spec({"models": [{"model": "c"}]}, base_dir=tmp_path).entries == (c,)

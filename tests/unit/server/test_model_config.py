"""TF Serving's model config file (``--model-config-file``): TF Serving's own documented examples
read as they are, every version policy, labels, and each refusal naming the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedserve.enums import Framework
from sharedserve.errors import ConfigError
from sharedserve.server.repository.config_file import (
    MAX_CONFIG_BYTES,
    ModelEntry,
    PolicyKind,
    VersionPolicy,
    parse_model_config,
    read_model_config_file,
    versions_to_serve,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "tfserving_config"


def config(*models: str) -> str:
    return "model_config_list {\n" + "".join(f"  config {{ {m} }}\n" for m in models) + "}\n"


def one(body: str) -> ModelEntry:
    (entry,) = parse_model_config(config(body), "models.config")
    return entry


def versions(base: Path, *numbers: int, file: str = "saved_model.pb") -> Path:
    for n in numbers:
        (base / str(n)).mkdir(parents=True)
        (base / str(n) / file).touch()
    return base


def test_tf_servings_documented_example_is_read_as_it_is() -> None:
    entries = read_model_config_file(DATA / "serving_config_example.config")
    assert entries == [
        ModelEntry("my_first_model", Path("/tmp/my_first_model"), Framework.TENSORFLOW),
        ModelEntry("my_second_model", Path("/tmp/my_second_model"), Framework.TENSORFLOW),
    ]
    assert entries[0].version_policy == VersionPolicy(PolicyKind.LATEST, num_versions=1)


def test_tf_servings_documented_labels_are_read_as_they_are() -> None:
    (entry,) = read_model_config_file(DATA / "serving_config_labels.config")
    assert entry.version_policy == VersionPolicy(PolicyKind.SPECIFIC, versions=(42, 43))
    assert entry.version_labels == (("canary", 43), ("stable", 42))
    assert entry.version_of("stable") == 42
    assert entry.version_of("beta") is None


@pytest.mark.parametrize(
    ("policy", "served"),
    [
        ("", [3]),
        ("model_version_policy {}", [3]),
        ("model_version_policy { latest {} }", [3]),  # num_versions 0 is 1, as upstream
        ("model_version_policy { latest { num_versions: 2 } }", [2, 3]),
        ("model_version_policy { latest { num_versions: 9 } }", [1, 2, 3]),
        ("model_version_policy { all {} }", [1, 2, 3]),
        ("model_version_policy { specific { versions: 1 versions: 3 } }", [1, 3]),
    ],
)
def test_each_version_policy_picks_its_versions_on_disk(
    tmp_path: Path, policy: str, served: list[int]
) -> None:
    base = versions(tmp_path / "m", 1, 2, 3)
    (tmp_path / "m" / "not-a-version").mkdir()
    (tmp_path / "m" / "7").mkdir()  # a version directory with no model in it
    entry = one(f"name: 'm' base_path: '{base}' {policy}")
    sources = versions_to_serve(entry)
    assert [s.version for s in sources] == served
    assert all(s.framework is Framework.TENSORFLOW and s.name == "m" for s in sources)
    assert sources[0].path == base.resolve() / str(served[0])


def test_a_torchscript_model_is_named_pytorch_and_found_by_its_files(tmp_path: Path) -> None:
    base = versions(tmp_path / "t", 5, file="model.pt")
    for platform in ("pytorch", "torch", "pytorch_libtorch"):
        entry = one(f"name: 't' base_path: '{base}' model_platform: '{platform}'")
        assert entry.framework is Framework.TORCH
        assert [s.framework for s in versions_to_serve(entry)] == [Framework.TORCH]
    no_platform = one(f"name: 't' base_path: '{base}'")
    assert no_platform.framework is None
    assert versions_to_serve(no_platform)[0].framework is Framework.TORCH


def test_a_platform_that_disagrees_with_the_files_names_both(tmp_path: Path) -> None:
    base = versions(tmp_path / "t", 1, file="model.pt")
    entry = one(f"name: 't' base_path: '{base}' model_platform: 'tensorflow'")
    with pytest.raises(ConfigError, match=r"'t'.*TensorFlow SavedModel.*holds a TorchScript"):
        versions_to_serve(entry)


def test_a_bare_model_directory_is_version_1_as_for_model(tmp_path: Path) -> None:
    (tmp_path / "saved_model.pb").touch()
    assert [s.version for s in versions_to_serve(one(f"name: 'b' base_path: '{tmp_path}'"))] == [1]


def test_the_deprecated_model_type_tensorflow_still_reads() -> None:
    assert one("name: 'm' base_path: '/m' model_type: TENSORFLOW").framework is Framework.TENSORFLOW


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "name: 'm' base_path: 'models/m'",
            r"model 'm': base_path 'models/m' is relative; it "
            r"must be absolute, as TF Serving",
        ),
        ("name: 'm' base_path: 'gs://bucket/m'", r"is a URI; sharedserve reads local"),
        ("name: 'm'", r"model 'm' has no base_path"),
        ("name: 'a/b' base_path: '/m'", r"model name 'a/b' cannot be used in a URL path"),
        ("base_path: '/m'", r"model name '' cannot"),
        (
            "name: 'm' base_path: '/m' model_platform: 'tensorrt_plan'",
            r"model_platform 'tensorrt_plan' is not.*"
            r"tensorflow, pytorch, torch, pytorch_libtorch, onnx, onnxruntime_onnx, "
            r"pytorch_export, torch_export",
        ),
        (
            "name: 'm' base_path: '/m' model_platform: 'tensorflow' model_type: TENSORFLOW",
            r"both model_type \(deprecated\) and model_platform",
        ),
        ("name: 'm' base_path: '/m' model_type: OTHER", r"model_type OTHER is not supported"),
        (
            "name: 'm' base_path: '/m' logging_config { sampling_config { sampling_rate: 1 } }",
            r"logging_config \(request logging\) is not supported",
        ),
        (
            "name: 'm' base_path: '/m' model_version_policy { specific {} }",
            r"specific version policy needs one or more version numbers",
        ),
        (
            "name: 'm' base_path: '/m' model_version_policy { specific { versions: 1 } } "
            "version_labels { key: 'canary' value: 2 }",
            r"label 'canary' names version 2, which its version policy does not serve",
        ),
    ],
)
def test_an_entry_that_cannot_work_is_refused_naming_file_line_and_model(
    body: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=r"^models\.config:2: .*" + message):
        parse_model_config(config(body), "models.config")


def test_the_line_named_is_the_models_own() -> None:
    text = (
        "# config { name: 'b' } in a comment is no model\n"
        "model_config_list {\n"
        "  config: < name: 'a' base_path: '/a' >\n"
        "  config {\n"
        "    name: 'b'  # config {\n"
        "    base_path: 'relative'\n"
        "  }\n"
        "}\n"
    )
    with pytest.raises(ConfigError, match=r"^models\.config:4: model 'b': base_path 'relative'"):
        parse_model_config(text, "models.config")


def test_a_model_listed_twice_is_refused() -> None:
    text = config("name: 'a' base_path: '/a'", "name: 'a' base_path: '/b'")
    with pytest.raises(ConfigError, match=r"models\.config:3: model 'a' is listed more than once"):
        parse_model_config(text, "models.config")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "model_config_list {\n  config {\n    nmae: 'm'\n  }\n}\n",
            r"3:5: Message type "
            r"\"ModelConfig\" has no field named \"nmae\"",
        ),
        ("model_config_list {\n  config {\n    name: 'm'\n", r'3:\d+: Expected "}"'),
        (
            "model_config_list {\n  config { name: 'm' name: 'n' }\n}\n",
            r"2:\d+: .*multiple "
            r"\"name\" fields",
        ),
        (
            "model_config_list {\n  config {\n    model_version_policy { specific { versions: "
            "'x' } }\n  }\n}\n",
            r"3:\d+: .*integer",
        ),
    ],
)
def test_a_syntax_error_names_its_line_and_column(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "models.config"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"^{path}:{where}"):
        read_model_config_file(path)


def test_custom_model_config_is_refused_as_not_supported() -> None:
    text = "custom_model_config { type_url: 'type.googleapis.com/x.Y' }"
    with pytest.raises(ConfigError, match=r"custom_model_config is not supported"):
        parse_model_config(text, "models.config")


def test_an_empty_config_names_no_models_as_in_tf_serving() -> None:
    assert parse_model_config("", "models.config") == []
    assert parse_model_config("model_config_list {}", "models.config") == []


def test_a_file_that_is_not_text_missing_or_huge_is_refused(tmp_path: Path) -> None:
    binary = tmp_path / "binary.config"
    binary.write_bytes(b"model_config_list {\n\xff\xfe }")
    with pytest.raises(ConfigError, match=r"binary\.config:2: model config file is not UTF-8"):
        read_model_config_file(binary)
    with pytest.raises(ConfigError, match=r"cannot read model config file .*absent\.config"):
        read_model_config_file(tmp_path / "absent.config")
    with pytest.raises(ConfigError, match=r"cannot read model config file"):
        read_model_config_file(tmp_path)  # a directory
    huge = tmp_path / "huge.config"
    with huge.open("wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(ConfigError, match=r"huge\.config is larger than 16 MiB"):
        read_model_config_file(huge)


def test_versions_on_disk_that_do_not_meet_the_config_are_refused(tmp_path: Path) -> None:
    base = versions(tmp_path / "m", 1, 2)
    missing = one(
        f"name: 'm' base_path: '{base}' model_version_policy {{ specific {{ "
        "versions: 2 versions: 4 } }"
    )
    with pytest.raises(
        ConfigError,
        match=r"model 'm': specific versions \[4\] are not in .*"
        r"\(versions there: \[1, 2\]\)",
    ):
        versions_to_serve(missing)
    label = one(f"name: 'm' base_path: '{base}' version_labels {{ key: 'old' value: 1 }}")
    with pytest.raises(
        ConfigError,
        match=r"label 'old' names version 1, which is not served "
        r"\(serving \[2\]",
    ):
        versions_to_serve(label)
    nothing = one(f"name: 'm' base_path: '{tmp_path / 'absent'}'")
    with pytest.raises(ConfigError, match=r"model 'm': model directory .*absent does not exist"):
        versions_to_serve(nothing)


def test_an_onnx_model_is_named_onnx_and_found_by_its_files(tmp_path: Path) -> None:
    base = versions(tmp_path / "o", 3, file="model.onnx")
    for platform in ("onnx", "onnxruntime_onnx"):
        entry = one(f"name: 'o' base_path: '{base}' model_platform: '{platform}'")
        assert entry.framework is Framework.ONNX
        assert [s.framework for s in versions_to_serve(entry)] == [Framework.ONNX]
    assert versions_to_serve(one(f"name: 'o' base_path: '{base}'"))[0].framework is Framework.ONNX
    torch_base = versions(tmp_path / "t", 1, file="model.pt")
    torchscript = one(f"name: 'o' base_path: '{torch_base}' model_platform: 'onnx'")
    with pytest.raises(ConfigError, match=r"'o'.*names ONNX but .* holds a TorchScript model"):
        versions_to_serve(torchscript)


def test_a_torch_export_model_is_named_pytorch_export_and_found_by_its_files(
    tmp_path: Path,
) -> None:
    base = versions(tmp_path / "e", 2, file="model.pt2")
    for platform in ("pytorch_export", "torch_export"):
        entry = one(f"name: 'e' base_path: '{base}' model_platform: '{platform}'")
        assert [s.framework for s in versions_to_serve(entry)] == [Framework.EXPORT]
    torch_base = versions(tmp_path / "t", 1, file="model.pt")
    torchscript = one(f"name: 'e' base_path: '{torch_base}' model_platform: 'pytorch_export'")
    with pytest.raises(ConfigError, match=r"'e'.*names torch.export but .* holds a TorchScript"):
        versions_to_serve(torchscript)

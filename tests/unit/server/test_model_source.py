"""Table-driven tests of ``find_model`` against directory trees built in tmp_path.

Each tree is a list of relative paths: a path ending in ``/`` is an empty directory, any other
path is an empty file (parents created). Only the file names matter to ``find_model``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedserve.enums import Framework
from sharedserve.errors import ConfigError
from sharedserve.server.version.source import find_model

TF = Framework.TENSORFLOW


def build(root: Path, entries: list[str]) -> None:
    for entry in entries:
        path = root / entry
        if entry.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()


@pytest.mark.parametrize(
    ("tree", "arg", "name", "expected"),
    [
        pytest.param(
            ["tiny/1/saved_model.pb"], "tiny", None, ("tiny", 1, "tiny/1"), id="one-version"
        ),
        pytest.param(
            ["tiny/1/saved_model.pb", "tiny/2/saved_model.pb", "tiny/10/saved_model.pb"],
            "tiny",
            None,
            ("tiny", 10, "tiny/10"),
            id="numeric-not-lexical",
        ),
        pytest.param(
            ["tiny/9/saved_model.pb", "tiny/10/saved_model.pb", "tiny/100/saved_model.pb"],
            "tiny",
            None,
            ("tiny", 100, "tiny/100"),
            id="numeric-not-lexical-100",
        ),
        pytest.param(
            ["tiny/1/saved_model.pb", "tiny/2/saved_model.pb", "tiny/3/"],
            "tiny",
            None,
            ("tiny", 2, "tiny/2"),
            id="empty-version-dir-ignored",
        ),
        pytest.param(
            ["tiny/1/saved_model.pb", "tiny/5/variables/variables.index"],
            "tiny",
            None,
            ("tiny", 1, "tiny/1"),
            id="version-dir-without-saved-model-ignored",
        ),
        pytest.param(
            [
                "tiny/2/saved_model.pb",
                "tiny/latest/saved_model.pb",
                "tiny/v9/saved_model.pb",
                "tiny/99.tmp/saved_model.pb",
                "tiny/assets/",
            ],
            "tiny",
            None,
            ("tiny", 2, "tiny/2"),
            id="non-numeric-dirs-ignored",
        ),
        pytest.param(
            ["tiny/3/saved_model.pb", "tiny/7"],
            "tiny",
            None,
            ("tiny", 3, "tiny/3"),
            id="numeric-file-ignored",
        ),
        pytest.param(
            ["tiny/1/saved_model.pbtxt"], "tiny", None, ("tiny", 1, "tiny/1"), id="pbtxt-version"
        ),
        pytest.param(
            ["tiny/1/saved_model.pb", "tiny/4/saved_model.pbtxt"],
            "tiny",
            None,
            ("tiny", 4, "tiny/4"),
            id="pbtxt-latest",
        ),
        pytest.param(
            ["tiny/1/saved_model.pb", "tiny/2/saved_model.pb"],
            "tiny",
            "renamed",
            ("renamed", 2, "tiny/2"),
            id="name-override-versioned",
        ),
        pytest.param(
            ["bare/saved_model.pb", "bare/variables/"],
            "bare",
            None,
            ("bare", 1, "bare"),
            id="bare-dir-version-1",
        ),
        pytest.param(
            ["bare/saved_model.pbtxt"], "bare", None, ("bare", 1, "bare"), id="bare-pbtxt"
        ),
        pytest.param(
            ["bare/saved_model.pb", "bare/7/saved_model.pb"],
            "bare",
            None,
            ("bare", 1, "bare"),
            id="bare-wins-over-version-subdirs",
        ),
        pytest.param(
            ["bare/saved_model.pb"], "bare", "other", ("other", 1, "bare"), id="name-override-bare"
        ),
        pytest.param(
            ["tiny/3/saved_model.pb"],
            "tiny/3",
            None,
            ("tiny", 3, "tiny/3"),
            id="version-named-dir",
        ),
        pytest.param(
            ["tiny/1/saved_model.pb", "tiny/3/saved_model.pb"],
            "tiny/1",
            None,
            ("tiny", 1, "tiny/1"),
            id="version-named-dir-not-latest",
        ),
        pytest.param(
            ["tiny/3/saved_model.pb"],
            "tiny/3",
            "custom",
            ("custom", 3, "tiny/3"),
            id="name-override-version-named-dir",
        ),
        pytest.param(
            ["tiny/42/saved_model.pbtxt"],
            "tiny/42",
            None,
            ("tiny", 42, "tiny/42"),
            id="version-named-dir-pbtxt",
        ),
    ],
)
def test_find_model(
    tmp_path: Path,
    tree: list[str],
    arg: str,
    name: str | None,
    expected: tuple[str, int, str],
) -> None:
    build(tmp_path, tree)
    source = find_model(tmp_path / arg, name)
    want_name, want_version, want_path = expected
    assert source.name == want_name
    assert source.version == want_version
    assert source.path == (tmp_path / want_path).resolve()
    assert source.framework is TF


def test_find_model_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build(tmp_path, ["tiny/2/saved_model.pb"])
    monkeypatch.chdir(tmp_path / "tiny")
    source = find_model(Path())
    assert (source.name, source.version) == ("tiny", 2)
    assert source.path == (tmp_path / "tiny" / "2").resolve()


@pytest.mark.parametrize(
    ("tree", "arg", "fragments"),
    [
        pytest.param([], "missing", ["does not exist"], id="missing-dir"),
        pytest.param(["model.pb"], "model.pb", ["not a directory"], id="file-not-dir"),
        pytest.param(
            ["tiny/1/saved_model.pb"],
            "tiny/1/saved_model.pb",
            ["not a directory"],
            id="saved-model-file-itself",
        ),
        pytest.param(["empty/"], "empty", ["neither a SavedModel"], id="empty-dir"),
        pytest.param(
            ["tiny/1/", "tiny/2/variables/"],
            "tiny",
            ["neither a SavedModel"],
            id="only-empty-versions",
        ),
        pytest.param(
            ["tiny/latest/saved_model.pb"],
            "tiny",
            ["neither a SavedModel"],
            id="only-non-numeric",
        ),
        pytest.param(["tiny/1/other.pb"], "tiny", ["neither a SavedModel"], id="wrong-file-name"),
    ],
)
def test_find_model_rejects(
    tmp_path: Path, tree: list[str], arg: str, fragments: list[str]
) -> None:
    build(tmp_path, tree)
    with pytest.raises(ConfigError) as info:
        find_model(tmp_path / arg)
    for fragment in fragments:
        assert fragment in info.value.message
    assert "model base paths" not in info.value.message


@pytest.mark.parametrize(
    ("tree", "nested", "suggested"),
    [
        pytest.param(["out/tiny/1/saved_model.pb"], ["tiny"], "tiny", id="one-base-path"),
        pytest.param(
            ["out/tiny/1/saved_model.pb", "out/edge/2/saved_model.pbtxt", "out/junk/"],
            ["edge", "tiny"],
            "edge",
            id="several-sorted-first-suggested",
        ),
        pytest.param(
            ["out/tiny/1/saved_model.pb", "out/bare/saved_model.pb", "out/nov/1/"],
            ["tiny"],
            "tiny",
            id="only-versioned-children-listed",
        ),
    ],
)
def test_find_model_suggests_base_path(
    tmp_path: Path, tree: list[str], nested: list[str], suggested: str
) -> None:
    build(tmp_path, tree)
    with pytest.raises(ConfigError) as info:
        find_model(tmp_path / "out")
    message = info.value.message
    assert "model base paths" in message
    assert str(nested) in message
    assert str((tmp_path / "out" / suggested).resolve()) in message


def test_model_onnx_is_an_onnx_model_and_one_framework_a_directory(tmp_path: Path) -> None:
    build(tmp_path, ["m/2/model.onnx", "m/1/saved_model.pb"])
    source = find_model(tmp_path / "m")
    assert (source.version, source.framework) == (2, Framework.ONNX)
    build(tmp_path, ["m/2/model.pt"])
    with pytest.raises(ConfigError, match=r"a TorchScript model \(model.pt\) and an ONNX model"):
        find_model(tmp_path / "m" / "2")


def test_model_pt2_is_a_torch_export_model_beside_no_other_format(tmp_path: Path) -> None:
    build(tmp_path, ["m/3/model.pt2", "m/2/model.pt"])
    source = find_model(tmp_path / "m")
    assert (source.version, source.framework) == (3, Framework.EXPORT)
    build(tmp_path, ["m/3/model.pt"])
    with pytest.raises(ConfigError, match=r"model.pt\) and a torch.export program \(model.pt2"):
        find_model(tmp_path / "m" / "3")

"""Commands agree with each other and with the docs, so what works in one place works in the
next: ``k8s render --model``
takes a path as every other ``--model`` does, the docs' inline ``k8s render`` examples run as
written, and ``models list`` says it lists what ``models build`` can make.

In process through the CLI's own main: nothing here starts a server or a framework.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.support.cli import invoke

ROOT = Path(__file__).resolve().parents[2]


def _model(root: Path, name: str) -> Path:
    """A model base path as ``models build`` lays it out (the render reads its layout only)."""
    version = root / name / "1"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    return root / name


@pytest.mark.parametrize(
    "given",
    ["models/tiny", "models/tiny/", "models/tiny/1", "elsewhere/tiny", "tiny"],
    ids=["base-path", "trailing-slash", "version-dir", "path-not-here", "bare-name"],
)
def test_k8s_render_model_takes_a_path_as_serve_does(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _model(tmp_path / "models", "tiny")
    monkeypatch.chdir(tmp_path)
    result = invoke("k8s", "render", "--model", given, "--image", "sharedserve:0.1.0")
    assert result.exit_code == 0, result.output
    _secret, deployment, service = list(yaml.safe_load_all(result.stdout))
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "tiny"
    assert "/models/tiny" in result.stdout and "models/tiny/1" not in result.stdout


def test_k8s_render_model_refuses_a_version_directory_it_cannot_read(tmp_path: Path) -> None:
    result = invoke("k8s", "render", "--model", str(tmp_path / "gone" / "3"), "--image", "i")
    assert result.exit_code == 2, result.output
    assert "pass the model's base path" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _inline_render_examples(text: str) -> list[str]:
    """The `sharedserve k8s render --model ...` spans of prose (not fenced blocks): examples a
    reader copies as they are."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    spans = (" ".join(m.split()) for m in re.findall(r"`([^`]+)`", prose))
    return [s for s in spans if re.match(r"(sharedserve )?k8s render .*--model ", s)]


@pytest.mark.parametrize("doc", ["README.md", "docs/kubernetes.md"])
def test_the_docs_inline_k8s_render_examples_run_as_written(
    doc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    examples = _inline_render_examples((ROOT / doc).read_text())
    assert examples, f"{doc} names no `k8s render --model` example"
    _model(tmp_path / "models", "tiny")
    monkeypatch.chdir(tmp_path)
    for example in examples:
        words = shlex.split(example)
        if words[0] == "sharedserve":
            words = words[1:]
        assert words[:2] == ["k8s", "render"]
        result = invoke(*words)
        assert result.exit_code == 0, f"`{example}` in {doc}: {result.output}"


def test_models_list_says_it_is_the_catalogue_of_buildable_examples() -> None:
    result = invoke("models", "list")
    assert result.exit_code == 0, result.output
    heading, *rows = result.stdout.splitlines()
    assert heading.startswith("Example models `models build` can make")
    assert [row.split()[0] for row in rows] == ["tiny", "mobilenet_v2", "resnet50", "inception_v3"]
    assert "not the models you built" in " ".join(invoke("models", "list", "--help").stdout.split())

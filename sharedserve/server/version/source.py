"""Find the model to serve in a directory, the way TF Serving reads a model base path.

Accepted: a versioned base path (``DIR/NAME`` with numeric version subdirectories, the latest of
which is served, like TF Serving's default version policy) or a bare model directory
(served as version 1, or as its own number when the directory is named like a version).

A model directory is a SavedModel (``saved_model.pb`` or ``.pbtxt``), TorchScript
(``model.pt``, with the ``signature.json`` sidecar the torch backend checks on load), ONNX
(``model.onnx``, Triton's name) or ``torch.export`` (``model.pt2``: a program or an AOTInductor
package, which the backend tells apart); the file names decide the framework, so one layout
serves all.
Only ``model.pt`` is looked for here: a TorchScript model whose sidecar is missing should fail to
load with an error naming the sidecar, not be passed over as "no model".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sharedserve.enums import Framework
from sharedserve.errors import ConfigError

__all__ = ["Framework", "ModelSource", "find_model", "find_version_sources", "find_versions"]

_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
_TORCHSCRIPT_FILE = "model.pt"
_ONNX_FILE = "model.onnx"
_EXPORT_FILE = "model.pt2"


@dataclass(frozen=True)
class ModelSource:
    name: str
    version: int
    path: Path
    """The directory holding this version's model files."""
    framework: Framework


def _is_version(name: str) -> bool:
    # ASCII digits only: str.isdigit() also accepts "²", which int() then rejects.
    return name.isascii() and name.isdigit()


def _framework_of(path: Path) -> Framework | None:
    found = []
    if any((path / f).is_file() for f in _SAVED_MODEL_FILES):
        found.append((Framework.TENSORFLOW, "a SavedModel (saved_model.pb)"))
    if (path / _TORCHSCRIPT_FILE).is_file():
        found.append((Framework.TORCH, f"a TorchScript model ({_TORCHSCRIPT_FILE})"))
    if (path / _ONNX_FILE).is_file():
        found.append((Framework.ONNX, f"an ONNX model ({_ONNX_FILE})"))
    if (path / _EXPORT_FILE).is_file():
        found.append((Framework.EXPORT, f"a torch.export program ({_EXPORT_FILE})"))
    if len(found) > 1:
        raise ConfigError(
            f"{path} holds {' and '.join(what for _, what in found)}; keep one framework's "
            "files per version directory"
        )
    return found[0][0] if found else None


def find_model(model_dir: Path, name: str | None = None) -> ModelSource:
    """Resolve ``model_dir`` to one loadable model version; ConfigError says what is wrong."""
    model_dir = model_dir.expanduser()
    if not model_dir.is_dir():
        raise ConfigError(f"model directory {model_dir} does not exist or is not a directory")
    model_dir = model_dir.resolve()
    framework = _framework_of(model_dir)
    if framework is not None:
        if _is_version(model_dir.name):
            return ModelSource(
                name or model_dir.parent.name, int(model_dir.name), model_dir, framework
            )
        return ModelSource(name or model_dir.name, 1, model_dir, framework)
    versions = sorted(
        (int(p.name), p, fw)
        for p in model_dir.iterdir()
        if p.is_dir() and _is_version(p.name) and (fw := _framework_of(p)) is not None
    )
    if versions:
        version, path, framework = versions[-1]
        return ModelSource(name or model_dir.name, version, path, framework)
    hint = ""
    children = sorted(p.name for p in model_dir.iterdir() if p.is_dir())
    nested = [c for c in children if find_versions(model_dir / c)]
    numbered = sorted(int(c) for c in children if _is_version(c))
    if nested:
        hint = (
            f"; it holds model base paths {nested}: pass one of them, e.g. {model_dir / nested[0]}"
        )
    elif numbered:
        hint = (
            f"; its version folders {numbered} hold no {_SAVED_MODEL_FILES[0]}, "
            f"{_TORCHSCRIPT_FILE}, {_ONNX_FILE} or {_EXPORT_FILE}: copied in part, or still "
            "being copied?"
        )
    raise ConfigError(
        f"{model_dir} is neither a SavedModel, TorchScript, ONNX or torch.export directory "
        f"(saved_model.pb, {_TORCHSCRIPT_FILE}, {_ONNX_FILE}, {_EXPORT_FILE}) nor a model base "
        f"path with numeric version subdirectories{hint}"
    )


def find_versions(base: Path) -> list[int]:
    """Numeric version subdirectories of ``base`` that hold a model."""
    if not base.is_dir():
        return []
    return sorted(
        int(p.name)
        for p in base.iterdir()
        if p.is_dir() and _is_version(p.name) and _framework_of(p) is not None
    )


def find_version_sources(base: Path, name: str) -> list[ModelSource]:
    """Every numeric version subdirectory of ``base`` that holds a model, oldest first, with its
    framework (a version policy then picks among them); [] when there is none."""
    if not base.is_dir():
        return []
    base = base.resolve()
    return sorted(
        (
            ModelSource(name, int(p.name), p, fw)
            for p in base.iterdir()
            if p.is_dir() and _is_version(p.name) and (fw := _framework_of(p)) is not None
        ),
        key=lambda source: source.version,
    )

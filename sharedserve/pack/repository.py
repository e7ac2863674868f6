"""A shared server's model repository: the directory its ``serve --model-repository`` reads.

Each model of the shared server is ``DIR/NAME/``, a real directory whose entries link to the
model's own files (its version subdirectories, or a bare model's files), beside a
``sharedserve.yaml`` written from the shared server's settings of the model: the model's
directory is the user's and is never written to. A ``sharedserve.yaml`` the model already has is
read and kept, the shared server's keys (``weight``, ``max_inflight``, ``gpu_memory_mib``,
``pinned``) written over it. Links, not copies: a shared server of large models is written in
milliseconds and takes no disk.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from sharedserve.config import SharedServerModel
from sharedserve.documents import dump
from sharedserve.errors import ConfigError
from sharedserve.server import MODEL_FILE, ModelFile, ModelSettings, read_model_file

__all__ = ["merged_model_file", "model_file", "remove_repository", "write_repository"]


def _settings(model: SharedServerModel) -> dict[str, Any]:
    """What the shared server sets of the model's settings: its weight, and the others where
    given."""
    given: dict[str, Any] = {"weight": model.weight}
    if model.pinned:
        given["pinned"] = True
    if model.max_inflight is not None:
        given["max_inflight"] = model.max_inflight
    if model.gpu_memory_mib is not None:
        given["gpu_memory_mib"] = model.gpu_memory_mib
    return given


def _keys(file: ModelFile) -> dict[str, Any]:
    """A model file as its YAML says it: the keys set, ``pinned`` only when true."""
    keys = dump(file, drop_none=True)
    if not keys.get("pinned"):
        keys.pop("pinned", None)
    return dict(keys)


def model_file(model: SharedServerModel) -> dict[str, Any]:
    """The keys of the model's ``sharedserve.yaml`` the shared server sets (none left
    unset)."""
    return _keys(ModelFile.of(ModelSettings(**_settings(model))))


def merged_model_file(model: SharedServerModel) -> dict[str, Any]:
    """The model's ``sharedserve.yaml`` in a shared server: its own file's settings (read and
    checked as the server reads it), the shared server's over them."""
    path = model.model_dir.expanduser().resolve() / MODEL_FILE
    own = read_model_file(path) if path.is_file() else ModelFile()
    return _keys(dataclasses.replace(own, **_settings(model)))


def write_repository(root: Path, models: Sequence[tuple[str, SharedServerModel]]) -> Path:
    """Write the repository of ``models`` (name, model) in ``root`` (made when missing)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        for name, model in models:
            source = model.model_dir.expanduser().resolve()
            target = root / name
            target.mkdir()
            for child in sorted(source.iterdir()):
                if child.name != MODEL_FILE:
                    (target / child.name).symlink_to(child)
            settings = merged_model_file(model)
            (target / MODEL_FILE).write_text(yaml.safe_dump(settings, sort_keys=False))
    except OSError as e:
        remove_repository(root)
        raise ConfigError(f"cannot write the shared server's model repository {root}: {e}") from e
    return root


def remove_repository(root: Path) -> None:
    """Remove a repository this run wrote (its links only, never the models they point at)."""
    shutil.rmtree(root, ignore_errors=True)

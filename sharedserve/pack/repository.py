"""A server group's model repository: the directory its ``serve --model-repository`` reads.

Each model of the group is ``DIR/NAME/``, a real directory whose entries link to the model's
own files (its version subdirectories, or a bare model's files), beside a ``sharedserve.yaml``
written from the group's settings of the model: the model's directory is the user's and is never
written to. A ``sharedserve.yaml`` the model already has is read and kept, the group's keys
(``weight``, ``max_inflight``, ``gpu_memory_mib``, ``pinned``) written over it. Links, not
copies: a group of large models is written in milliseconds and takes no disk.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from sharedserve.config import GroupModel
from sharedserve.errors import ConfigError
from sharedserve.server import MODEL_FILE

__all__ = ["merged_model_file", "model_file", "remove_repository", "write_repository"]


def model_file(model: GroupModel) -> dict[str, Any]:
    """The keys of the model's ``sharedserve.yaml`` the group sets (none left unset)."""
    keys: dict[str, Any] = {"weight": model.weight}
    if model.max_inflight is not None:
        keys["max_inflight"] = model.max_inflight
    if model.gpu_memory_mib is not None:
        keys["gpu_memory_mib"] = model.gpu_memory_mib
    if model.pinned:
        keys["pinned"] = True
    return keys


def _own_file(source: Path) -> dict[str, Any]:
    path = source / MODEL_FILE
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def merged_model_file(model: GroupModel) -> dict[str, Any]:
    """The model's ``sharedserve.yaml`` in a group: its own file's keys, the group's over them."""
    return {**_own_file(model.model_dir.expanduser().resolve()), **model_file(model)}


def write_repository(root: Path, models: Sequence[tuple[str, GroupModel]]) -> Path:
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
        raise ConfigError(f"cannot write the server group's model repository {root}: {e}") from e
    return root


def remove_repository(root: Path) -> None:
    """Remove a repository this run wrote (its links only, never the models they point at)."""
    shutil.rmtree(root, ignore_errors=True)

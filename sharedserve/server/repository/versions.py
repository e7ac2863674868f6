"""What a server is told to serve: each model version on disk with its model's settings and
labels, from ``--model``, a TF Serving model config file or a model repository, and the
catalogs that say so while serving. Pure data and file reads; ``manager.py`` serves them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sharedserve.config import BatchingSettings
from sharedserve.errors import NotFound, quoted
from sharedserve.server.repository.config_file import ModelEntry, versions_to_serve
from sharedserve.server.repository.directory import read_repository_model, repository_names
from sharedserve.server.repository.roots import ModelRoots
from sharedserve.server.version import ModelSettings, ModelSource

__all__ = [
    "Catalog",
    "ConfigCatalog",
    "FixedCatalog",
    "RepositoryCatalog",
    "VersionToServe",
    "versions_of",
]


@dataclass(frozen=True)
class VersionToServe:
    """One model version to serve: ``--model``'s, or one of a ``ModelEntry``'s versions."""

    source: ModelSource
    settings: ModelSettings = field(default_factory=ModelSettings)
    """Its model's settings (batching, share, memory), the same for each of its versions."""
    labels: Mapping[str, int] = field(default_factory=dict)
    """Version labels of the model (label -> version), e.g. TF Serving's ``version_labels``."""


def versions_of(
    models: Sequence[ModelEntry], batching: BatchingSettings | None
) -> list[VersionToServe]:
    """The versions on disk that a model config file or repository names, each with its
    model's settings (its batching ``batching``, the server's flags, where its model file sets
    none) and labels; ConfigError where a model has no version to serve."""
    return [
        VersionToServe(
            source,
            dataclasses.replace(model.settings, batching=model.settings.batching or batching),
            dict(model.version_labels),
        )
        for model in models
        for source in versions_to_serve(model)
    ]


class Catalog(Protocol):
    """What may be served: the models ``--model``, a model config file or a repository names."""

    def names(self) -> list[str]: ...

    def versions(self, name: str) -> list[VersionToServe]:
        """Model ``name``'s versions as on disk now; NotFound for a name it does not know,
        ConfigError for a model that cannot be served as configured."""
        ...

    def roots(self, allowed: Sequence[Path]) -> ModelRoots | None:
        """Where its models may be read from, ``allowed`` being ``--allowed-model-roots``;
        None: anywhere (a catalog that never changes)."""
        ...


def unknown(name: str) -> NotFound:
    return NotFound(f"model {quoted(name)} is not in the model repository")


class FixedCatalog:
    """``--model``'s one model: what was named at start, loaded at start, never changed."""

    def __init__(self, entries: Sequence[VersionToServe]) -> None:
        self._entries = list(entries)

    def names(self) -> list[str]:
        return list(dict.fromkeys(e.source.name for e in self._entries))

    def versions(self, name: str) -> list[VersionToServe]:
        found = [e for e in self._entries if e.source.name == name]
        if not found:
            raise unknown(name)
        return found

    def roots(self, allowed: Sequence[Path]) -> None:
        return None


class ConfigCatalog:
    """A TF Serving model config: the file's at start, the last reload's or poll's since."""

    def __init__(self, entries: Sequence[ModelEntry], batching: BatchingSettings | None) -> None:
        self.entries, self.batching = list(entries), batching

    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    def versions(self, name: str) -> list[VersionToServe]:
        found = [e for e in self.entries if e.name == name]
        if not found:
            raise unknown(name)
        return versions_of(found, self.batching)

    def roots(self, allowed: Sequence[Path]) -> ModelRoots:
        """The roots given, else the file's base paths (those that exist: a missing one is its
        model's failure to report, not the server's); the file's own paths trusted."""
        base_paths = [e.base_path for e in self.entries]
        return ModelRoots(allowed or [p for p in base_paths if p.is_dir()], trusted=base_paths)


class RepositoryCatalog:
    """A model repository, read again at each question (Triton's explicit mode): a model
    directory added since start can be loaded."""

    def __init__(self, root: Path, batching: BatchingSettings | None) -> None:
        self._root, self.batching = root.expanduser().resolve(), batching

    def names(self) -> list[str]:
        return repository_names(self._root)

    def versions(self, name: str) -> list[VersionToServe]:
        entry = read_repository_model(self._root, name)
        if entry is None:
            raise unknown(name)
        return versions_of([entry], self.batching)

    def roots(self, allowed: Sequence[Path]) -> ModelRoots:
        return ModelRoots([self._root, *allowed])

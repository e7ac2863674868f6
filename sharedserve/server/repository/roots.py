"""Where models may be read from: the directories the operator configured, and nothing a
client names besides. Pure file reads (no framework).

Why: a model is code. A TensorFlow graph reads and writes files through its ops, so a load
from a directory a client chose runs that client's file I/O as the server. Every load
(``manager.py``'s one path) and every reloaded model config is checked here first, with
symlinks followed: a model directory, a version directory or a file inside one that is a
symlink leading out of the roots is refused as if it were the path it leads to. Symlinks that
stay inside are fine (a repository's ``latest -> 3``).

The roots: ``--model-repository``'s directory and ``--allowed-model-roots``; with
``--model-config-file``, the roots given, else each model's base path named in the file at
start. The operator's own file (read at start, and again by the poll) is trusted for the base
paths it names; a ``HandleReloadConfigRequest`` is a client's and gets the roots alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from sharedserve.errors import ConfigError, PermissionDenied, quoted

__all__ = ["ModelRoots"]

_HOW = (
    "outside the directories this server loads models from (the model repository, "
    "--allowed-model-roots)"
)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


class ModelRoots:
    """The directories models may be read from, symlinks resolved once at start."""

    def __init__(self, allowed: Sequence[Path], trusted: Iterable[Path] = ()) -> None:
        """``allowed``: the configured roots, each an existing directory (ConfigError naming
        it otherwise); ``trusted``: the base paths the operator's model config file names."""
        self.allowed: tuple[Path, ...] = tuple(self._root(p) for p in allowed)
        self.trusted: tuple[Path, ...] = ()
        self.trust(trusted)

    @staticmethod
    def _root(path: Path) -> Path:
        real = _real(path.expanduser())
        if not real.is_dir():
            raise ConfigError(f"--allowed-model-roots: {path} is not a directory")
        return real

    def trust(self, base_paths: Iterable[Path]) -> None:
        """The operator's model config file (at start, or read again by the poll) names these
        base paths: loads may read under them from now on, instead of the last file's."""
        self.trusted = tuple(_real(p.expanduser()) for p in base_paths)

    def _inside(self, real: Path) -> bool:
        return any(real.is_relative_to(root) for root in (*self.allowed, *self.trusted))

    def check(self, path: Path, what: str) -> None:
        """PermissionDenied unless ``path`` and every symlink under it resolve inside a root;
        the message names ``what`` (the client's words for it), never where a path leads.
        Reads the directory tree (a model's few files): call it off the event loop."""
        real = _real(path)
        if not self._inside(real):
            raise PermissionDenied(f"{what} is {_HOW}")
        # Each directory once, by its real path: symlink cycles end, and a tree reached by two
        # links is read once.
        seen: set[Path] = set()
        stack = [real] if real.is_dir() else []
        while stack:
            directory = stack.pop()
            if directory in seen:
                continue
            seen.add(directory)
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue  # unreadable: the load that follows says so
            for entry in entries:
                if entry.is_symlink():
                    target = _real(Path(entry.path))
                    if not self._inside(target):
                        raise PermissionDenied(
                            f"{what} holds a symlink, {quoted(entry.name)}, that leads {_HOW}"
                        )
                    if target.is_dir():
                        stack.append(target)
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))

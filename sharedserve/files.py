"""Writing files that other processes read while we rewrite them."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["write_atomic"]

_TRIES = 100


def _create_temporary(path: Path) -> tuple[int, Path]:
    """A new, empty file beside ``path``, open for writing, with the mode a new file gets.

    Not ``tempfile.mkstemp``: it creates files 0600, so a report written into a shared folder
    could be read by no one else. Creating with 0666 lets the kernel apply the umask as it does
    for ``open(path, "w")``. Reading the umask to chmod afterwards would need ``os.umask`` to set
    it and set it back, which races with any other thread creating a file in between.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(_TRIES):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path} after {_TRIES} tries")


def write_atomic(path: Path, data: bytes) -> Path:
    """Replace ``path`` with ``data`` so a reader sees the old file or the new one, never half.

    A temporary file in the same directory, then a rename (atomic within one file system). The
    file gets the mode of a newly created one (0666 less the umask), whatever the old one had.
    """
    fd, tmp = _create_temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path

"""Whether a unix socket file is still the one we bound, for both kubelet transports."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["FileId", "file_id"]

FileId = tuple[int, int, int]
"""(device, inode, ctime ns): a file removed and created again under the same name differs."""


def file_id(path: Path) -> FileId | None:
    """The file's identity, or None if there is none at ``path``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)

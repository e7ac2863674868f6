"""The kubelet's files as both kubelet transports watch them: whether a unix socket file is
still the one we bound, and waiting, out loud, for the kubelet's own to appear."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

__all__ = ["WAITING_LOG_S", "FileId", "file_id", "wait_for_kubelet"]

log = logging.getLogger(__name__)

FileId = tuple[int, int, int]
"""(device, inode, ctime ns): a file removed and created again under the same name differs."""

WAITING_LOG_S = 60.0
"""Seconds between the lines saying the kubelet is still awaited: its absence is news once, and
a reminder now and then, not a line every poll."""


def file_id(path: Path) -> FileId | None:
    """The file's identity, or None if there is none at ``path``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


async def wait_for_kubelet(
    path: Path, what: str, poll_s: float, *, flag: str, routine: bool
) -> None:
    """Until ``path`` (``what`` it is to the kubelet, which makes it) exists; nothing when it
    does already.

    We never make it ourselves: it is the kubelet's, and on a host without one (a mistyped
    ``flag``, a machine that is no Kubernetes node) making it would leave a kubelet's directory
    behind and wait in silence. So the wait says what it waits for, at once and then every
    ``WAITING_LOG_S``: a warning, or at info when ``routine`` (a kubelet that was there,
    restarting)."""
    if file_id(path) is not None:
        return
    if routine:
        log.info("waiting for the kubelet to come back: no %s %s", what, path)
    else:
        log.warning(
            "waiting for the kubelet: %s %s does not exist (is this a Kubernetes node, and %s "
            "the kubelet's directory?)",
            what,
            path,
            flag,
        )
    clock = asyncio.get_running_loop().time
    next_line = clock() + WAITING_LOG_S
    while file_id(path) is None:
        await asyncio.sleep(poll_s)
        if clock() >= next_line:
            log.warning("still waiting for the kubelet: no %s %s", what, path)
            next_line += WAITING_LOG_S
    log.info("the kubelet is there: %s %s", what, path)

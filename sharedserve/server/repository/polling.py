"""TF Serving's ``--model_config_file_poll_wait_seconds``: the operator's model config file,
read again every so often and served as it says, through the manager's one load path."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from anyio import to_thread

from sharedserve.errors import ConfigError, SharedServeError
from sharedserve.server.repository.config_file import read_model_config_file
from sharedserve.server.repository.manager import ModelManager
from sharedserve.server.repository.versions import ConfigCatalog

__all__ = ["poll_config_file"]

log = logging.getLogger(__name__)


async def poll_config_file(manager: ModelManager, path: Path, wait_s: float) -> None:
    """Every ``wait_s``, the file read again and, when it changed, served as it says; one that
    cannot be read or parsed changes nothing, and is logged once, not at every poll, until the
    error changes or the file parses again. Applied on change only, so a
    HandleReloadConfigRequest's config stands until the file is edited, and a model that failed
    to load is not retried every poll. The file is the operator's: its base paths are trusted
    (``roots.py``), where a client's reload gets the roots alone."""
    catalog = manager.catalog
    last = list(catalog.entries) if isinstance(catalog, ConfigCatalog) else None
    refused: str | None = None  # the error last logged, while the file stays unreadable
    while True:
        await asyncio.sleep(wait_s)
        try:
            entries = await to_thread.run_sync(read_model_config_file, path)
        except ConfigError as e:
            log.debug("model config file %s polled: %s", path, e.message)
            if e.message != refused:
                refused = e.message
                log.error("model config file not applied (the served models stay): %s", refused)
            continue
        log.debug("model config file %s polled", path)
        refused = None
        if entries == last:
            continue
        last = entries
        try:
            await manager.converge(entries, trusted=True)
        except SharedServeError as e:
            log.error("model config file applied, but: %s", e.message)

"""Keeps this node's ResourceSlice as the GPUs are: published at start, on every health change,
and again after each registration with the kubelet.

Why again after registration: a kubelet that loses a DRA plugin (its restart, or ours) deletes
the plugin's slices for the node after a grace period, so a slice we published before may be
gone. Publishing is create-or-replace of one object, so repeating it is harmless.

Only the newest wanted state is ever sent: a health change while the API server is down
replaces the one still waiting, and the retry (with doubling backoff) sends whatever is wanted
then. The generation counts our changes, as the API asks of a pool's owner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sharedserve.allocator.dra.kube import ApiError, KubeApi
from sharedserve.allocator.dra.slices import (
    SliceOptions,
    devices,
    resource_slice,
    slice_name,
)
from sharedserve.allocator.health_state import Health
from sharedserve.allocator.inventory import PhysicalGpu

__all__ = ["SlicePublisher"]

log = logging.getLogger(__name__)


class SlicePublisher:
    def __init__(
        self,
        api: KubeApi,
        node: str,
        gpus: Sequence[PhysicalGpu],
        *,
        options: SliceOptions,
        driver_version: str | None,
        backoff_s: tuple[float, float],
    ) -> None:
        self._api = api
        self._node = node
        self._gpus = tuple(gpus)
        self._options = options
        self._driver_version = driver_version
        self._backoff = backoff_s
        self._wanted: list[dict[str, Any]] | None = None
        self._sent: list[dict[str, Any]] | None = None
        self._generation = 0
        self._wake = asyncio.Event()
        self.publications = 0
        """Slices written so far."""

    def update(self, health: Mapping[str, Health]) -> None:
        """Want the slice for ``health`` (call on the event loop)."""
        self._wanted = devices(self._gpus, health, self._options, self._driver_version)
        self._wake.set()

    def republish(self) -> None:
        """Write the slice again even if unchanged (the kubelet may have deleted it)."""
        self._sent = None
        self._wake.set()

    async def run(self) -> None:
        first, longest = self._backoff
        delay = first
        while True:
            await self._wake.wait()
            self._wake.clear()
            wanted = self._wanted
            if wanted is None or wanted == self._sent:
                continue
            try:
                await asyncio.to_thread(self._write, wanted)
            except ApiError as e:
                log.warning(
                    "publishing the ResourceSlice failed (%s); retrying in %.1f s", e, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, longest)
                self._wake.set()
                continue
            delay = first
            self._sent = wanted

    def _write(self, wanted: list[dict[str, Any]]) -> None:
        name = slice_name(self._node)
        if not self._gpus:
            # No GPU on this node: no slice, and none left over from an earlier inventory.
            if self._api.delete_slice(name):
                log.info("deleted ResourceSlice %s: this node has no GPU", name)
            return
        self._generation += 1
        self._api.apply_slice(resource_slice(self._node, wanted, self._generation))
        self.publications += 1
        log.info(
            "published ResourceSlice %s (generation %d): %d device(s) %s",
            name,
            self._generation,
            len(wanted),
            ", ".join(d["name"] for d in wanted) or "(every GPU unhealthy)",
        )

"""Prepare and unprepare claims: read the claim, write its CDI spec, checkpoint it.

Idempotent as the kubelet needs (it retries both calls): a claim already in the checkpoint is
answered from it without asking the API server again, and unpreparing a claim that is not
prepared here succeeds and changes nothing (its spec is removed by UID in case a crash came
between writing the spec and the checkpoint). Claims of one call are read from the API server
concurrently; the writes are serialized.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sharedserve.allocator.dra.cdi import remove_spec, write_spec
from sharedserve.allocator.dra.checkpoint import Checkpoint
from sharedserve.allocator.dra.claims import ClaimRef, PreparedClaim, prepare_claim
from sharedserve.allocator.inventory import PhysicalGpu
from sharedserve.contract import GPU_MEMORY_MIB, NVIDIA_VISIBLE_DEVICES
from sharedserve.errors import SharedServeError

__all__ = ["Preparer"]

log = logging.getLogger(__name__)

ClaimReader = Callable[[str, str], dict[str, Any]]


class Preparer:
    def __init__(
        self,
        read_claim: ClaimReader,
        gpus: Sequence[PhysicalGpu],
        pool: str,
        cdi_dir: Path,
        checkpoint: Checkpoint,
        *,
        slots: int | None,
        gpu_cdi_kind: str | None,
    ) -> None:
        self._read_claim = read_claim
        self._gpus = tuple(gpus)
        self._pool = pool
        self._cdi_dir = cdi_dir
        self._checkpoint = checkpoint
        self._slots = slots
        self._gpu_cdi_kind = gpu_cdi_kind
        self._lock = asyncio.Lock()

    @property
    def prepared(self) -> dict[str, PreparedClaim]:
        return self._checkpoint.claims

    async def _build(self, ref: ClaimRef) -> PreparedClaim | str:
        try:
            claim = await asyncio.to_thread(self._read_claim, ref.namespace, ref.name)
            return prepare_claim(
                claim,
                ref,
                pool=self._pool,
                gpus=self._gpus,
                slots=self._slots,
                gpu_cdi_kind=self._gpu_cdi_kind,
            )
        except SharedServeError as e:
            log.warning("NodePrepareResources %s refused: %s", ref, e.message)
            return e.message

    async def _commit(self, ref: ClaimRef, result: PreparedClaim | str) -> PreparedClaim | str:
        """Write the spec and enter the claim in the checkpoint (saved by the caller)."""
        if isinstance(result, str):
            return result
        try:
            await asyncio.to_thread(write_spec, self._cdi_dir, result)
        except OSError as e:
            log.error("cannot write the CDI spec for claim %s: %s", ref, e)
            return f"cannot write the CDI spec for claim {ref}: {e}"
        self._checkpoint.claims[ref.uid] = result
        for name, env in result.envs.items():
            log.info(
                "prepared claim %s (%s): GPU %s, memory %s MiB",
                ref,
                name,
                env.get(NVIDIA_VISIBLE_DEVICES),
                env.get(GPU_MEMORY_MIB),
            )
        return result

    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PreparedClaim | str]:
        """Per claim UID: what was prepared, or why it could not be."""
        answers: dict[str, PreparedClaim | str] = {}
        todo = []
        for ref in refs:
            done = self._checkpoint.claims.get(ref.uid)
            if done is not None:
                answers[ref.uid] = done  # the kubelet retried: answer as before
            else:
                todo.append(ref)
        built = await asyncio.gather(*(self._build(ref) for ref in todo))
        async with self._lock:
            for ref, result in zip(todo, built, strict=True):
                answers[ref.uid] = await self._commit(ref, result)
            if any(isinstance(answers[ref.uid], PreparedClaim) for ref in todo):
                await asyncio.to_thread(self._checkpoint.save)
        return answers

    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str | None]:
        """Per claim UID: None when done (or nothing was prepared), else why not."""
        answers: dict[str, str | None] = {}
        forgotten = False
        async with self._lock:
            for ref in refs:
                try:
                    removed = await asyncio.to_thread(remove_spec, self._cdi_dir, ref.uid)
                except OSError as e:
                    answers[ref.uid] = f"cannot remove the CDI spec of claim {ref}: {e}"
                    log.error("%s", answers[ref.uid])
                    continue
                known = self._checkpoint.claims.pop(ref.uid, None) is not None
                forgotten |= known
                if known or removed:
                    log.info("unprepared claim %s", ref)
                else:
                    log.info("unprepare of claim %s: not prepared here, nothing to do", ref)
                answers[ref.uid] = None
            if forgotten:
                await asyncio.to_thread(self._checkpoint.save)
        return answers

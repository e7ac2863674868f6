"""The prepared claims, on disk: a restarted driver answers the kubelet exactly as before.

The kubelet retries NodePrepareResources until it gets an answer, and calls
NodeUnprepareResources for claims prepared by an earlier process of ours. The checkpoint lets
both be answered from what was prepared, even if the claim has since left the API server. It is
rewritten whole (atomically) after every change; it holds one small entry per claim in use on
the node, so a rewrite is a few kilobytes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sharedserve.allocator.dra.claims import ClaimRef, PreparedClaim, PreparedDevice
from sharedserve.files import write_atomic

__all__ = ["Checkpoint"]

log = logging.getLogger(__name__)

_VERSION = 1


def _to_json(claim: PreparedClaim) -> dict[str, Any]:
    return asdict(claim)


def _from_json(data: dict[str, Any]) -> PreparedClaim:
    devices = tuple(
        PreparedDevice(**{**d, "cdi_ids": tuple(d["cdi_ids"])}) for d in data["devices"]
    )
    return PreparedClaim(ClaimRef(**data["ref"]), devices, data["envs"])


class Checkpoint:
    """Prepared claims by UID, loaded at start, saved after each change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.claims: dict[str, PreparedClaim] = self._load()
        # Each claim's JSON form, made once: converting every claim on every save cost ~3 ms
        # with 64 claims, most of a prepare's time (benchmarks/allocator.py).
        self._encoded: dict[str, tuple[PreparedClaim, dict[str, Any]]] = {}

    def _load(self) -> dict[str, PreparedClaim]:
        try:
            data = json.loads(self.path.read_text())
            if data.get("version") != _VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {_VERSION}")
            return {uid: _from_json(c) for uid, c in data["claims"].items()}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            # Every answer can be worked out again from the API server and unprepare needs
            # only the UID, so a damaged file costs a re-read, not a refusal. Kept for a human.
            kept = self.path.with_suffix(".corrupt")
            self.path.replace(kept)
            log.error(
                "checkpoint %s unreadable (%s); moved to %s, starting empty", self.path, e, kept
            )
            return {}

    def _encode(self, uid: str, claim: PreparedClaim) -> dict[str, Any]:
        cached = self._encoded.get(uid)
        if cached is None or cached[0] is not claim:
            cached = self._encoded[uid] = (claim, _to_json(claim))
        return cached[1]

    def save(self) -> None:
        claims = {u: self._encode(u, c) for u, c in self.claims.items()}
        for gone in self._encoded.keys() - claims.keys():
            del self._encoded[gone]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps({"version": _VERSION, "claims": claims}).encode())

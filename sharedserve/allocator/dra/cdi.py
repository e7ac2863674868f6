"""CDI specs: one JSON file per prepared claim in the runtime's CDI directory.

The container runtime (containerd, CRI-O) reads every spec in ``/var/run/cdi`` and, for each
CDI device ID the kubelet passes with a container, applies that device's ``containerEdits``:
here the env contract, so the model server inside caps itself to the claim's share. A file is
written whole or not at all (``files.write_atomic``): the runtime may read it at any moment.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from sharedserve.allocator.dra.claims import CDI_KIND, PreparedClaim
from sharedserve.contract import DRA_DRIVER
from sharedserve.files import write_atomic

__all__ = ["CDI_VERSION", "remove_spec", "spec", "spec_path", "write_spec"]

#: Env-only edits need CDI 0.3.0; 0.5.0 is what containerd 1.7 and CRI-O 1.28 read.
CDI_VERSION = "0.5.0"


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    """The claim's spec file: named by UID alone, so unprepare finds it without any record."""
    return cdi_dir / f"{DRA_DRIVER}-claim_{claim_uid}.json"


def spec(claim: PreparedClaim) -> dict[str, Any]:
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [
            {
                "name": name,
                "containerEdits": {"env": [f"{k}={v}" for k, v in sorted(env.items())]},
            }
            for name, env in claim.envs.items()
        ],
    }


def write_spec(cdi_dir: Path, claim: PreparedClaim) -> Path:
    cdi_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(spec(claim), indent=2) + "\n"
    return write_atomic(spec_path(cdi_dir, claim.ref.uid), text.encode())


def remove_spec(cdi_dir: Path, claim_uid: str) -> bool:
    """Remove the claim's spec; False if there was none."""
    with contextlib.suppress(FileNotFoundError):
        spec_path(cdi_dir, claim_uid).unlink()
        return True
    return False

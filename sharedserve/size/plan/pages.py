"""The plan's pages on disk: ``plan.md`` and ``plan.html``, written by ``size --fleet`` and
written again by each ``size --verify`` with the verify runs found beside the plan.

Which runs: every ``verify-*/verify.json`` in the plan's directory (``--verify``'s default
``--out`` is ``verify-NAME`` there), and the one just written wherever ``--out`` put it. Each
``verify.json`` records the digest of the ``plan.json`` it was judged against
(``plan_digest``); one written against another plan (the plan was made again since), or with
none recorded, or unreadable, is left out, and the section says how many were.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sharedserve.files import write_atomic
from sharedserve.size.plan.document import Plan, read_plan
from sharedserve.size.plan.markdown import plan_markdown
from sharedserve.size.plan.page import plan_html
from sharedserve.size.plan.verified import Verified, VerifyRun

__all__ = ["VERIFY_FILES", "find_verified", "plan_digest", "show_verified", "write_pages"]

VERIFY_FILES = "verify-*/verify.json"
"""Where in a plan's directory its verify runs are looked for."""


def plan_digest(path: Path) -> str:
    """The digest of a ``plan.json`` (SHA-256 of its bytes, hex): which plan a verify judged."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_pages(plan: Plan, out_dir: Path, verified: Verified | None = None) -> None:
    """Write ``plan.md`` and ``plan.html`` of ``plan`` into ``out_dir``, with ``verified``'s
    section where it has runs."""
    write_atomic(out_dir / "plan.md", plan_markdown(plan, plan.pack_specs, verified).encode())
    write_atomic(out_dir / "plan.html", plan_html(plan, verified).encode())


def _read(path: Path) -> Mapping[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("models"), list) else None


def _named(path: Path, plan_dir: Path) -> str:
    """``path`` as the plan's pages name it: from the plan's directory where it is under it."""
    try:
        return path.relative_to(plan_dir).as_posix()
    except ValueError:
        return os.path.relpath(path, plan_dir)


def find_verified(plan_dir: Path, also: Path | None = None) -> Verified:
    """The verify runs of the plan in ``plan_dir`` (``VERIFY_FILES`` there, and ``also``), those
    of its current ``plan.json`` only, in path order."""
    digest = plan_digest(plan_dir / "plan.json")
    paths = sorted(plan_dir.glob(VERIFY_FILES))
    if also is not None and also.resolve() not in {p.resolve() for p in paths}:
        paths.append(also)
    runs, left_out = [], 0
    for path in paths:
        result = _read(path)
        if result is None or result.get("plan_digest") != digest:
            left_out += 1
            continue
        runs.append(VerifyRun(_named(path, plan_dir), result))
    return Verified(tuple(runs), left_out)


def show_verified(plan_dir: Path, also: Path | None = None) -> Verified:
    """Write the plan's pages in ``plan_dir`` again, with its verify runs (``find_verified``);
    what they show."""
    verified = find_verified(plan_dir, also)
    write_pages(read_plan(plan_dir / "plan.json"), plan_dir, verified)
    return verified

"""The one writer of fake-GPU inventories: the JSON that ``--fake-gpus`` reads (``gpu/fake.py``).

Tests say what they mean (two 16 GiB GPUs, the second unhealthy) and this module spells it in
the file format, so a change to the format is made here once. ``FakeGpuBackend`` re-reads the
file on every probe; ``write_inventory`` replaces it atomically so a probe never reads half.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["fake_gpu_file", "gpu", "gpu_uuid", "write_inventory"]

Gpu = dict[str, Any]


def gpu_uuid(index: int) -> str:
    """The UUID the helper gives GPU ``index`` unless told another: stable across runs."""
    return f"GPU-0a1b2c3d-0000-0000-0000-{index:012d}"


def gpu(
    index: int,
    memory_mib: int,
    *,
    uuid: str | None = None,
    name: str = "Tesla T4",
    numa_node: int | None = 0,
    healthy: bool = True,
) -> Gpu:
    """One inventory entry, every field written out (as NVML would report them all)."""
    return {
        "uuid": uuid or gpu_uuid(index),
        "index": index,
        "name": name,
        "memory_mib": memory_mib,
        "numa_node": numa_node,
        "healthy": healthy,
    }


def write_inventory(path: Path, gpus: Sequence[Gpu] | str) -> Path:
    """Write ``gpus`` (entries, or raw text to test a broken file) to ``path``, atomically."""
    text = gpus if isinstance(gpus, str) else json.dumps({"gpus": list(gpus)})
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def fake_gpu_file(
    directory: Path,
    memory_mib: Sequence[int] = (16384,),
    *,
    healthy: bool | Sequence[bool] = True,
    name: str = "Tesla T4",
) -> Path:
    """``directory/gpus.json`` with one GPU per ``memory_mib`` entry, indexed in order;
    ``healthy`` for all of them or one per GPU. Returns the path for ``--fake-gpus``."""
    flags = [healthy] * len(memory_mib) if isinstance(healthy, bool) else list(healthy)
    if len(flags) != len(memory_mib):
        raise ValueError(f"{len(flags)} health flags for {len(memory_mib)} GPUs")
    entries = [
        gpu(i, mib, name=name, healthy=ok)
        for i, (mib, ok) in enumerate(zip(memory_mib, flags, strict=True))
    ]
    return write_inventory(directory / "gpus.json", entries)

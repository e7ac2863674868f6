"""FakeGpuBackend: a GPU inventory read from JSON, for tests and machines without a GPU.

The file is re-read on every ``list_gpus`` and ``probe`` call so a test can flip a GPU's health by
rewriting it.
Construction logs loudly: nothing downstream may mistake these GPUs for real ones.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sharedserve.errors import ConfigError, GpuError
from sharedserve.gpu.backend import GpuInfo, XidWatch

__all__ = ["FakeGpuBackend", "parse_inventory"]

log = logging.getLogger(__name__)


def parse_inventory(data: Any, origin: str = "inventory") -> list[GpuInfo]:
    """``{"gpus": [{"uuid", "index", "name", "memory_mib", "numa_node"?, "healthy"?}]}``."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        raise ConfigError(f'{origin}: expected an object with a "gpus" list')
    return [_entry(entry, i, origin) for i, entry in enumerate(data["gpus"])]


def _typed(entry: dict[str, Any], key: str, kind: type, default: Any, where: str) -> Any:
    value = entry.get(key, default)
    # bool is an int subclass in Python; a JSON true is no GPU index or size.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}.{key} must be {kind.__name__}, got {value!r}")
    return value


def _entry(entry: Any, i: int, origin: str) -> GpuInfo:
    where = f"{origin}: gpus[{i}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object")
    for key in ("uuid", "memory_mib"):
        if key not in entry:
            raise ConfigError(f"{where} has no {key!r}")
    memory = _typed(entry, "memory_mib", int, None, where)
    if memory <= 0:
        raise ConfigError(f"{where}.memory_mib must be positive, got {memory}")
    numa = entry.get("numa_node")
    return GpuInfo(
        uuid=_typed(entry, "uuid", str, None, where),
        index=_typed(entry, "index", int, i, where),
        name=_typed(entry, "name", str, "Simulated GPU", where),
        memory_mib=memory,
        numa_node=None if numa is None else _typed(entry, "numa_node", int, None, where),
        healthy=_typed(entry, "healthy", bool, True, where),
    )


class FakeGpuBackend:
    """GPUs described by a JSON file. Always ``simulated``."""

    def __init__(self, path: Path) -> None:
        self._path = path
        try:
            gpus = self.list_gpus()  # fail fast on a bad file
        except GpuError as e:
            raise ConfigError(e.message) from e
        log.warning(
            "GPUs are SIMULATED from %s (%d GPU(s)); no GPU figure from them is measured",
            path,
            len(gpus),
        )

    @property
    def simulated(self) -> bool:
        return True

    def list_gpus(self) -> list[GpuInfo]:
        try:
            data = json.loads(self._path.read_text())
        except OSError as e:
            raise GpuError(f"cannot read fake GPU inventory {self._path}: {e}") from e
        except ValueError as e:  # invalid JSON or not UTF-8
            raise ConfigError(f"fake GPU inventory {self._path} is not valid JSON: {e}") from e
        return parse_inventory(data, str(self._path))

    def process_memory_mib(self, gpu_uuid: str, pid: int) -> int | None:
        return None  # simulated GPUs hold no memory: never report a made-up figure

    def probe(self, gpu_uuid: str) -> str | None:
        """The file's ``healthy`` flag, read afresh, so a test can fail and recover a GPU."""
        try:
            gpus = self.list_gpus()
        except ConfigError as e:  # rewritten into something unreadable: the "driver" fails
            raise GpuError(e.message) from e
        gpu = next((g for g in gpus if g.uuid == gpu_uuid), None)
        if gpu is None:
            return f"GPU {gpu_uuid} is no longer in {self._path}"
        return None if gpu.healthy else f"GPU {gpu_uuid} is marked unhealthy in {self._path}"

    def open_xid_watch(self, gpu_uuids: Sequence[str]) -> XidWatch | None:
        return None  # a JSON file raises no XID events

    def utilization_percent(self, gpu_uuid: str) -> int | None:
        return None  # simulated: never a made-up figure

    def memory_used_mib(self, gpu_uuid: str) -> int | None:
        return None

    def driver_version(self) -> str | None:
        return None  # no driver behind a JSON file

    def cuda_driver_version(self) -> str | None:
        return None

    def close(self) -> None:
        pass

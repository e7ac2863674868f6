"""FakeGpuBackend: a GPU inventory read from JSON, for tests and machines without a GPU.

The file is re-read on every ``list_gpus`` and ``probe`` call so a test can flip a GPU's health by
rewriting it.
Construction logs loudly: nothing downstream may mistake these GPUs for real ones.

The file is read as every other file a user writes is (``documents.read_document``: one set of
messages, and a file nested too deeply for the parser is a ConfigError, not a RecursionError);
its entries are checked here, by hand, because the probe re-reads it every second and its
fields are six. Every value is bounded: an inventory feeds vGPU counts, byte figures and device
IDs, and a ``memory_mib`` of 2**80 is a typo (or an attack), never a GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sharedserve.documents import read_document
from sharedserve.errors import ConfigError, GpuError
from sharedserve.gpu.info import GpuInfo, XidWatch

__all__ = [
    "MAX_GPUS",
    "MAX_MEMORY_MIB",
    "MAX_TEXT",
    "FakeGpuBackend",
    "fake_gpus_schema",
    "parse_inventory",
]

log = logging.getLogger(__name__)

MAX_MEMORY_MIB = 1 << 24
"""16 TiB: some eighty times the largest GPU sold; more is no GPU's memory."""
MAX_GPUS = 1024
"""More GPUs than any node holds; also the bound on ``index`` and ``numa_node``."""
MAX_TEXT = 96
"""NVML's UUID and name buffers are 96 bytes (``NVML_DEVICE_UUID_V2_BUFFER_SIZE``)."""


def parse_inventory(data: Any, origin: str = "inventory") -> list[GpuInfo]:
    """``{"gpus": [{"uuid", "index"?, "name"?, "memory_mib", "numa_node"?, "healthy"?}]}``;
    ConfigError names ``origin`` and the field (``gpus[1].memory_mib: ...``)."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        raise ConfigError(f'{origin}: expected an object with a "gpus" list')
    if len(data["gpus"]) > MAX_GPUS:
        raise ConfigError(f"{origin}: gpus: at most {MAX_GPUS} GPUs, got {len(data['gpus'])}")
    gpus = [_entry(entry, i, origin) for i, entry in enumerate(data["gpus"])]
    _unique(gpus, origin)
    return gpus


def fake_gpus_schema() -> dict[str, Any]:
    """The inventory's JSON Schema (``sharedserve schema fake-gpus``, docs/fake-gpus.md).

    Written out by hand beside ``parse_inventory``, from the same bounds, as the reader is: a
    test checks that the two accept and refuse the same files. What a schema cannot say (no two
    GPUs share a UUID or an index) is in the descriptions."""
    text = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT}
    gpu = {
        "type": "object",
        "description": "One GPU, as NVML would report it.",
        "required": ["uuid", "memory_mib"],
        "properties": {
            "uuid": text
            | {
                "description": "The GPU's UUID (`GPU-...`, as `nvidia-smi -L` prints it): its "
                "vGPUs' IDs and NVIDIA_VISIBLE_DEVICES. Unique in the file."
            },
            "index": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_GPUS - 1,
                "description": "The GPU's index (CUDA_VISIBLE_DEVICES); default: its place in "
                "the list. Unique in the file.",
            },
            "name": text
            | {"default": "Simulated GPU", "description": "The model name, e.g. `Tesla T4`."},
            "memory_mib": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_MEMORY_MIB,
                "description": "Total memory in MiB (`nvidia-smi --query-gpu=memory.total`).",
            },
            "numa_node": {
                "type": ["integer", "null"],
                "minimum": 0,
                "maximum": MAX_GPUS,
                "default": None,
                "description": "The NUMA node the GPU hangs off; null: unknown.",
            },
            "healthy": {
                "type": "boolean",
                "default": True,
                "description": "False marks the GPU failed; the file is re-read on every health "
                "probe, so rewriting it fails or recovers the GPU.",
            },
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "sharedserve fake GPU inventory (--fake-gpus)",
        "description": "Simulated GPUs for hosts without one (tests, development); everything "
        "measured against them is marked SIMULATED. docs/fake-gpus.md.",
        "type": "object",
        "required": ["gpus"],
        "properties": {"gpus": {"type": "array", "maxItems": MAX_GPUS, "items": gpu}},
    }


def _unique(gpus: list[GpuInfo], origin: str) -> None:
    """A UUID names a GPU's vGPUs and an index its place: two GPUs may share neither."""
    for field in ("uuid", "index"):
        first: dict[Any, int] = {}
        for i, gpu in enumerate(gpus):
            value = getattr(gpu, field)
            if value in first:
                raise ConfigError(
                    f"{origin}: gpus[{i}].{field}: {value!r} is also gpus[{first[value]}]'s"
                )
            first[value] = i


def _whole(
    entry: dict[str, Any], key: str, where: str, *, default: Any, low: int, high: int
) -> Any:
    value = entry.get(key, default)
    # bool is an int subclass in Python; a JSON true is no GPU index or size.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}.{key}: must be a whole number, got {_shown(value)}")
    if not low <= value <= high:
        raise ConfigError(f"{where}.{key}: must be in {low}..{high}, got {_shown(value)}")
    return value


def _text(entry: dict[str, Any], key: str, default: Any, where: str) -> Any:
    value = entry.get(key, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}.{key}: must be a non-empty string, got {_shown(value)}")
    if len(value) > MAX_TEXT:
        raise ConfigError(f"{where}.{key}: at most {MAX_TEXT} characters, got {len(value)}")
    return value


def _shown(value: Any) -> str:
    """The value as the message shows it: never a megabyte of it, nor a nested one whole."""
    if isinstance(value, (dict, list)):
        return f"{'an object' if isinstance(value, dict) else 'a list'} of {len(value)}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _entry(entry: Any, i: int, origin: str) -> GpuInfo:
    where = f"{origin}: gpus[{i}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be an object, got {_shown(entry)}")
    for key in ("uuid", "memory_mib"):
        if key not in entry:
            raise ConfigError(f"{where}.{key}: required")
    memory = _whole(entry, "memory_mib", where, default=None, low=1, high=MAX_MEMORY_MIB)
    healthy = entry.get("healthy", True)
    if not isinstance(healthy, bool):
        raise ConfigError(f"{where}.healthy: must be true or false, got {_shown(healthy)}")
    numa = entry.get("numa_node")
    return GpuInfo(
        uuid=_text(entry, "uuid", None, where),
        index=_whole(entry, "index", where, default=i, low=0, high=MAX_GPUS - 1),
        name=_text(entry, "name", "Simulated GPU", where),
        memory_mib=memory,
        numa_node=None
        if numa is None
        else _whole(entry, "numa_node", where, default=None, low=0, high=MAX_GPUS),
        healthy=healthy,
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
        data = read_document(self._path, "fake GPU inventory")
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

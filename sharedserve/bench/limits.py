"""The limits each replica ran under, as its server reports them, for the report's settings.

A bench result means little without the limits that shaped it: half a core enforced by a cgroup
quota and half a core the server merely sized its threads to are different experiments, and so
are a GPU cap applied and one only recorded. The flags say what was asked for; each server's
``GET /sharedserve/v1/limits`` says what it got, so that is what the report keeps, read once the
replicas are up and before any load. Replicas that report the same limits are grouped, so a
density sweep records one entry per density unless its replicas differ.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

from sharedserve.limits.cpu import cores_text
from sharedserve.pack.probe import get_json

__all__ = [
    "LIMITS_HEADERS",
    "LIMIT_KEYS",
    "group_limits",
    "limits_table",
    "read_limits",
    "replica_limits",
    "without_limits",
]

LIMIT_KEYS = (
    "cpu_limit_cores",
    "cpu_limit_source",
    "cpu_quota_enforced",
    "gpu_memory_fraction",
    "gpu_memory_mib",
    "gpu_memory_enforced",
    "batching",
)
"""Every key of one replica's ``limits`` in the report (see ``replica_limits``)."""

_QUOTA_SOURCES = ("cgroup-v1", "cgroup-v2")


def read_limits(
    rest_url: str, timeout: float = 5.0, tls: ssl.SSLContext | None = None
) -> dict[str, Any] | None:
    """The server's ``/sharedserve/v1/limits`` body; None when it has none to give (not a
    sharedserve server, not answering, or not JSON). ``tls`` verifies an https server."""
    body = get_json(rest_url, "/sharedserve/v1/limits", timeout, tls)
    return body if isinstance(body, dict) else None


def replica_limits(body: dict[str, Any] | None, *, simulated_gpus: bool) -> dict[str, Any] | None:
    """The report's view of one server's limits (``LIMIT_KEYS``); None when it gave none.

    ``cpu_limit_cores`` is the CPU limit in cores the server runs under (None: no limit), from
    ``cpu_limit_source``: ``cgroup-v1``/``cgroup-v2`` when a CFS quota binds it
    (``cpu_quota_enforced``), ``flag`` when nothing enforces it and the server only sized its
    thread pools to it, ``none``. ``gpu_memory_fraction`` (of the GPU) and ``gpu_memory_mib`` are
    its GPU memory cap, ``gpu_memory_enforced`` whether a framework applied it on a real GPU; the
    cap's figures are None when the GPUs were simulated, as sizes of a GPU that does not exist.
    ``batching`` is the server's dynamic batching, ``{"enabled": false}`` or its settings.
    """
    if body is None:
        return None
    source = body.get("cpu_limit_source")
    return {
        "cpu_limit_cores": body.get("cpu_limit"),
        "cpu_limit_source": source,
        "cpu_quota_enforced": source in _QUOTA_SOURCES,
        "gpu_memory_fraction": None if simulated_gpus else body.get("gpu_memory_fraction"),
        "gpu_memory_mib": None if simulated_gpus else body.get("gpu_memory_mib"),
        "gpu_memory_enforced": body.get("gpu_memory_enforced") is True,
        "batching": body.get("batching"),
    }


def group_limits(density: int, limits: dict[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Entries ``{"density", "replicas": [names], "limits": {...} | None}``, one per distinct
    limits among ``limits`` (replica name -> its limits), in the order first seen."""
    groups: dict[str, dict[str, Any]] = {}
    for name, value in limits.items():
        key = json.dumps(value, sort_keys=True)
        entry = groups.setdefault(key, {"density": density, "replicas": [], "limits": value})
        entry["replicas"].append(name)
    return list(groups.values())


LIMITS_HEADERS = [
    "density",
    "replicas",
    "CPU limit",
    "CPU quota",
    "GPU cap",
    "cap applied",
    "batching",
]


def without_limits(settings: Any) -> Any:
    """The report's settings but their ``replica_limits``, which get a table of their own."""
    if not isinstance(settings, dict):
        return settings
    return {k: v for k, v in settings.items() if k != "replica_limits"}


def _batching(value: Any) -> str:
    if not isinstance(value, dict) or not value.get("enabled"):
        return "off"
    size, wait = value.get("max_batch_size"), value.get("batch_timeout_micros")
    return f"up to {size} rows, waits {wait} us"


def limits_table(entries: Any) -> list[list[str]]:
    """``settings.replica_limits`` as table rows under ``LIMITS_HEADERS``, for the Markdown and
    HTML reports alike."""
    rows = []
    for entry in entries if isinstance(entries, list) else []:
        names = entry.get("replicas") or []
        who = ", ".join(names) if len(names) <= 3 else f"{len(names)} replicas"
        limits = entry.get("limits")
        if limits is None:
            rows.append([str(entry.get("density")), who, *["unknown"] * 5])
            continue
        cores, source = limits.get("cpu_limit_cores"), limits.get("cpu_limit_source")
        fraction, mib = limits.get("gpu_memory_fraction"), limits.get("gpu_memory_mib")
        cap = " = ".join(
            part
            for part in (
                None if fraction is None else f"{fraction:.4g} of the GPU",
                None if mib is None else f"{mib} MiB",
            )
            if part
        )
        rows.append(
            [
                str(entry.get("density")),
                who,
                "none" if cores is None else f"{cores_text(cores)} ({source})",
                "enforced" if limits.get("cpu_quota_enforced") else "not enforced",
                cap or "none",
                "yes" if limits.get("gpu_memory_enforced") else "no",
                _batching(limits.get("batching")),
            ]
        )
    return rows

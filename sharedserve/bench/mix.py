"""A report of a mix of models, as every view of it (Markdown, HTML, plots, terminal) reads it.

A report is a mix when some row measured more than one model (``row["models"]``): its rows are
then led by the scale (the multiple of the spec's replicas), and each model gets a line per row
judged against its own objective. A sweep of one model keeps the density-led look it always had.
Rows written before mixes existed have no ``scale``, ``models`` or ``gpus``: they read as a sweep
of one model. The writers read rows as dicts; the verdict reads them typed (``bench.row``), through
the ``typed_`` twins here, which say it in the same words. Pure: standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sharedserve.bench.row import ReportRow

__all__ = [
    "GPU_COLUMNS",
    "MODEL_COLUMNS",
    "MODEL_PLOT",
    "gpu_lines",
    "is_mix",
    "model_lines",
    "objectives",
    "row_label",
    "scale_of",
    "several_patterns",
    "typed_is_mix",
    "typed_row_label",
    "typed_several_patterns",
]

MODEL_COLUMNS = (
    ("replicas", "replicas"), ("weight", "weight"), ("qps", "QPS"), ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"), ("p999_ms", "p99.9 ms"), ("errors", "errors"), ("dropped", "dropped"),
    ("slo_p99_ms", "SLO ms"), ("slo_met", "met"), ("gpu_memory_fraction", "GPU mem cap"),
    ("cpu_limit", "CPU limit"), ("cpu_throttled_share", "CPU throttled share"),
    ("gpu_mem_mib", "GPU mem MiB"),
)  # fmt: skip
"""(key, heading) of the per-model table's figures, after the scale (and pattern) and model."""

MODEL_PLOT = "p99_by_model_vs_scale.png"
"""The plot of each model's P99 against the scale, drawn for a mix only."""

GPU_COLUMNS = (
    ("uuid", "GPU"), ("name", "name"), ("util_mean", "util mean %"), ("util_max", "util max %"),
    ("mem_used_mib", "memory used MiB"),
)  # fmt: skip
"""(key, heading) of the per-GPU table, after the scale (and pattern)."""


def is_mix(rows: list[dict[str, Any]]) -> bool:
    """Whether some row measured more than one model."""
    return any(len(r.get("models") or {}) > 1 for r in rows)


def scale_of(row: dict[str, Any]) -> Any:
    """The row's scale; its density for a row from before scales were recorded."""
    scale = row.get("scale")
    return row.get("density") if scale is None else scale


def several_patterns(lines: list[dict[str, Any]]) -> bool:
    return len({ln.get("pattern") for ln in lines}) > 1


def row_label(
    row: dict[str, Any], *, mix: bool, pattern: bool = False, replicas: bool = False
) -> str:
    """How every view names a row: ``density 4`` in a sweep of one model, ``scale 2`` in a mix
    (``scale 2 (6 replicas)`` with ``replicas``), then ``(parallel)`` with ``pattern``."""
    return _label(
        row.get("density"), scale_of(row), row.get("pattern"),
        mix=mix, pattern=pattern, replicas=replicas,
    )  # fmt: skip


def typed_is_mix(rows: Sequence[ReportRow]) -> bool:
    """``is_mix`` of rows read into their type."""
    return any(len(r.models) > 1 for r in rows)


def typed_several_patterns(rows: Sequence[ReportRow]) -> bool:
    """``several_patterns`` of rows read into their type."""
    return len({r.pattern for r in rows}) > 1


def typed_row_label(
    row: ReportRow, *, mix: bool, pattern: bool = False, replicas: bool = False
) -> str:
    """``row_label`` of a row read into its type."""
    return _label(
        row.density, row.scale_or_density, row.pattern,
        mix=mix, pattern=pattern, replicas=replicas,
    )  # fmt: skip


def _label(
    density: Any, scale: Any, pattern_name: Any, *, mix: bool, pattern: bool, replicas: bool
) -> str:
    if not mix:
        label = f"density {density}"
    else:
        label = f"scale {scale}"
        label += f" ({density} replicas)" if replicas else ""
    return label + (f" ({pattern_name})" if pattern else "")


def model_lines(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (row, model): the model's figures, with its name and its row's scale,
    density and pattern; in row order, then the spec's order of models."""
    return [
        {"scale": scale_of(r), "density": r.get("density"), "pattern": r.get("pattern"),
         "model": name, **m}
        for r in rows
        for name, m in (r.get("models") or {}).items()
    ]  # fmt: skip


def gpu_lines(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (row, real GPU sampled); none without a real GPU."""
    return [
        {"scale": scale_of(r), "pattern": r.get("pattern"), **g}
        for r in rows
        for g in r.get("gpus") or []
    ]


def objectives(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each model's P99 objective in ms (None: it has none), in the spec's order. The spec gives
    one per model, so the first row that has one says it."""
    out: dict[str, float | None] = {}
    for r in rows:
        for name, m in (r.get("models") or {}).items():
            if out.get(name) is None:
                out[name] = m.get("slo_p99_ms")
    return out

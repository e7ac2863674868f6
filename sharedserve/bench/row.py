"""``report.json`` as a typed document: its rows as ``summary.build_row`` writes them, read back
by ``documents.parse`` into ``ReportRow`` (and the whole file into ``BenchReport``, whose JSON
Schema ``sharedserve schema report`` prints). Pure.

The writer still builds plain dicts in ``summary.ROW_KEYS`` order, so the file stays exactly as
it was; these types are how readers (``size.profile``, ``bench.verdict``) take a row, by
attribute rather than by string key. Unknown keys are ignored rather than refused: a report is
written by one version of bench and may be read by another. A key a reader needs that an older
report lacks is refused with the command that writes it afresh.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

from sharedserve.documents import json_schema, parse, read_document
from sharedserve.errors import ConfigError

__all__ = [
    "RERUN",
    "BenchReport",
    "ModelFigures",
    "ReplicaFigures",
    "ReportRow",
    "parse_row",
    "parse_rows",
    "read_report",
    "report_schema",
]

_REPORT = ConfigDict(extra="ignore", use_attribute_docstrings=True)

RERUN = "run the `sharedserve profile` or `sharedserve bench` that wrote it again with this version"
"""What to do about a report too old to read."""


@dataclass(frozen=True, config=_REPORT)
class ReplicaFigures:
    """One replica's figures in a row (an entry of ``per_model``)."""

    name: str
    """The replica's target name (``tiny-3``)."""
    requests: int
    """Requests completed in the window, failed ones included."""
    errors: int
    """Of ``requests``, those that failed."""
    model: str | None = None
    """The model it serves."""
    dropped: int | None = None
    """Requests never sent because too many were in flight (open loop only)."""
    qps: float | None = None
    """Completed requests a second."""
    p50_ms: float | None = None
    p99_ms: float | None = None
    cpu_throttled_share: float | None = None
    """Share (0-1) of CFS periods in which its CPU quota ran out; null without a cgroup."""
    cpu_throttled_ms: float | None = None
    """Time its tasks spent throttled in the window, in ms; null without a cgroup."""
    gpu_mem_mib: float | None = None
    """Its peak GPU memory in MiB (NVML); null without a real GPU."""
    gpu_memory_fraction: float | None = None
    """Its GPU memory cap as a share of its GPU; null when uncapped or simulated."""


@dataclass(frozen=True, config=_REPORT)
class ModelFigures:
    """One model over its replicas in a row (a value of ``models``, keyed by its name)."""

    replicas: int
    requests: int
    """Requests completed in the window by its replicas, failed ones included."""
    errors: int
    qps: float
    """Completed requests a second, over its replicas."""
    weight: float = 1.0
    """Its share of traffic."""
    dropped: int | None = None
    """Requests never sent because too many were in flight (open loop only)."""
    p50_ms: float | None = None
    """Over its replicas' requests together (their merged histogram); null without a success."""
    p99_ms: float | None = None
    p999_ms: float | None = None
    slo_p99_ms: float | None = None
    """Its own p99 objective in ms, else the run's; null without one."""
    slo_met: bool | None = None
    """Whether it met its objective; null without one."""
    gpu_memory_fraction: float | None = None
    cpu_limit: float | None = None
    """Its replicas' CPU limit in cores; null without one."""
    cpu_throttled_share: float | None = None
    gpu_mem_mib: float | None = None
    latency_histogram_ms: list[tuple[float, int]] | None = None
    """Its replicas' merged latencies as ``[value_ms, count]`` pairs: what sizing draws service
    times from; null without a success, absent in reports written before it."""

    @property
    def failed(self) -> int:
        """Errors and dropped requests: what counts against its objective."""
        return self.errors + (self.dropped or 0)


@dataclass(frozen=True, config=_REPORT)
class ReportRow:
    """One run of a scale under a pattern (an entry of ``rows``)."""

    density: int
    """Replicas running."""
    pattern: str
    """``sequential``, ``parallel`` or ``poisson``."""
    models: dict[str, ModelFigures]
    """Each model over its replicas, by name."""
    scale: int | None = None
    """Copies of the mix; a sweep of one model's is its density (absent in older reports)."""
    duration_s: float | None = None
    requests: int | None = None
    errors: int | None = None
    dropped: int | None = None
    error_rate: float | None = None
    qps: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    max_ms: float | None = None
    scaling_efficiency: float | None = None
    gpu_name: str | None = None
    """The real GPU the GPU figures are of; null without one."""
    gpu_util_mean: float | None = None
    """GPU utilisation in percent, mean over the window; null without a real GPU."""
    gpu_util_max: float | None = None
    gpu_mem_used_mib: float | None = None
    cpu_util_mean: float | None = None
    """The servers' CPU in cores, mean over the window."""
    loadgen_cpu_util: float | None = None
    """The load generator's busiest process, in cores."""
    unreliable: bool = False
    """Not trustworthy: the load generator was likely the bottleneck (over 80% of a core) or
    sent over 5% of its requests more than 1 ms late (``bench.summary.loadgen_trouble``)."""
    stable: bool | None = None
    """Whether the last windows agreed; null when not judged."""
    late_share: float | None = None
    slo_met: bool | None = None
    windows: list[dict[str, Any]] = Field(default_factory=list)
    gpus: list[dict[str, Any]] | None = None
    per_model: list[ReplicaFigures] = Field(default_factory=list)
    """Each replica."""

    @property
    def scale_or_density(self) -> int:
        """Its scale; a report from before scales has only the density."""
        return self.density if self.scale is None else self.scale


@dataclass(frozen=True, config=_REPORT)
class BenchReport:
    """``report.json``: the rows and what the run was."""

    rows: list[ReportRow]
    recommendation: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None
    partial: bool | None = None
    slo_p99_ms: float | None = None
    settings: dict[str, Any] | None = None
    latency_resolution: Any = None


def parse_row(row: Any, where: str) -> ReportRow:
    """One row read into its type; ConfigError names the row, the model and the key at fault,
    and says what to run again where the report is too old to have it."""
    if not isinstance(row, dict) or not isinstance(row.get("models"), dict):
        raise ConfigError(
            f"{where}: its rows have no per-model figures ('models'); the report predates them: "
            f"{RERUN}"
        )
    try:
        for name, model in row["models"].items():
            parse(ModelFigures, model, where=f"{where}: model {name}")
        return parse(ReportRow, row, where=where)
    except ConfigError as e:
        raise ConfigError(f"a row is not in bench's format: {e.message}; {RERUN}") from None


def parse_rows(report: Any, source: str) -> list[ReportRow]:
    """``report.json``'s rows (``report`` parsed) read into their type."""
    if not isinstance(report, dict) or not isinstance(report.get("rows"), list):
        raise ConfigError(f"{source}: not a bench report (no 'rows' list)")
    rows = report["rows"]
    if not rows:
        raise ConfigError(f"{source}: the report has no rows (was the bench interrupted?)")
    return [parse_row(row, f"{source}: rows[{i}]") for i, row in enumerate(rows)]


def read_report(path: Path) -> BenchReport:
    """A ``report.json`` read into its type; ConfigError says what in it is wrong."""
    data = read_document(path, "report")
    parse_rows(data, str(path))  # the rows first: their errors name the row and the model
    return parse(BenchReport, data, where=str(path))


def report_schema() -> dict[str, Any]:
    """report.json's JSON Schema (``sharedserve schema report``)."""
    return json_schema(BenchReport, "sharedserve bench report (report.json)")

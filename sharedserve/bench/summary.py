"""Report math: one row per (scale, pattern) run and its scaling efficiency (the verdict on the
rows, recommendation and notes, is ``bench.verdict``).

A row is a plain JSON-safe dict because it *is* the ``report.json`` contract; its keys
are listed in ``ROW_KEYS``, ``PER_MODEL_KEYS`` (each replica, ``per_model``) and ``MODEL_KEYS``
(each model over its replicas, ``models``). A model is judged by what its users see: the merged
histogram of its replicas against its own objective. Figures with no data behind them (percentiles
of a run with no successful request, GPU figures without a real GPU) are ``None``, never 0, so a
reader cannot mistake "not measured" for "idle" or "instant".

Pure: standard library, the histogram and ``bench.judging`` (a row's figures in words).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.bench.judging import loadgen_trouble, model_miss
from sharedserve.bench.mix import scale_of
from sharedserve.config import LoadPattern

__all__ = [
    "MODEL_KEYS",
    "PER_MODEL_KEYS",
    "ROW_KEYS",
    "Pattern",
    "Samples",
    "TargetResult",
    "build_row",
    "finalize_rows",
]

ROW_KEYS = (
    "density",
    "scale",
    "pattern",
    "duration_s",
    "requests",
    "errors",
    "dropped",
    "error_rate",
    "qps",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "scaling_efficiency",
    "gpu_name",
    "gpu_util_mean",
    "gpu_util_max",
    "gpu_mem_used_mib",
    "cpu_util_mean",
    "loadgen_cpu_util",
    "unreliable",
    "stable",
    "late_share",
    "slo_met",
    "windows",
    "gpus",
    "models",
    "per_model",
)
"""Every key of a row, in the order reports show them."""

PER_MODEL_KEYS = (
    "name",
    "model",
    "requests",
    "errors",
    "dropped",
    "qps",
    "p50_ms",
    "p99_ms",
    "cpu_throttled_share",
    "cpu_throttled_ms",
    "gpu_mem_mib",
    "gpu_memory_fraction",
)
"""Every key of an entry of a row's ``per_model`` list (one per replica)."""

MODEL_KEYS = (
    "replicas",
    "weight",
    "requests",
    "errors",
    "dropped",
    "qps",
    "p50_ms",
    "p99_ms",
    "p999_ms",
    "slo_p99_ms",
    "slo_met",
    "gpu_memory_fraction",
    "cpu_limit",
    "cpu_throttled_share",
    "gpu_mem_mib",
    "latency_histogram_ms",
)
"""Every key of a value of a row's ``models`` object (one per model, keyed by its name).
``latency_histogram_ms`` is its replicas' merged latencies as at most 65 ``[value_ms, count]``
pairs (``LatencyHistogram.compact_us``), null without a successful request: what a queueing
model draws service times from. Reports from before it lack the key."""


# One enum for the flag, the settings and the rows.
Pattern = LoadPattern


@dataclass(frozen=True)
class TargetResult:
    """What the load generator measured for one model server over the measured window."""

    name: str
    """The target's name (``tiny-3``)."""
    requests: int
    """Requests completed in the window, failed ones included."""
    errors: int
    """Of ``requests``, those that failed (transport error, non-2xx, gRPC error, timeout)."""
    dropped: int
    """Requests never sent because too many were already in flight (open loop only)."""
    histogram: LatencyHistogram
    """Latencies of the successful requests, in microseconds."""
    late: int = 0
    """Of ``requests``, those an open loop sent more than 1 ms after their scheduled time."""
    cpu_throttled_share: float | None = None
    """Share (0-1) of the CFS periods in the window in which the replica's CPU quota ran out
    (``cpu.stat``); None without a cgroup to read."""
    cpu_throttled_ms: float | None = None
    """Time the replica's tasks spent throttled in the window, in ms; None without a cgroup."""
    model: str | None = None
    """The model the replica serves (its spec entry's name); None: the replica is its own."""
    weight: float = 1.0
    """The model's share of traffic, as its spec entry gives it."""
    slo_p99_ms: float | None = None
    """The model's own P99 objective in ms; None: the run's (``build_row``'s ``slo_p99_ms``)."""
    gpu_memory_fraction: float | None = None
    """The replica's GPU memory cap as a share of its GPU; None when uncapped or simulated."""
    cpu_limit: float | None = None
    """The replica's CPU limit in cores; None without one."""
    gpu_mem_mib: int | None = None
    """The replica's peak GPU memory over the window (NVML); None without a real GPU."""

    def __post_init__(self) -> None:
        if not 0 <= self.errors <= self.requests or self.dropped < 0:
            raise ValueError(
                f"target {self.name}: need 0 <= errors <= requests and dropped >= 0, got "
                f"requests={self.requests} errors={self.errors} dropped={self.dropped}"
            )


@dataclass(frozen=True)
class Samples:
    """What the sampler saw over the measured window. Every GPU field is None without a real GPU
    (a simulated inventory is never reported as measured)."""

    gpu_util_mean: float | None
    """GPU utilization in percent (NVML ``utilization.gpu``, 0-100), mean over the window."""
    gpu_util_max: float | None
    """GPU utilization in percent, highest sample in the window."""
    gpu_mem_used_mib: float | None
    """GPU memory in use in MiB (whole device, every process), highest sample in the window."""
    cpu_util_mean: float | None
    """CPU of the model server processes in cores (summed over processes), mean over the window."""


def _ms(micros: float) -> float:
    return round(micros / 1000.0, 3)


def _r3(value: float | None) -> float | None:
    return None if value is None else round(float(value), 3)


def _latencies(hist: LatencyHistogram) -> dict[str, float | None]:
    if hist.count == 0:
        return dict.fromkeys(("p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms"))
    return {
        "p50_ms": _ms(hist.percentile_us(50)),
        "p90_ms": _ms(hist.percentile_us(90)),
        "p99_ms": _ms(hist.percentile_us(99)),
        "p999_ms": _ms(hist.percentile_us(99.9)),
        "max_ms": _ms(hist.max_us),
    }


def _max(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _per_replica(t: TargetResult, window_s: float) -> dict[str, Any]:
    lat = _latencies(t.histogram)
    return {
        "name": t.name,
        "model": t.model or t.name,
        "requests": t.requests,
        "errors": t.errors,
        "dropped": t.dropped,
        "qps": round(t.requests / window_s, 3),
        "p50_ms": lat["p50_ms"],
        "p99_ms": lat["p99_ms"],
        "cpu_throttled_share": _r3(t.cpu_throttled_share),
        "cpu_throttled_ms": _r3(t.cpu_throttled_ms),
        "gpu_mem_mib": t.gpu_mem_mib,
        "gpu_memory_fraction": t.gpu_memory_fraction,
    }


def _per_model(
    targets: list[TargetResult],
    window_s: float,
    slo_p99_ms: float | None,
    max_error_rate: float,
) -> dict[str, dict[str, Any]]:
    """Each model over its replicas, in order of first appearance."""
    groups: dict[str, list[TargetResult]] = {}
    for t in targets:
        groups.setdefault(t.model or t.name, []).append(t)
    models = {}
    for name, replicas in groups.items():
        merged = LatencyHistogram()
        for t in replicas:
            merged.merge(t.histogram)
        lat = _latencies(merged)
        first = replicas[0]
        slo = first.slo_p99_ms if first.slo_p99_ms is not None else slo_p99_ms
        requests = sum(t.requests for t in replicas)
        model: dict[str, Any] = {
            "replicas": len(replicas),
            "weight": first.weight,
            "requests": requests,
            "errors": sum(t.errors for t in replicas),
            "dropped": sum(t.dropped for t in replicas),
            "qps": round(requests / window_s, 3),
            "p50_ms": lat["p50_ms"],
            "p99_ms": lat["p99_ms"],
            "p999_ms": lat["p999_ms"],
            "slo_p99_ms": slo,
            "slo_met": None,
            "gpu_memory_fraction": first.gpu_memory_fraction,
            "cpu_limit": first.cpu_limit,
            "cpu_throttled_share": _r3(_max(t.cpu_throttled_share for t in replicas)),
            "gpu_mem_mib": _max(t.gpu_mem_mib for t in replicas),
            "latency_histogram_ms": [[round(v / 1000, 4), n] for v, n in merged.compact_us()]
            or None,
        }
        if slo is not None:
            model["slo_met"] = model_miss(name, model, slo, max_error_rate) is None
        models[name] = {key: model[key] for key in MODEL_KEYS}
    return models


def build_row(
    *,
    density: int,
    pattern: Pattern,
    window_s: float,
    targets: list[TargetResult],
    samples: Samples,
    loadgen_cpu_util: float | None,
    slo_p99_ms: float | None,
    max_error_rate: float = 0.001,
    gpu_name: str | None = None,
    stable: bool | None = None,
    windows: list[dict[str, Any]] | None = None,
    scale: int | None = None,
    gpus: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One report row for a run of ``density`` replicas at ``scale`` (default: ``density``, a
    sweep of one model) under ``pattern``.

    ``qps`` is throughput: every request completed in the window, failed ones included, per
    second of ``window_s`` (the measured window's length in seconds); dropped requests were never
    sent and are not in it. Row percentiles come from all targets' histograms merged; each model's
    (``models``) from its replicas' histograms merged. A model's ``slo_met`` is None without an
    objective (its own, else ``slo_p99_ms``), else whether its p99 is <= it and its failures
    (errors and dropped requests, over completed plus dropped) are under ``max_error_rate``; the
    row's ``slo_met`` is whether every model with an objective met it (None when none has one).
    ``scaling_efficiency`` is None until ``finalize_rows`` fills it. ``gpu_name`` is the name of
    the real GPU the models ran on, whose figures the GPU columns are; None without one; ``gpus``
    the figures of each real GPU sampled, None without one.
    ``stable`` is whether the measurement's last windows agreed (``bench.windows``), None when
    not judged; ``windows`` is every window's ``{"duration_s", "qps", "p99_ms"}``, the last
    ``--stability-windows`` of them the ones judged and whose figures the row has.
    ``late_share`` (open loop only, else None) is the share of completed requests sent more
    than 1 ms after their scheduled time.
    """
    if density < 1 or window_s <= 0 or not targets:
        raise ValueError(
            f"need density >= 1, window_s > 0 and at least one target, got density={density} "
            f"window_s={window_s} targets={len(targets)}"
        )
    merged = LatencyHistogram()
    for t in targets:
        merged.merge(t.histogram)
    models = _per_model(targets, window_s, slo_p99_ms, max_error_rate)
    judged = [m["slo_met"] for m in models.values() if m["slo_met"] is not None]
    requests = sum(t.requests for t in targets)
    errors = sum(t.errors for t in targets)
    row: dict[str, Any] = {
        "density": density,
        "scale": density if scale is None else scale,
        "pattern": Pattern(pattern).value,
        "duration_s": _r3(window_s),
        "requests": requests,
        "errors": errors,
        "dropped": sum(t.dropped for t in targets),
        "error_rate": round(errors / requests, 6) if requests else None,
        "qps": round(requests / window_s, 3),
        **_latencies(merged),
        "scaling_efficiency": None,
        "gpu_name": gpu_name,
        "gpu_util_mean": _r3(samples.gpu_util_mean),
        "gpu_util_max": _r3(samples.gpu_util_max),
        "gpu_mem_used_mib": _r3(samples.gpu_mem_used_mib),
        "cpu_util_mean": _r3(samples.cpu_util_mean),
        "loadgen_cpu_util": _r3(loadgen_cpu_util),
        "unreliable": False,
        "stable": stable,
        "late_share": (
            round(sum(t.late for t in targets) / requests, 6)
            if Pattern(pattern) is Pattern.POISSON and requests
            else None
        ),
        "slo_met": all(judged) if judged else None,
        "windows": list(windows or []),
        "gpus": None if gpus is None else list(gpus),
        "models": models,
        "per_model": [_per_replica(t, window_s) for t in targets],
    }
    row["unreliable"] = loadgen_trouble(row) is not None
    return {key: row[key] for key in ROW_KEYS}


def finalize_rows(rows: list[dict[str, Any]]) -> None:
    """Fill each row's ``scaling_efficiency``, in place.

    It is ``qps / (scale * qps at scale 1)`` for the same pattern: 1.0 means N copies of the mix
    (N models for a density sweep) get N times the throughput of one, 0.5 that packing halved
    each one's share. None without a scale 1 row of that pattern (or when it served nothing).
    """
    base: dict[str, float] = {}
    for row in rows:
        if scale_of(row) == 1 and row.get("qps") is not None:
            base.setdefault(row["pattern"], row["qps"])
    for row in rows:
        one = base.get(row["pattern"])
        qps = row.get("qps")
        row["scaling_efficiency"] = (
            round(qps / (scale_of(row) * one), 3) if one and qps is not None else None
        )

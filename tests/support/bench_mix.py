"""A bench report of a mix of models, built by hand in the shape ``report.json`` has: tiny x4
(weight 6, SLO 50 ms), mobilenet_v2 x2 (weight 2, 250 ms) and resnet50 x1 (weight 1, 1000 ms) at
scales 1 and 2. resnet50 misses its objective at scale 2, so scale 1 (7 replicas) is recommended.
Nulls where a real run has them: resnet50 has no CPU limit (so no throttling figure), too few
requests at scale 2 for a p99.9, and one GPU's peak utilisation was not sampled.
"""

from __future__ import annotations

from typing import Any

from sharedserve.bench.histogram import LatencyHistogram

SPEC = (  # (model, replicas at scale 1, weight, SLO ms)
    ("tiny", 4, 6.0, 50.0),
    ("mobilenet_v2", 2, 2.0, 250.0),
    ("resnet50", 1, 1.0, 1000.0),
)
_CAP = {"tiny": 0.08, "mobilenet_v2": 0.15, "resnet50": 0.3}
_CPU = {"tiny": 1.0, "mobilenet_v2": 2.0, "resnet50": None}
_FIGURES = {  # (scale, model) -> requests, errors, dropped, qps, p50, p99, p99.9, throttled, MiB
    (1, "tiny"): (24_370, 0, 0, 812.345, 9.871, 31.234, 44.5, 0.031, 612),
    (1, "mobilenet_v2"): (8_124, 0, 0, 270.8, 61.2, 142.87, 201.3, 0.0, 1_480),
    (1, "resnet50"): (4_062, 0, 0, 135.4, 402.1, 688.9, 910.2, None, 3_105),
    (2, "tiny"): (45_327, 2, 0, 1510.9, 14.2, 47.9, 63.0, 0.12, 640),
    (2, "mobilenet_v2"): (14_910, 0, 0, 497.0, 98.6, 231.05, 288.4, 0.05, 1_502),
    (2, "resnet50"): (7_206, 12, 3, 240.2, 744.0, 1530.5, None, None, 3_390),
}
REASON = (
    "scale 1 (7 replicas) is the largest at which every model met its own p99 objective with "
    "< 0.1% errors; scale 2 (14 replicas) missed it: model resnet50 p99 1530.5 ms (all 2 "
    "replicas) > 1000 ms"
)


def _model(
    scale: int, name: str, replicas: int, weight: float, slo: float, gpu: bool
) -> dict[str, Any]:
    requests, errors, dropped, qps, p50, p99, p999, throttled, mib = _FIGURES[scale, name]
    return {
        "replicas": replicas * scale, "weight": weight, "requests": requests, "errors": errors,
        "dropped": dropped, "qps": qps, "p50_ms": p50, "p99_ms": p99, "p999_ms": p999,
        "slo_p99_ms": slo, "slo_met": p99 <= slo,
        "gpu_memory_fraction": _CAP[name] if gpu else None, "cpu_limit": _CPU[name],
        "cpu_throttled_share": throttled, "gpu_mem_mib": mib if gpu else None,
    }  # fmt: skip


def _replicas(name: str, model: dict[str, Any]) -> list[dict[str, Any]]:
    n = model["replicas"]
    return [
        {
            "name": f"{name}-{i}", "model": name, "requests": model["requests"] // n,
            "errors": model["errors"] // n, "dropped": model["dropped"] // n,
            "qps": round(model["qps"] / n, 3), "p50_ms": model["p50_ms"],
            "p99_ms": round(model["p99_ms"] * (1 + 0.01 * i), 3),
            "cpu_throttled_share": model["cpu_throttled_share"],
            "cpu_throttled_ms": None if model["cpu_throttled_share"] is None else 120.5 * (i + 1),
            "gpu_mem_mib": model["gpu_mem_mib"],
            "gpu_memory_fraction": model["gpu_memory_fraction"],
        }
        for i in range(n)
    ]  # fmt: skip


def _gpus(scale: int) -> list[dict[str, Any]]:
    return [
        {"uuid": "GPU-8f2c6a1e-3b7d-4c0a-9e51-2d6f7a8b9c01", "name": "NVIDIA H100 80GB HBM3",
         "util_mean": 38.2 * scale, "util_max": 71.5 + scale, "mem_used_mib": 6120.0 * scale},
        {"uuid": "GPU-1a7e0b2c-5d4f-4e3a-8b6c-7d9e0f1a2b34", "name": "NVIDIA H100 80GB HBM3",
         "util_mean": 12.4 * scale, "util_max": None, "mem_used_mib": 3105.0 * scale},
    ]  # fmt: skip


def mix_rows(*, gpu: bool = True) -> list[dict[str, Any]]:
    """The two rows (scales 1 and 2); ``gpu``: measured on real GPUs, else simulated ones."""
    out = []
    for scale in (1, 2):
        models = {name: _model(scale, name, n, w, slo, gpu) for name, n, w, slo in SPEC}
        requests = sum(m["requests"] for m in models.values())
        errors = sum(m["errors"] for m in models.values())
        out.append({
            "density": 7 * scale, "scale": scale, "pattern": "poisson", "duration_s": 30.0,
            "requests": requests, "errors": errors,
            "dropped": sum(m["dropped"] for m in models.values()),
            "error_rate": round(errors / requests, 5), "qps": round(requests / 30.0, 3),
            "p50_ms": 21.4 * scale, "p90_ms": 180.2 * scale, "p99_ms": 640.7 * scale,
            "p999_ms": 905.3 * scale, "max_ms": 1211.0 * scale,
            "scaling_efficiency": 1.0 if scale == 1 else 0.921,
            "gpu_name": "NVIDIA H100 80GB HBM3" if gpu else None,
            "gpu_util_mean": 25.3 * scale if gpu else None,
            "gpu_util_max": 71.5 + scale if gpu else None,
            "gpu_mem_used_mib": 9225.0 * scale if gpu else None,
            "cpu_util_mean": 3.1 * scale, "loadgen_cpu_util": 0.21 * scale, "unreliable": False,
            "stable": True, "late_share": 0.001,
            "slo_met": all(m["slo_met"] for m in models.values()),
            "windows": [], "gpus": _gpus(scale) if gpu else None, "models": models,
            "per_model": [r for name, m in models.items() for r in _replicas(name, m)],
        })  # fmt: skip
    return out


def mix_report(*, gpu: bool = True, partial: bool = False) -> dict[str, Any]:
    return {
        "rows": mix_rows(gpu=gpu),
        "recommendation": {
            "scale": 1, "density": 7, "reason": REASON, "failing_model": "resnet50",
        },
        "environment": {"cpu": "AMD EPYC 7B13 64-Core Processor", "cpu_count": 128,
                        "command": "sharedserve bench --spec examples/mix.yaml --scales 1,2"},
        "partial": partial,
        "slo_p99_ms": None,
        "settings": {"pattern": "poisson", "rate": 200.0, "protocol": "rest", "duration_s": 30.0,
                     "scales": [1, 2], "spec": "examples/mix.yaml"},
        "latency_resolution": LatencyHistogram.RESOLUTION,
    }  # fmt: skip

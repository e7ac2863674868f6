"""``size --verify plan/gpu-007.yaml``: run one GPU's share of a plan here and hold the plan to it.

The GPU's pack spec goes through ``bench --spec`` at scale 1, open loop (Poisson), with the total
rate the plan gives that GPU's replicas: each entry's ``weight`` is its planned requests/s, so
``bench.offered`` hands every replica exactly its planned rate. The plan's predictions (its
``plan.json`` beside the spec) are then set against what was measured, model by model: QPS, p99
(the plan's prediction for that GPU, beside its neighbours there) and whether each objective
held. No second measuring code: this is ``bench``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sharedserve.bench.sweep import run_bench
from sharedserve.config import BenchSettings, LoadPattern, PackSettings
from sharedserve.errors import ConfigError
from sharedserve.pack.spec import load_spec
from sharedserve.size.plan import Plan, read_plan, spec_index

__all__ = ["compare", "gpu_predictions", "verify_gpu"]


def _plan_beside(spec: Path) -> Plan:
    path = spec.parent / "plan.json"
    if not path.is_file():
        raise ConfigError(f"no plan beside {spec}: {path} is not a file")
    return read_plan(path)


def gpu_predictions(plan: Plan, spec: Path) -> dict[str, float]:
    """The p99 the plan predicts for each model on the GPU whose spec is ``spec``
    (``gpu-007.yaml``: GPU 7), beside its neighbours there; empty if the spec is not one."""
    index = spec_index(spec)
    if index is None or index >= len(plan.gpus):
        return {}
    return {
        r.model: r.predicted_p99_ms
        for r in plan.gpus[index].replicas
        if r.predicted_p99_ms is not None
    }


def compare(
    plan: Plan,
    report: dict[str, Any],
    rates: dict[str, float],
    on_gpu: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Predicted against measured, a line per model of the GPU's share; ``on_gpu``: the
    plan's p99 prediction on that GPU, by model (else the model's own, at its worst GPU)."""
    planned = {m.name: m.predicted_p99_ms for m in plan.models}
    (row,) = report["rows"]
    lines = []
    for name, measured in row["models"].items():
        predicted = (on_gpu or {}).get(name, planned.get(name))
        p99 = measured["p99_ms"]
        lines.append(
            {
                "model": name,
                "replicas": measured["replicas"],
                "planned_qps": round(rates[name], 3),
                "measured_qps": measured["qps"],
                "predicted_p99_ms": predicted,
                "measured_p99_ms": p99,
                "p99_error": None
                if predicted is None or p99 is None or not p99
                else round((predicted - p99) / p99, 3),
                "slo_p99_ms": measured["slo_p99_ms"],
                "slo_met": measured["slo_met"],
                "errors": measured["errors"],
                "dropped": measured["dropped"],
            }
        )
    return lines


def verify_gpu(
    spec_path: Path,
    out_dir: Path,
    *,
    duration_s: float,
    warmup_s: float,
    fake_gpus: Path | None,
    environment: dict[str, str],
    command: tuple[str, ...],
    run: Callable[[BenchSettings], dict[str, Any]] = run_bench,
) -> dict[str, Any]:
    """Run the spec's share at its planned rates; write ``verify.json`` and the bench report in
    ``out_dir``; return ``{"spec", "models": [compare's lines], "held"}``."""
    plan = _plan_beside(spec_path)
    spec = load_spec(spec_path)
    rates: dict[str, float] = {}
    for e in spec.entries:  # a shared server's models each at their own planned rate
        held = [(m.name or m.model_dir.name, m.weight) for m in e.models]
        rates.update(held or [(e.name or e.model_dir.name, e.weight)])
    settings = BenchSettings(
        out_dir=out_dir,
        scales=(1,),
        pack=PackSettings(entries=spec.entries, fake_gpus=fake_gpus, environment=environment),
        spec_file=spec_path,
        pattern=LoadPattern.POISSON,
        rate=sum(rates.values()),
        # Enough in flight that a slow replica's queue shows in its p99, not in drops.
        max_in_flight=1000,
        duration_s=duration_s,
        warmup_s=warmup_s,
        command=command,
    )
    report = run(settings)  # the CLI's stops in order on SIGINT and SIGTERM
    lines = compare(plan, report, rates, gpu_predictions(plan, spec_path))
    result = {
        "spec": str(spec_path),
        "models": lines,
        "held": all(line["slo_met"] for line in lines),
        "report": str(out_dir / "report.json"),
    }
    (out_dir / "verify.json").write_text(json.dumps(result, indent=2) + "\n")
    return result

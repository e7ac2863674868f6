"""``size --verify plan/gpu-007.yaml``: run one GPU's share of a plan here and hold the plan to it.

The GPU's pack spec (shared servers included) goes through ``bench --spec`` at scale 1, open loop
(Poisson), with the total rate the plan gives that GPU's replicas: each entry's ``weight`` is its
planned requests/s, so ``bench.offered`` hands every replica exactly its planned rate; over the
protocol the models' profiles were measured with (their reports' settings say it). The plan's
predictions (its ``plan.json`` beside the spec) are then set against what was measured, model by
model: QPS, p50 and p99 (the plan's prediction for that GPU, beside its neighbours there), each
error as ``(predicted - measured) / measured``, and whether each objective held. With
``repeat`` N the started servers are measured N times in a row (bench's ``repeat``, a row each):
each model's ``runs`` and how far they moved from the first (its ``spread_p50``/``spread_p99``),
the errors and objectives of the first run. How far the measurement can be trusted is judged
beside it (``verify.advice``): the bench rows' stability and the load generator's lateness and
CPU, whether the runs repeat, and the host's load average before and after against its cores.
No second measuring code: this is ``bench``. ``verify.json`` records the digest of the
``plan.json`` it judged, by which the plan's pages find the runs of their plan
(``size.plan.pages``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sharedserve.bench.sweep import run_bench
from sharedserve.config import BenchSettings, LoadPattern, PackSettings
from sharedserve.enums import Protocol
from sharedserve.errors import ConfigError
from sharedserve.pack.spec import load_spec
from sharedserve.size.plan import Plan, PlanModel, plan_digest, read_plan, spec_index
from sharedserve.size.verify.advice import advice, conditions, spread

__all__ = ["compare", "gpu_predictions", "profile_protocol", "verify_gpu"]


def _plan_beside(spec: Path) -> Plan:
    path = spec.parent / "plan.json"
    if not path.is_file():
        raise ConfigError(f"no plan beside {spec}: {path} is not a file")
    return read_plan(path)


def gpu_predictions(plan: Plan, spec: Path, figure: str = "predicted_p99_ms") -> dict[str, float]:
    """The p99 (``figure``: or ``predicted_p50_ms``) the plan predicts for each model on the GPU
    whose spec is ``spec`` (``gpu-007.yaml``: GPU 7), beside its neighbours there; empty if the
    spec is not one."""
    index = spec_index(spec)
    if index is None or index >= len(plan.gpus):
        return {}
    return {
        r.model: getattr(r, figure)
        for r in plan.gpus[index].replicas
        if getattr(r, figure) is not None
    }


def profile_protocol(plan: Plan, models: list[str]) -> tuple[Protocol, str]:
    """The protocol the profiles of ``models`` were measured over, and where that was read; REST
    (bench's default) when no profile says. Profiles measured over both: a usage error."""
    found: dict[str, str] = {}
    for m in plan.models:
        path = Path(m.profile)
        if m.name not in models or not path.exists():
            continue
        for report in [path] if path.is_file() else sorted(path.rglob("report.json")):
            try:
                protocol = json.loads(report.read_text())["settings"]["protocol"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            found.setdefault(str(protocol), str(report))
    if len(found) > 1:
        raise ConfigError(
            f"the profiles of this GPU's models were measured over {' and '.join(sorted(found))}; "
            "verify runs one protocol: profile them over one"
        )
    if not found:
        return BenchSettings.protocol, "bench's default: no profile of these models says"
    ((protocol, where),) = found.items()
    try:
        return Protocol(protocol), f"as the profile was measured ({where})"
    except ValueError as e:
        raise ConfigError(f"profile {where} names an unknown protocol {protocol!r}") from e


def _error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or not measured:
        return None
    return round((predicted - measured) / measured, 3)


def _applied(model: PlanModel | None) -> dict[str, Any] | None:
    """The correction the plan had applied to the model's predictions (``size --fleet
    --corrections``), which the next correction composes with; None: none."""
    c = None if model is None else model.correction
    if c is None:
        return None
    return {"p99_factor": c.p99_factor, "p50_factor": c.p50_factor, "source": c.source}


def _run_figures(measured: dict[str, Any]) -> dict[str, Any]:
    """One run's measured QPS, p50 and p99 of a model (its figures in that run's row)."""
    return {
        "measured_qps": measured.get("qps"),
        "measured_p50_ms": measured.get("p50_ms"),
        "measured_p99_ms": measured.get("p99_ms"),
    }


def compare(
    plan: Plan,
    report: dict[str, Any],
    rates: dict[str, float],
    on_gpu: dict[str, float] | None = None,
    p50_on_gpu: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Predicted against measured, a line per model of the GPU's share; ``on_gpu`` and
    ``p50_on_gpu``: the plan's p99 and p50 predictions on that GPU, by model (else the model's
    own, at its worst GPU). Each error is ``(predicted - measured) / measured``, of the first
    run (the report's first row); ``runs`` has every run's (a row each, in order) and
    ``spread_p50``/``spread_p99`` how far they moved from the first (``advice.spread``);
    ``correction`` what the plan had multiplied the prediction by (``size --corrections``
    composes with it)."""
    planned = {m.name: m for m in plan.models}
    first, *_ = rows = report["rows"]
    lines = []
    for name, measured in first["models"].items():
        runs = [_run_figures(row["models"].get(name, {})) for row in rows]
        model = planned.get(name)
        p99 = (on_gpu or {}).get(name, None if model is None else model.predicted_p99_ms)
        p50 = (p50_on_gpu or {}).get(name, None if model is None else model.predicted_p50_ms)
        lines.append(
            {
                "model": name,
                "replicas": measured["replicas"],
                "planned_qps": round(rates[name], 3),
                "measured_qps": measured["qps"],
                "qps_error": _error(rates[name], measured["qps"]),
                "predicted_p50_ms": p50,
                "measured_p50_ms": measured.get("p50_ms"),
                "p50_error": _error(p50, measured.get("p50_ms")),
                "predicted_p99_ms": p99,
                "measured_p99_ms": measured["p99_ms"],
                "p99_error": _error(p99, measured["p99_ms"]),
                "runs": runs,
                "spread_p50": spread([r["measured_p50_ms"] for r in runs]),
                "spread_p99": spread([r["measured_p99_ms"] for r in runs]),
                "prediction_source": None if model is None else model.prediction_source,
                "correction": _applied(model),
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
    repeat: int = 1,
    run: Callable[[BenchSettings], dict[str, Any]] = run_bench,
    cpus: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the spec's share at its planned rates (``repeat`` times in a row on the same started
    servers); write ``verify.json`` and the bench report in ``out_dir``; return what
    ``verify.json`` holds: ``{"spec", "models": [compare's lines], "held", ...}``. ``cpus``: the
    servers' and the load generator's CPUs, ``BenchSettings``' fields (``cli.cpu_settings``)."""
    plan = _plan_beside(spec_path)
    # Read before the run: which plan this verify judges, should the plan be made again meanwhile.
    digest = plan_digest(spec_path.parent / "plan.json")
    spec = load_spec(spec_path)
    rates: dict[str, float] = {}
    for e in spec.entries:  # a shared server's models each at their own planned rate
        held = [(m.name or m.model_dir.name, m.weight) for m in e.models]
        rates.update(held or [(e.name or e.model_dir.name, e.weight)])
    protocol, protocol_source = profile_protocol(plan, list(rates))
    settings = BenchSettings(
        out_dir=out_dir,
        scales=(1,),
        pack=PackSettings(entries=spec.entries, fake_gpus=fake_gpus, environment=environment),
        spec_file=spec_path,
        pattern=LoadPattern.POISSON,
        protocol=protocol,
        rate=sum(rates.values()),
        # Enough in flight that a slow replica's queue shows in its p99, not in drops.
        max_in_flight=1000,
        duration_s=duration_s,
        warmup_s=warmup_s,
        repeat=repeat,
        command=command,
        **(cpus or {}),
    )
    before = load_average()
    report = run(settings)  # the CLI's stops in order on SIGINT and SIGTERM
    after = load_average()
    lines = compare(
        plan,
        report,
        rates,
        gpu_predictions(plan, spec_path),
        gpu_predictions(plan, spec_path, "predicted_p50_ms"),
    )
    measured = conditions(report["rows"], before, after, os.cpu_count() or 1, duration_s)
    result = {
        "spec": str(spec_path),
        "plan_digest": digest,
        "repeat": len(report["rows"]),
        "protocol": protocol.value,
        "protocol_source": protocol_source,
        "models": lines,
        "held": all(line["slo_met"] for line in lines),
        "report": str(out_dir / "report.json"),
        "conditions": measured,
        **advice(lines, measured),
    }
    (out_dir / "verify.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def load_average() -> float | None:
    """The host's 1-minute load average; None where the system has none."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None

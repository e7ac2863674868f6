"""profile: fleet sizing on a GPU: profiles, a plan from them, and one GPU's share run at its rates.

``sharedserve profile`` of the torch ``tiny`` and ``mobilenet_v2`` on the GPU (densities 1 and
4, sequential and parallel, and its open-loop row; one core per replica; REST, as ``size
--verify`` measures), then
``sharedserve size`` on ``examples/fleet.yaml``'s models, and two cold ones beside them (``tiny``
again at a few requests a second, ``COLD``), with the GPU the stage sees in place of the
example's, and ``sharedserve size --verify`` of the GPU holding the plan's shared server on that
GPU. The checks: every profile carries NVML memory and the plan no CPU-profile warning, the plan
keeps its own limits (memory, busy share, densities measured, processes not model entries), the
cold models share a server, and the verified share, the server's process included, is served at
its planned rates without errors, every planned P99 objective holding: a plan is only as good as
its verify, so a missed objective is a FAIL. Verify measures twice in a row on the same servers
(``--repeat 2``) with the load generator on CPUs of its own (bench's default pinning); then one
correction round: ``size --corrections`` from that verify, and the corrected plan's GPU verified
again, where every model's p99 should be within ``CORRECTED_P99`` of what is measured.
"""

# minutes: 4
# order: 32

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# Run as a script, this file is the `profile` module of its own process (stages/ is sys.path[0]),
# shadowing the standard library's: nothing the stage imports uses that one (cProfile would).

import kit
import plan_checks
import plan_report
import replicas

from sharedserve.config import CONTEXT_RESERVE_MIB

EXAMPLE_FLEET = Path(__file__).resolve().parents[3] / "examples" / "fleet.yaml"
MODELS = ("tiny", "mobilenet_v2")  # the models the example fleet serves
COLD = ("tiny-cold-a", "tiny-cold-b")
"""Fleet models served from tiny's profile and files at COLD_QPS: cold, so size gathers them into
one shared server (of one densest, as copies of one profile are), which verify then runs."""
COLD_QPS, COLD_SLO_MS = 20.0, 500.0
DENSITIES = [1, 4]  # alone and shared: two points keep the stage in the sweep's call
FLOOR_MIB = 1024  # the least cap per replica worth profiling
RESERVE_MIB = CONTEXT_RESERVE_MIB  # pack's --context-reserve-mib default
DURATION, WARMUP = 3.0, 2.0
CONCURRENCY = 4
CPU_LIMIT = 1
VERIFY_DURATION, VERIFY_WARMUP = 15.0, 3.0
VERIFY_REPEAT = 2
CORRECTED_P99 = 0.10
"""After one correction round (``size --corrections``), every verified model's p99 within this
share of what is measured."""

# A dry run measures this CPU under a full test suite: the example's objectives are a GPU's, so
# it holds tiny to a loose one (the code path, not the figures).
DRY_RUN_DEMAND = {"slo_p99_ms": 2000}


def main() -> None:
    stage = kit.Stage.from_argv("profile", "Fleet sizing: profiles, a plan, one GPU's share")
    gpu = stage.gpu()
    if stage.dry_run:
        # One model at one density (two replicas) and second-long windows: each density costs a
        # pack's start, and this dry run is part of every test run.
        names, densities, duration, warmup, concurrency = ["tiny"], [2], 1.0, 0.5, 2
        verify_duration, verify_warmup = 1.5, 0.5
    else:
        names, duration, warmup, concurrency = list(MODELS), DURATION, WARMUP, CONCURRENCY
        densities = replicas.feasible_densities(DENSITIES, gpu.memory_mib, RESERVE_MIB, FLOOR_MIB)
        verify_duration, verify_warmup = VERIFY_DURATION, VERIFY_WARMUP
    stage.results = {
        "gpu": gpu.uuid,
        "settings": {
            "models": names,
            "densities": densities,
            "duration_s": duration,
            "warmup_s": warmup,
            "concurrency": concurrency,
            "cpu_limit": CPU_LIMIT,
            "protocol": "rest",
            "verify_duration_s": verify_duration,
            "verify_warmup_s": verify_warmup,
            # Twice in a row on the same servers: how far a measurement repeats is the least
            # error a prediction can be checked to. One on a dry run: the plumbing is the same.
            "verify_repeat": 1 if stage.dry_run else VERIFY_REPEAT,
        },
        "seconds": {},
    }
    models = replicas.build_models(names, stage.work / "models")
    if not run_profiles(stage, models):
        stage.finish()
        return
    fleet = write_fleet(stage, gpu, models)
    if not run_size(stage, fleet, stage.work / "plan"):
        stage.finish()
        return
    spec = shared_gpu_spec(stage)
    if spec is not None and run_verify(stage, stage.work / "plan" / spec, stage.work / "verify"):
        run_correction(stage, fleet)
    stage.finish()


def sharedserve(stage: kit.Stage, step: str, *args: str) -> tuple[int, str]:
    """A sharedserve command, its output in ``WORK/STEP.log`` and its seconds in the results."""
    started = time.time()
    done = replicas.run_logged(replicas.sharedserve(*args), stage.work / f"{step}.log")
    stage.results["seconds"][step] = round(time.time() - started, 1)
    return done


def fake_gpus(stage: kit.Stage) -> tuple[str, ...]:
    return ("--fake-gpus", str(stage.fake_gpus)) if stage.fake_gpus else ()


def run_profiles(stage: kit.Stage, models: Path) -> bool:
    """``sharedserve profile`` of every model, as the README's "Sizing a fleet" runs it."""
    settings = stage.results["settings"]
    stage.results["profiles"] = {}
    failed = []
    for name in settings["models"]:
        out = stage.work / "profiles" / name
        code, tail = sharedserve(
            stage,
            f"profile-{name}",
            *("profile", "--model", str(models / name), "--out", str(out)),
            *("--densities", ",".join(map(str, settings["densities"]))),
            *("--duration", f"{settings['duration_s']:g}", "--warmup", f"{settings['warmup_s']:g}"),
            # Windows of a few seconds would judge noise; and size never uses an unstable row,
            # so a profile of nothing but such rows could not be sized at all.
            *("--stability-windows", "1", "--concurrency", str(settings["concurrency"])),
            *("--cpu-limit", str(settings["cpu_limit"]), *fake_gpus(stage)),
        )
        reports = [out / pattern / "report.json" for pattern in ("sequential", "parallel")]
        if code != 0 or not all(r.is_file() for r in reports):
            failed.append(f"{name}: exit {code}; its log ends: {tail[-300:]}")
            continue
        stage.results["profiles"][name] = plan_checks.profile_rows(name, reports)
        stage.finish(partial=True)  # cut off at the command's limit, the profiles so far survive
    stage.check(
        "a profile of every model (sequential and parallel reports)",
        not failed,
        "; ".join(failed)
        or f"{', '.join(settings['models'])} at densities {settings['densities']}",
    )
    if not failed:
        plan_report.describe_profiles(stage)
    return not failed


def run_size(stage: kit.Stage, fleet: Path, out: Path) -> bool:
    """``sharedserve size`` of the fleet: the plan, judged against its own limits."""
    stage.results["fleet"] = yaml.safe_load(fleet.read_text())
    code, tail = sharedserve(stage, "size", "size", "--fleet", str(fleet), "--out", str(out))
    stage.check(
        "size planned the fleet", code == 0, f"exit {code}" + (f": {tail[-300:]}" if code else "")
    )
    if code != 0:
        return False
    plan: dict[str, Any] = json.loads((out / "plan.json").read_text())
    # The results are committed: the plan's warnings name profiles by their path in WORK.
    plan["warnings"] = [w.replace(f"{stage.work}/", "") for w in plan["warnings"]]
    stage.results["plan"] = plan_checks.summarize_plan(plan)
    plan_checks.judge_plan(stage, plan)
    plan_report.describe_plan(stage)
    stage.finish(partial=True)
    return True


def shared_gpu_spec(stage: kit.Stage) -> str | None:
    """The pack spec of the GPU holding the plan's first shared server's first replica."""
    plan = stage.results["plan"]
    cold = {m["name"]: m for m in plan["models"] if m["name"] in COLD}
    servers = plan["servers"]
    stage.check(
        "the cold models share a server (servers: in its GPU's pack spec)",
        bool(servers) and all(m["serving"] == "shared" for m in cold.values()),
        "; ".join(f"{n}: {m['serving']} ({m['serving_reason']})" for n, m in cold.items()),
    )
    if not servers or not plan["pack_specs"]:
        return None
    return str(plan["pack_specs"][servers[0]["gpus"][0]])


def verify(stage: kit.Stage, step: str, spec: Path, out: Path) -> dict[str, Any] | None:
    """``sharedserve size --verify`` of one GPU's share, here, at its planned rates (the load
    generator on CPUs of its own, bench's default): what the stage keeps of it; None when it
    did not run."""
    settings = stage.results["settings"]
    code, tail = sharedserve(
        stage,
        step,
        *("size", "--verify", str(spec), "--out", str(out)),
        *("--repeat", str(settings["verify_repeat"])),
        *("--duration", f"{settings['verify_duration_s']:g}"),
        *("--warmup", f"{settings['verify_warmup_s']:g}", *fake_gpus(stage)),
    )
    # Exit 1 is an objective that did not hold, which verify.json says; anything else failed.
    if code not in (0, 1) or not (out / "verify.json").is_file():
        detail = f"exit {code}; its log ends: {tail[-300:]}"
        stage.check(f"size --verify ran ({step})", False, detail)
        return None
    result = json.loads((out / "verify.json").read_text())
    report = json.loads((out / "report.json").read_text())
    row = report["rows"][0]
    pinned = {k: report["settings"].get(k) for k in ("server_cpus", "loadgen_cpus", "cpu_pinning")}
    return {
        "spec": spec.name,
        "held": result["held"],
        "trustworthy": result.get("trustworthy"),
        "verdict": result.get("verdict"),
        "repeat_spread": result.get("repeat_spread"),
        "conditions": result["conditions"],
        **pinned,
        "models": result["models"],
        **{k: row.get(k) for k in ("gpu_util_mean", "gpu_util_max", "gpu_mem_used_mib", "gpus")},
    }


def run_verify(stage: kit.Stage, spec: Path, out: Path) -> bool:
    """The plan's GPU verified, judged and described; False when verify did not run."""
    settings = stage.results["settings"]
    kept = verify(stage, "verify", spec, out)
    if kept is None:
        return False
    stage.results["verify"] = kept
    plan_checks.judge_verify(stage, kept, settings["verify_duration_s"])
    if stage.dry_run:
        profiled = [r for rows in stage.results["profiles"].values() for r in rows]
        stage.check(
            "no GPU figure on a simulated GPU",
            all(r["gpu_util_mean"] is None and r["gpu_mem_mib"] is None for r in profiled)
            and all(m["nvml_memory_mib"] is None for m in stage.results["plan"]["models"])
            and kept["gpus"] is None
            and kept["gpu_util_mean"] is None,
            "GPU columns null in the profiles, the plan and the verify",
        )
    plan_report.describe_verify(stage)
    return True


def run_correction(stage: kit.Stage, fleet: Path) -> None:
    """One round of the correction loop: ``size --corrections`` from the verify, then the GPU
    holding the corrected plan's shared server (else its first) verified again; every model's
    p99 there should now be within ``CORRECTED_P99`` of what is measured."""
    first = stage.results["verify"]
    if first["trustworthy"] is False:
        # size refuses to correct from a measurement it cannot trust. On a GPU that is a
        # failure of the run; a dry run shares a CPU with the whole test suite, and says so.
        stage.check(
            "the verify was trustworthy, to correct from",
            None if stage.dry_run else False,
            f"{first['verdict']}" + (" (a dry run on a busy CPU)" if stage.dry_run else ""),
        )
        return
    out = stage.work / "plan-corrected"
    code, tail = sharedserve(
        stage,
        "size-corrected",
        *("size", "--fleet", str(fleet), "--out", str(out)),
        *("--corrections", str(stage.work / "verify" / "verify.json")),
    )
    stage.check(
        "size planned again from the verify (--corrections)",
        code == 0,
        f"exit {code}" + (f": {tail[-300:]}" if code else ""),
    )
    if code != 0:
        return
    plan = json.loads((out / "plan.json").read_text())
    corrected = {m["name"]: m["correction"] for m in plan["models"] if m.get("correction")}
    stage.check(
        "the corrected plan names each verified model's correction",
        set(corrected) >= {m["model"] for m in stage.results["verify"]["models"]},
        ", ".join(
            f"{name}: p99 x{c['p99_factor']:.3g}, p50 x{c['p50_factor']:.3g}"
            for name, c in corrected.items()
        )
        or "none",
    )
    servers = plan["servers"]
    index = servers[0]["gpus"][0] if servers else 0
    kept = verify(stage, "verify-corrected", out / plan["pack_specs"][index], out / "verify")
    if kept is None:
        return
    stage.results["corrected"] = {"corrections": corrected, "verify": kept}
    plan_report.describe_correction(stage)
    off = [
        f"{m['model']}: predicted {m['predicted_p99_ms']} ms, measured {m['measured_p99_ms']} ms"
        f" ({m['p99_error']:+.0%})"
        for m in kept["models"]
        if m["p99_error"] is None or abs(m["p99_error"]) > CORRECTED_P99
    ]
    stage.gpu_check(
        f"after one correction round, every model's p99 within {CORRECTED_P99:.0%} of measured",
        not off and bool(kept["models"]),
        "; ".join(off) or ", ".join(f"{m['model']} {m['p99_error']:+.0%}" for m in kept["models"]),
    )


def write_fleet(stage: kit.Stage, gpu: Any, models: Path) -> Path:
    """``examples/fleet.yaml`` with this stage's GPU, profiles and models (paths relative to the
    fleet file, as the example's are)."""
    path, profiles = stage.work / "fleet.yaml", stage.work / "profiles"
    names = stage.results["settings"]["models"]
    fleet = yaml.safe_load(EXAMPLE_FLEET.read_text())
    fleet["gpu"] |= {"name": gpu.name, "memory_mib": gpu.memory_mib}
    entries = {m["name"]: m for m in fleet["models"]}
    missing = set(names) - set(entries)
    if missing:
        raise SystemExit(f"{EXAMPLE_FLEET} no longer serves {', '.join(sorted(missing))}")
    fleet["models"] = []
    for name in names:
        entry = entries[name] | {
            "profile": os.path.relpath(profiles / name, path.parent),
            "model": os.path.relpath(models / name, path.parent),
        }
        fleet["models"].append(entry | (DRY_RUN_DEMAND if stage.dry_run else {}))
    tiny = fleet["models"][names.index("tiny")]
    for name in COLD:
        fleet["models"].append(
            tiny
            | {"name": name, "profile_model": "tiny", "peak_qps": COLD_QPS, "min_replicas": 2}
            | {"slo_p99_ms": max(COLD_SLO_MS, tiny["slo_p99_ms"])}
        )
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    return path


if __name__ == "__main__":
    main()

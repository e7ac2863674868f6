"""A plan's predictions against measurements: mixes profiled, sized, verified and corrected
through the CLI as a user would (``profile`` -> ``size --fleet`` -> ``size --verify --repeat 2``
-> ``size --fleet --corrections`` -> ``size --verify --repeat 2``).

The three architectures (tiny, mobilenet_v2, resnet50, random weights) are built and profiled
here into a work directory (``sharedserve profile``, one core a replica, densities 1 and 2, its
open-loop row at density 1, and one open-loop row beside each other architecture, ``--beside``,
each neighbour at ``BESIDE_RATE``). Each mix is a fleet of named models drawing on those
profiles (``profile_model``), each name its own copy of the files; the mixes were fixed before
any tuning of the predictions:

- **small-and-many**: four small models at modest rates (they gather in a shared server);
- **large with small neighbours**: resnet50 beside two small models;
- **hot beside cold**: a busy small model beside cold ones (a small one and mobilenet_v2);
- and, reported apart, ``HELD_OUT``: written down before any tuning, never used for it.

Every measurement keeps the load generator off the servers' CPUs (bench's default pinning: on
this 2-core host the servers on CPU 0, the load generator on CPU 1), so each fleet is sized for
a "GPU" of the servers' CPUs, min_replicas 2 so each GPU holds a replica of every model. GPU 0's
share is run at its planned rates twice in a row on the same servers (``--repeat 2``): how far
the second moves from the first is how far a measurement repeats here, the least error a
prediction can be checked to. Then one correction round: the fleet planned again from that
verify (``--corrections``) and its GPU 0 verified the same way. Nothing here is a GPU figure:
busy shares come from CPU throughput.

    .venv/bin/python benchmarks/sizing_verify_cpu.py --out benchmarks/results/sizing_verify_cpu.md
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import heading, publish  # benchmarks/machine.py, beside this script

from sharedserve.limits.affinity import split_cpus, usable_cpus
from sharedserve.size.profile import load_profiles
from sharedserve.size.verify import BUSY_BEFORE, TARGETS, TARGETS_TEXT
from sharedserve.size.verify.advice import REPEAT_TARGETS

SHAREDSERVE = [sys.executable, "-m", "sharedserve"]
PACKAGES = ("sharedserve", "tensorflow", "locust")
# Seconds a profile row: a slow model longer, for the hundred requests a row needs to be used
# (size/profile.py) and a service-time histogram with a tail (resnet50: ~110 ms a call here).
# Long enough that the open-loop row (a tenth to a quarter of the sequential rate) holds 150
# requests of a slow model and some 2,000 of tiny: its tail is the prediction's tail.
ARCHITECTURES = {"tiny": 20.0, "mobilenet_v2": 30.0, "resnet50": 70.0}
# Each neighbour a profile measures a model beside, at about 15% of a core: tiny's ~1 ms,
# mobilenet_v2's ~40 ms and resnet50's ~110 ms calls alone (the sequential rows of the committed
# run before this one). A rule for every model, not a mix's rates.
BESIDE_RATE = {"tiny": 150.0, "mobilenet_v2": 4.0, "resnet50": 1.5}
# mix -> name -> (architecture, peak QPS over both replicas, p99 objective ms)
MIXES: dict[str, dict[str, tuple[str, float, float]]] = {
    "small-and-many": {
        "small-a": ("tiny", 60, 50), "small-b": ("tiny", 40, 50),
        "small-c": ("tiny", 20, 50), "small-d": ("tiny", 10, 50),
    },
    "large with small neighbours": {
        "large": ("resnet50", 3, 1000), "small-a": ("tiny", 40, 50), "small-b": ("tiny", 20, 50),
    },
    "hot beside cold": {
        "hot": ("tiny", 400, 50), "cold-mobilenet": ("mobilenet_v2", 2, 500),
        "cold-small": ("tiny", 10, 50),
    },
}  # fmt: skip
# Written down before the predictor was tuned against the three above, and never used while
# tuning it: reported apart, it says how the predictor does on a mix it was not fitted to.
HELD_OUT: dict[str, dict[str, tuple[str, float, float]]] = {
    "held out: mid with small neighbours": {
        "mid": ("mobilenet_v2", 8, 500), "small-x": ("tiny", 80, 50),
        "small-y": ("tiny", 30, 50),
    },
}  # fmt: skip


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SHAREDSERVE, *args], check=False, capture_output=True, text=True)


def _profile(work: Path, scale: float) -> None:
    out = _run("models", "build", *ARCHITECTURES, "--out", str(work / "built"))
    if out.returncode:
        sys.exit(out.stderr)
    for name, seconds in ARCHITECTURES.items():
        if (work / "profiles" / name / "poisson" / "report.json").is_file():
            continue  # --work with this profile made before
        beside = []
        for other in ARCHITECTURES:
            if other != name:
                beside += ["--beside", str(work / "built" / other)]
                beside += ["--beside-rate", f"{BESIDE_RATE[other]:g}"]
        duration = seconds * scale
        out = _run("profile", "--model", str(work / "built" / name),
                   "--out", str(work / "profiles" / name), "--densities", "1,2",
                   "--duration", f"{duration:g}", "--warmup", "2", "--stability-windows", "1",
                   "--cpu-limit", "1", *beside)  # fmt: skip
        if out.returncode:
            sys.exit(out.stderr)


def _service_rows(work: Path) -> list[str]:
    """Per architecture, the row size takes its service times from, the density-1 p50 of the
    open-loop and sequential rows (what the open loop costs a request), and where each side of
    its measurements ran."""
    lines = []
    for name in ARCHITECTURES:
        profile = load_profiles(work / "profiles" / name)[name]
        p50 = {p.pattern: p.p50_ms for p in profile.points if p.density == 1}
        requests = {
            p.pattern: sum(p.service_times.counts) if p.service_times else 0
            for p in profile.points
            if p.density == 1
        }
        report = json.loads((work / "profiles" / name / "poisson" / "report.json").read_text())
        (row,) = report["rows"]
        settings = report["settings"]
        lines.append(
            f"- {name}: service times from {profile.service_times_source}; density-1 p50 "
            f"{p50.get('sequential')} ms sequential, {p50.get('poisson')} ms open loop "
            f"({requests.get('poisson', 0)} requests, {row['late_share']:.1%} sent late; servers "
            f"on CPU {settings['server_cpus']}, load generator on {settings['loadgen_cpus']})"
        )
    return lines


def _fleet(work: Path, mix: str, models: dict[str, tuple[str, float, float]]) -> Path:
    # The "GPU" is the servers' CPUs: the load generator has its own.
    split = split_cpus("auto", "auto", usable_cpus())
    cores = len(split.servers) if split.servers else os.cpu_count() or 1
    lines = [
        "gpu: {name: CPU host, memory_mib: 16384, price_per_hour: 1.0}",
        f"node: {{gpus: 1, cpu_cores: {cores}}}",
        "utilization_target: 0.8",
        "models:",
    ]
    here = work / mix.replace(" ", "-").replace(":", "")
    shutil.rmtree(here, ignore_errors=True)
    for name, (arch, peak, slo) in models.items():
        files = here / "models" / name
        shutil.copytree(work / "built" / arch, files)
        lines.append(
            f"  - {{name: {name}, profile: {work / 'profiles' / arch}, profile_model: {arch}, "
            f"model: {files}, peak_qps: {peak}, slo_p99_ms: {slo}}}"
        )
    here.mkdir(parents=True, exist_ok=True)
    (here / "fleet.yaml").write_text("\n".join(lines) + "\n")
    return here


def _error(value: float | None, target: float) -> str:
    if value is None:
        return "—"
    return f"{value:+.0%}" + ("" if abs(value) <= target else " ✗")


def _change(first: float | None, again: float | None, target: float) -> str:
    if first is None or again is None or not first:
        return "—"
    moved = (again - first) / first
    return f"{again:g} ({moved:+.0%}{'' if abs(moved) <= target else ' ✗'})"


def _table(plan: dict[str, Any], verified: dict[str, Any]) -> list[str]:
    planned = {m["name"]: m for m in plan["models"]}
    lines = [
        "| model | serving | QPS planned | measured | error | p50 predicted ms | measured "
        "| error | p99 predicted ms | measured | error | objective ms | held | targets met "
        "| again: p50 ms | again: p99 ms | interference from |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in verified["models"]:
        p = planned[m["model"]]
        again = m["runs"][-1]  # the second run, on the same servers
        serving = p["server"] if p["serving"] == "shared" else "dedicated"
        targets = {True: "yes", False: "no", None: "not judged"}[m["within_targets"]]
        lines.append(
            f"| {m['model']} | {serving} | {m['planned_qps']:g} | {m['measured_qps']:g} "
            f"| {_error(m['qps_error'], TARGETS['qps'])} | {m['predicted_p50_ms']} "
            f"| {m['measured_p50_ms']} | {_error(m['p50_error'], TARGETS['p50'])} "
            f"| {m['predicted_p99_ms']} | {m['measured_p99_ms']} "
            f"| {_error(m['p99_error'], TARGETS['p99'])} | {m['slo_p99_ms']:g} "
            f"| {'yes' if m['slo_met'] else 'NO'} | {targets} "
            f"| {_change(m['measured_p50_ms'], again['measured_p50_ms'], REPEAT_TARGETS['p50'])} "
            f"| {_change(m['measured_p99_ms'], again['measured_p99_ms'], REPEAT_TARGETS['p99'])} "
            f"| {_interference(p)} |"
        )
    return lines


def _interference(model: dict[str, Any]) -> str:
    """Where the plan took the model's neighbours' interference from, in a few words."""
    text = model.get("prediction_error") or ""
    for key in ("measured beside", "assumes no interference", "copies of itself"):
        if key in text:
            start = text.index(key)
            return text[start : text.find(";", start) if ";" in text[start:] else None]
    return "—"


def _corrected(plan: dict[str, Any], verified: dict[str, Any]) -> list[str]:
    """After the correction round: each model's factor and the p99 error measured again."""
    planned = {m["name"]: m for m in plan["models"]}
    lines = [
        "| model | p99 factor | p50 factor | re-planned | p99 predicted ms | measured "
        "| error (target ±10%) | again: p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in verified["models"]:
        c = planned[m["model"]].get("correction") or {}
        error = m["p99_error"]
        mark = "—" if error is None else f"{error:+.0%}" + ("" if abs(error) <= 0.10 else " ✗")
        lines.append(
            f"| {m['model']} | {c.get('p99_factor', '—')} | {c.get('p50_factor', '—')} "
            f"| {'yes' if c.get('replanned') else 'no'} | {m['predicted_p99_ms']} "
            f"| {m['measured_p99_ms']} | {mark} "
            f"| {_change(m['measured_p99_ms'], m['runs'][-1]['measured_p99_ms'], 0.10)} |"
        )
    return lines


def _mix(
    work: Path, mix: str, models: dict[str, tuple[str, float, float]], duration: float,
    warmup: float,
) -> tuple[list[str], dict[str, Any]]:  # fmt: skip
    here = _fleet(work, mix, models)
    fleet, plan_dir = here / "fleet.yaml", here / "plan"
    out = _run("size", "--fleet", str(fleet), "--out", str(plan_dir))
    if out.returncode:
        sys.exit(out.stderr)
    verified = _verify(plan_dir, duration, warmup)
    plan = json.loads((plan_dir / "plan.json").read_text())
    # One correction round from that verify, the corrected plan's GPU 0 verified the same way.
    corrected_dir = here / "plan-corrected"
    out = _run("size", "--fleet", str(fleet), "--out", str(corrected_dir),
               "--corrections", str(plan_dir / "verify-gpu-000" / "verify.json"))  # fmt: skip
    if out.returncode and verified["trustworthy"] is not False:
        sys.exit(out.stderr)
    gpu = plan["gpus"][0]
    held = ", ".join(sorted({r["server"] or r["model"] for r in gpu["replicas"]}))
    spread = verified["repeat_spread"]
    lines = [
        f"## {mix}",
        "",
        f'The plan: {plan["gpu_count"]} "GPUs"; GPU 0 holds {held} (processes). Measured: '
        f"{_conditions(verified)} on {verified['conditions']['cores']} cores.",
        "",
        *_table(plan, verified),
        "",
        *(f"- (!) {flag}" for flag in verified["flags"]),
        f"- Verdict: {verified['verdict']}.",
        f"- Measured again at once on the same servers (the `again` columns): p50 moved by "
        f"up to {spread['p50'] or 0:.0%} and p99 by up to {spread['p99'] or 0:.0%} between "
        f"the two runs (targets: p50 within {REPEAT_TARGETS['p50']:.0%}, p99 within "
        f"{REPEAT_TARGETS['p99']:.0%}).",
        "",
    ]
    if out.returncode:  # size refuses to correct from a measurement it cannot trust
        lines += [f"No correction round: `size --corrections` refused, {out.stderr.strip()}", ""]
        return lines, {"first": verified, "corrected": None}
    again = _verify(corrected_dir, duration, warmup)
    corrected = json.loads((corrected_dir / "plan.json").read_text())
    lines += [
        f"After one correction round (`size --corrections` from that verify; the corrected plan "
        f"has {corrected['gpu_count']} GPUs; its GPU 0 measured: {_conditions(again)}):",
        "",
        *_corrected(corrected, again),
        "",
        f"- Verdict: {again['verdict']}.",
        "",
    ]
    return lines, {"first": verified, "corrected": again}


def _verify(plan_dir: Path, duration: float, warmup: float) -> dict[str, Any]:
    # The load average lags: let what ran before (the profiles, the last mix) fade, or verify
    # flags this host as busy with the benchmark's own work.
    deadline = time.monotonic() + 45
    while os.getloadavg()[0] > BUSY_BEFORE * (os.cpu_count() or 1) and time.monotonic() < deadline:
        time.sleep(3)
    verify = _run("size", "--verify", str(plan_dir / "gpu-000.yaml"), "--repeat", "2",
                  "--duration", f"{duration:g}", "--warmup", f"{warmup:g}")  # fmt: skip
    if verify.returncode not in (0, 1):
        sys.exit(verify.stderr)
    result: dict[str, Any] = json.loads((plan_dir / "verify-gpu-000" / "verify.json").read_text())
    return result


def _conditions(verified: dict[str, Any]) -> str:
    c = verified["conditions"]
    late = "—" if c["late_share"] is None else f"{c['late_share']:.1%}"
    return (
        f"{'stable' if c['stable'] else 'NOT stable'}, {late} sent late, load "
        f"average {c['load_before']} before and {c['load_after']} after"
    )


def _summary(results: dict[str, dict[str, Any]]) -> list[str]:
    """Each target against every model of the mixes it covers."""

    def worst(names: list[str], run: str, key: str) -> str:
        """The largest |error| over the mixes' trustworthy verifies (how many were not)."""
        runs = [results[n][run] for n in names if results[n][run] is not None]
        kept = [r for r in runs if r["trustworthy"] is not False]
        errors = [abs(m[key]) for r in kept for m in r["models"] if m[key] is not None]
        left = len(names) - len(kept)
        return (f"{max(errors):.0%}" if errors else "—") + (f" ({left} not judged)" if left else "")

    def spread(names: list[str], run: str, key: str) -> str:
        values = [results[n][run]["repeat_spread"][key] or 0 for n in names]
        return f"{max(values, default=0):.0%}"

    tuned, held = list(MIXES), list(HELD_OUT)
    return [
        "| target | three mixes | held out |",
        "|---|---|---|",
        f"| measurements repeat: p50 within 5% (largest move) | {spread(tuned, 'first', 'p50')} "
        f"| {spread(held, 'first', 'p50')} |",
        f"| measurements repeat: p99 within 10% | {spread(tuned, 'first', 'p99')} "
        f"| {spread(held, 'first', 'p99')} |",
        f"| before correction: p50 within 15% (largest error) | "
        f"{worst(tuned, 'first', 'p50_error')} | {worst(held, 'first', 'p50_error')} |",
        f"| before correction: p99 within 25% | {worst(tuned, 'first', 'p99_error')} "
        f"| {worst(held, 'first', 'p99_error')} |",
        f"| after one correction round: p99 within 10% | "
        f"{worst(tuned, 'corrected', 'p99_error')} | {worst(held, 'corrected', 'p99_error')} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--profile-scale", type=float, default=1.0,
                        help="times each model's profile row seconds")  # fmt: skip
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the models and profiles here (reused when there)")  # fmt: skip
    parser.add_argument("--mixes", default=None,
                        help="only these mixes (comma-separated), for a quick look")  # fmt: skip
    args = parser.parse_args()
    began, load = time.monotonic(), os.getloadavg()[0]
    everything = {**MIXES, **HELD_OUT}
    chosen = list(everything) if args.mixes is None else args.mixes.split(",")
    results: dict[str, dict[str, Any]] = {}
    sections: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        _profile(work, args.profile_scale)
        service = _service_rows(work)
        for mix in chosen:
            lines, results[mix] = _mix(work, mix, everything[mix], args.duration, args.warmup)
            sections += lines
    took = (time.monotonic() - began) / 60
    summary = _summary(results) if set(results) == set(everything) else []
    lines = [
        *heading("Sizing: predicted against measured on this CPU, four mixes", PACKAGES),
        "",
        "Profiles: `sharedserve profile` at densities 1 and 2, its open-loop row at density 1 "
        "and one open-loop row beside each other architecture (`--beside`, the neighbour at "
        + ", ".join(f"{n} {r:g}/s" for n, r in BESIDE_RATE.items())
        + "), one core a replica, of "
        + ", ".join(f"{n} ({s * args.profile_scale:g} s a row)" for n, s in ARCHITECTURES.items())
        + ". The load generator on a CPU of its own throughout (bench's default pinning). Each "
        "mix sized with `size --fleet` and GPU 0 verified with `size --verify plan/gpu-000.yaml "
        f"--repeat 2 --duration {args.duration:g} --warmup {args.warmup:g}` (open loop, each "
        "model at its planned rate, measured twice in a row on the same servers); then planned "
        "again with `--corrections` from that verify and verified the same way. Error is "
        "(predicted - measured) / measured: negative, the plan was optimistic. "
        f"Targets: {TARGETS_TEXT} (✗: missed). The load average "
        f"was {load:.2f} when the benchmark began; the run took {took:.1f} minutes.",
        "",
        *service,
        "",
        *summary,
        "",
        *sections,
    ]
    publish("\n".join(lines), args.out)


if __name__ == "__main__":
    main()

"""What a ``size --verify`` run means and what to do next, in words. Pure.

A verify run is one measurement on one host. Before its errors say anything about the plan, the
measurement has to be one to trust, so it is judged on what bench already records and on the
host's load:

- **unstable**: the bench row's last windows never agreed within 10% on QPS and p99
  (``stable`` false): the figures are those of a moving target.
- **the load generator lagged**: more than ``LATE_SHARE`` of the requests were sent over 1 ms
  after their scheduled time (``late_share``), or its CPU was the limit (``unreliable``): its
  own delay is in the latencies.
- **a contended host**: the 1-minute load average before the run above ``BUSY_BEFORE`` of the
  cores (something else was running), or after it above the cores (processes queued for a CPU:
  the run's own replicas and load generator count here too, so this says the share was more
  than the host could run at once).

Then each model's errors against the targets (``TARGETS``), each error
``(predicted - measured) / measured``: negative, the plan was optimistic (it promised less
latency, or more QPS, than was measured); positive, pessimistic.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BUSY_BEFORE",
    "LATE_SHARE",
    "MEANING",
    "TARGETS",
    "TARGETS_TEXT",
    "advice",
    "conditions",
]

TARGETS = {"qps": 0.05, "p50": 0.15, "p99": 0.25}
"""The most |error| each figure may show for the plan to count as predicted."""
LATE_SHARE = 0.01
"""Requests sent late (over 1 ms after schedule) above this share: the load generator lagged."""
BUSY_BEFORE = 0.35
"""A 1-minute load average above this share of the cores before the run: the host was busy."""

TARGETS_TEXT = ", ".join(
    f"{'QPS' if figure == 'qps' else figure} within {target:.0%}"
    for figure, target in TARGETS.items()
)
"""``TARGETS`` in words: "QPS within 5%, p50 within 15%, p99 within 25%"."""

MEANING = (
    "planned/predicted: the plan's figures for this GPU (plan.json); measured: this run's. "
    "error = (predicted - measured) / measured: negative means the plan was optimistic "
    f"(promised lower latency or more QPS than measured), positive pessimistic. Targets: "
    f"{TARGETS_TEXT}."
)


def conditions(
    row: dict[str, Any],
    load_before: float | None,
    load_after: float | None,
    cores: int,
    duration_s: float,
) -> dict[str, Any]:
    """How the measurement went: the bench row's own verdicts and the host's load."""
    return {
        "stable": row.get("stable"),
        "late_share": row.get("late_share"),
        "loadgen_cpu_util": row.get("loadgen_cpu_util"),
        "loadgen_limited": bool(row.get("unreliable")),
        "load_before": None if load_before is None else round(load_before, 2),
        "load_after": None if load_after is None else round(load_after, 2),
        "cores": cores,
        "duration_s": duration_s,
    }


def _flags(c: dict[str, Any]) -> list[str]:
    flags = []
    if c["stable"] is False:
        flags.append(
            "UNSTABLE: the run's last windows never agreed within 10% on QPS and p99; its "
            "figures are a moving target"
        )
    late = c["late_share"]
    if late is not None and late > LATE_SHARE:
        flags.append(
            f"LOAD GENERATOR LATE: {late:.1%} of requests were sent over 1 ms after their "
            "schedule; that delay is in the measured latencies"
        )
    if c["loadgen_limited"]:
        flags.append(
            f"LOAD GENERATOR CPU-BOUND ({c['loadgen_cpu_util']:.0%}): it, not the server, may "
            "be the limit"
        )
    cores, before, after = c["cores"], c["load_before"], c["load_after"]
    if before is not None and before > BUSY_BEFORE * cores:
        flags.append(
            f"BUSY HOST: load average {before:g} on {cores} cores before the run: other work "
            "took CPU from the servers"
        )
    if after is not None and after > cores:
        flags.append(
            f"CONTENDED HOST: load average {after:g} on {cores} cores after the run: processes "
            "waited for a CPU during it"
        )
    return flags


def _missed(line: dict[str, Any]) -> list[str]:
    out = []
    for figure, target in TARGETS.items():
        error = line[f"{figure}_error"]
        if error is not None and abs(error) > target:
            side = "optimistic" if error < 0 else "pessimistic"
            out.append(f"{figure} {error:+.0%} ({side})")
    return out


def advice(lines: list[dict[str, Any]], c: dict[str, Any]) -> dict[str, Any]:
    """The flags on the measurement, each model's misses of the targets, and the next steps."""
    flags = _flags(c)
    misses = {line["model"]: _missed(line) for line in lines}
    for line in lines:
        line["within_targets"] = not misses[line["model"]]
    steps = []
    if flags:
        steps.append(
            "re-run on a quiet host (load average near 0 before it) with a longer --duration "
            f"(say {max(120, 2 * c['duration_s']):g} s) before reading the errors: this "
            "measurement is not one to judge the plan by"
        )
    carried = 1 - TARGETS["qps"]
    short = [ln["model"] for ln in lines if ln["measured_qps"] < ln["planned_qps"] * carried
             and (ln["dropped"] or ln["errors"])]  # fmt: skip
    if short:
        steps.append(
            f"{', '.join(short)} did not carry the planned rate (drops or errors): raise its "
            "replicas (a lower peak_qps per replica or utilization_target in the fleet file)"
        )
    missed_slo = [ln["model"] for ln in lines if ln["slo_met"] is False]
    if missed_slo:
        steps.append(
            f"{', '.join(missed_slo)} missed its objective: raise its replicas, or relax "
            "slo_p99_ms if the objective was tighter than the service needs"
        )
    optimistic = [m for m, missed in misses.items() if any("optimistic" in x for x in missed)]
    if optimistic and not flags:
        steps.append(
            f"the plan was optimistic for {', '.join(optimistic)} on a quiet run: re-profile "
            "them (sharedserve profile, beside the neighbours they are planned with, over the "
            "protocol served) and re-size, or raise their replicas"
        )
    pessimistic = [m for m, missed in misses.items() if missed and m not in optimistic]
    if pessimistic and not flags:
        steps.append(
            f"the plan was pessimistic for {', '.join(pessimistic)}: safe, but it may hold "
            "more GPUs than needed; a longer profile tightens it"
        )
    if not steps:
        steps.append("none: every figure is within its target and the run was clean")
    return {
        "meaning": MEANING,
        "targets": TARGETS,
        "within_targets": all(not m for m in misses.values()),
        "flags": flags,
        "next_steps": steps,
    }

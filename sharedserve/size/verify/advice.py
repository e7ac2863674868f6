"""What a ``size --verify`` run means and what to do next, in words. Pure.

A verify run is one measurement on one host (or, with ``--repeat N``, N in a row on the same
servers). Before its errors say anything about the plan, the measurement has to be one to trust,
so it is judged on what bench already records and on the host's load:

- **unstable**: a bench row's last windows never agreed within 10% on QPS and p99
  (``stable`` false): the figures are those of a moving target.
- **the load generator lagged**: more than ``LATE_LIMIT`` of a run's requests were sent over
  1 ms after their scheduled time (``late_share``), or its CPU was the limit (above bench's
  ``LOADGEN_CPU_LIMIT`` of a core): its own delay is in the latencies.

Any of those and the measurement is **not trustworthy**: no verdict on the targets is given
(``within_targets`` null, ``verdict`` says why). Beside them, flagged with a re-run advised but
not disqualifying:

- **a contended host**: the 1-minute load average before the run above ``BUSY_BEFORE`` of the
  cores (something else was running), or after it above the cores (processes queued for a CPU:
  the run's own replicas and load generator count here too, so this says the share was more
  than the host could run at once).
- **a measurement that does not repeat**: with several runs, a model's p50 or p99 moved from
  the first run's by more than ``REPEAT_TARGETS`` (``spread``): an error against the plan
  smaller than that says nothing.

Then each model's errors against the targets (``TARGETS``), each error
``(predicted - measured) / measured``: negative, the plan was optimistic (it promised less
latency, or more QPS, than was measured); positive, pessimistic.
"""

from __future__ import annotations

from typing import Any

from sharedserve.bench.judging import LATE_LIMIT, LOADGEN_CPU_LIMIT

__all__ = [
    "BUSY_BEFORE",
    "LATE_LIMIT",
    "MEANING",
    "REPEAT_TARGETS",
    "TARGETS",
    "TARGETS_TEXT",
    "advice",
    "conditions",
    "repeat_spread",
    "spread",
]

TARGETS = {"qps": 0.05, "p50": 0.15, "p99": 0.25}
"""The most |error| each figure may show for the plan to count as predicted."""
REPEAT_TARGETS = {"p50": 0.05, "p99": 0.10}
"""The most a figure may move between runs of one verify for the measurement to repeat."""
BUSY_BEFORE = 0.35
"""A 1-minute load average above this share of the cores before the run: the host was busy."""

TARGETS_TEXT = ", ".join(
    f"{'QPS' if figure == 'qps' else figure} within {target:.0%}"
    for figure, target in TARGETS.items()
)
"""``TARGETS`` in words: "QPS within 5%, p50 within 15%, p99 within 25%"."""

MEANING = (
    "planned/predicted: the plan's figures for this GPU (plan.json); measured: this run's (the "
    "first, with --repeat). "
    "error = (predicted - measured) / measured: negative means the plan was optimistic "
    f"(promised lower latency or more QPS than measured), positive pessimistic. Targets: "
    f"{TARGETS_TEXT}."
)


def spread(values: list[float | None]) -> float | None:
    """How far the runs moved from the first: the largest ``|run_i - run_1| / run_1``, rounded
    to 0.1%; None with fewer than two runs, or where a run has no figure (or the first is 0)."""
    if len(values) < 2 or any(v is None for v in values) or not values[0]:
        return None
    first = values[0]
    return round(max(abs(v - first) / first for v in values[1:] if v is not None), 3)


def repeat_spread(lines: list[dict[str, Any]]) -> dict[str, float | None]:
    """The largest spread of p50 and of p99 over the models (``spread_p50``, ``spread_p99``);
    None where no model has one (a single run)."""
    out: dict[str, float | None] = {}
    for figure in REPEAT_TARGETS:
        spreads = [ln[f"spread_{figure}"] for ln in lines if ln.get(f"spread_{figure}") is not None]
        out[figure] = max(spreads, default=None)
    return out


def _worst(values: list[Any]) -> Any:
    """The highest of the values given; None if none is."""
    return max((v for v in values if v is not None), default=None)


def conditions(
    rows: list[dict[str, Any]],
    load_before: float | None,
    load_after: float | None,
    cores: int,
    duration_s: float,
) -> dict[str, Any]:
    """How the measurement went, its runs' bench rows (one per run) taken at their worst: not
    stable if one was not, the latest load generator, the busiest; and the host's load."""
    stable = [r.get("stable") for r in rows]
    return {
        "stable": False if False in stable else True if all(stable) else None,
        "late_share": _worst([r.get("late_share") for r in rows]),
        "loadgen_cpu_util": _worst([r.get("loadgen_cpu_util") for r in rows]),
        # From its CPU, not the row's ``unreliable``, which may say more than the CPU: this flag
        # names the CPU, and lateness is judged apart (``LATE_LIMIT``).
        "loadgen_limited": any(
            r.get("loadgen_cpu_util") is not None and r["loadgen_cpu_util"] > LOADGEN_CPU_LIMIT
            for r in rows
        ),
        "load_before": None if load_before is None else round(load_before, 2),
        "load_after": None if load_after is None else round(load_after, 2),
        "cores": cores,
        "duration_s": duration_s,
    }


def _untrusted(c: dict[str, Any]) -> list[tuple[str, str]]:
    """What makes the measurement not one to trust: ``(flag, reason)`` each, the flag as the
    run prints it, the reason as the verdict says it."""
    out = []
    if c["stable"] is False:
        out.append(
            (
                "UNSTABLE: a run's last windows never agreed within 10% on QPS and p99; its "
                "figures are a moving target",
                "unstable",
            )
        )
    late = c["late_share"]
    if late is not None and late > LATE_LIMIT:
        out.append(
            (
                f"LOAD GENERATOR LATE: {late:.1%} of a run's requests were sent over 1 ms after "
                "their schedule; that delay is in the measured latencies",
                f"the load generator sent {late:.1%} of a run's requests late "
                f"(over {LATE_LIMIT:.0%})",
            )
        )
    if c["loadgen_limited"]:
        out.append(
            (
                f"LOAD GENERATOR CPU-BOUND ({c['loadgen_cpu_util']:.0%}): it, not the server, may "
                "be the limit",
                "the load generator was CPU-bound",
            )
        )
    return out


def _host(c: dict[str, Any]) -> list[str]:
    flags = []
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


def _repeats(spreads: dict[str, float | None]) -> bool | None:
    """Whether the runs agreed within ``REPEAT_TARGETS``; None with no spread (one run)."""
    known = {f: v for f, v in spreads.items() if v is not None}
    if not known:
        return None
    return all(v <= REPEAT_TARGETS[f] for f, v in known.items())


def _repeat_flag(spreads: dict[str, float | None]) -> list[str]:
    moved = [f"{f} by {v:.0%} ({REPEAT_TARGETS[f]:.0%} at most to repeat)"
             for f, v in spreads.items() if v is not None and v > REPEAT_TARGETS[f]]  # fmt: skip
    if not moved:
        return []
    return [
        f"DOES NOT REPEAT: on the same servers, a later run moved a model's "
        f"{' and its '.join(moved)} from the first run's; errors against the plan smaller than "
        "that say nothing"
    ]


def _missed(line: dict[str, Any]) -> list[str]:
    out = []
    for figure, target in TARGETS.items():
        error = line[f"{figure}_error"]
        if error is not None and abs(error) > target:
            side = "optimistic" if error < 0 else "pessimistic"
            out.append(f"{figure} {error:+.0%} ({side})")
    return out


def _verdict(trustworthy: bool, untrusted: list[str], misses: dict[str, list[str]]) -> str:
    if not trustworthy:
        return f"not trustworthy: {'; '.join(untrusted)}"
    missed = [f"{model} {', '.join(m)}" for model, m in misses.items() if m]
    if not missed:
        return f"within targets: every figure of every model ({TARGETS_TEXT})"
    return f"NOT within targets: {'; '.join(missed)}"


def advice(lines: list[dict[str, Any]], c: dict[str, Any]) -> dict[str, Any]:
    """The flags on the measurement, whether it repeats and can be trusted, each model's misses
    of the targets (none judged on a measurement not to trust), and the next steps."""
    untrusted = _untrusted(c)
    trustworthy = not untrusted
    spreads = repeat_spread(lines)
    flags = [f for f, _ in untrusted] + _host(c) + _repeat_flag(spreads)
    misses = {line["model"]: _missed(line) for line in lines}
    for line in lines:
        line["within_targets"] = not misses[line["model"]] if trustworthy else None
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
        "repeat_targets": REPEAT_TARGETS,
        "repeat_spread": spreads,
        "repeats": _repeats(spreads),
        "trustworthy": trustworthy,
        "within_targets": all(not m for m in misses.values()) if trustworthy else None,
        "verdict": _verdict(trustworthy, [r for _, r in untrusted], misses),
        "flags": flags,
        "next_steps": steps,
    }

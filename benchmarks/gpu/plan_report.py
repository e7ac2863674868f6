"""The profile stage's Markdown: its profiles, its plan (shared servers included) and its verify,
from the stage's results. Its own module so the stage keeps to the sizing and the checks."""

from __future__ import annotations

import kit

__all__ = ["describe_plan", "describe_profiles", "describe_verify"]


def describe_profiles(stage: kit.Stage) -> None:
    settings = stage.results["settings"]
    table = [
        [name, *(r[k] for k in ("pattern", "density", "qps", "p99_ms", "stable")),
         r["gpu_util_mean"], r["gpu_mem_mib"]]
        for name, rows in stage.results["profiles"].items()
        for r in rows
    ]  # fmt: skip
    stage.section(
        f"`sharedserve profile` per model: densities {settings['densities']}, "
        f"{settings['warmup_s']:g} s warm-up and {settings['duration_s']:g} s measured per "
        f"density and pattern, {settings['concurrency']} users per replica in the parallel "
        f"sweep, {settings['cpu_limit']} core per replica, REST. GPU % is the mean utilisation, "
        "peak MiB the NVML peak of the model's highest replica.",
        "",
        *kit.markdown_table(
            ["model", "pattern", "density", "QPS", "p99 ms", "stable", "GPU %", "peak MiB"], table
        ),
    )


def describe_plan(stage: kit.Stage) -> None:
    plan = stage.results["plan"]
    models = [
        [m["name"], m["server"] or "dedicated", m["replicas"], m["capacity_qps_per_replica"],
         m["predicted_p99_ms"],
         m["slo_p99_ms"], f"{m['gpu_memory_mib']:g} ({m['gpu_memory_source']})",
         f"{m['busy_share']:.3f} ({m['busy_source']})", m["max_density"]]
        for m in plan["models"]
    ]  # fmt: skip
    gpus = [
        [g["index"], ", ".join(f"{n} x{c}" for n, c in g["replicas"].items()), g["processes"],
         g["memory_used_mib"], g["busy_share"]]
        for g in plan["gpus"]
    ]  # fmt: skip
    servers = [
        [s["name"], s["replicas"], ", ".join(s["models"]), s["gpu_memory_mib"],
         s["host_memory_mib"], ", ".join(s["paged"]) or "-"]
        for s in plan["servers"]
    ]  # fmt: skip
    heads = ["model", "serving", "replicas", "QPS / replica", "predicted p99 ms", "objective ms",
             "memory MiB (source)", "busy share (source)", "densest"]  # fmt: skip
    stage.section(
        f"`sharedserve size` on examples/fleet.yaml's models on {plan['gpu']['name']} "
        f"({plan['gpu']['memory_mib']} MiB): **{plan['gpu_count']} GPUs** (lower bound "
        f"{plan['lower_bound_gpus']}, {plan['above_bound']}x it); one replica per GPU would "
        f"take {plan['baseline_gpu_count']} (saving factor {plan['saving_factor']}x), a process "
        f"per replica {plan['process_per_replica_gpu_count']}.",
        *(f"- warning: {w}" for w in plan["warnings"]),
        "",
        *kit.markdown_table(heads, models),
        "",
        *kit.markdown_table(["GPU", "replicas", "processes", "memory MiB", "busy share"], gpus),
        "",
        "Shared servers (each replica one process holding its models):",
        "",
        *kit.markdown_table(
            ["server", "replicas", "models", "memory MiB", "host MiB", "paged"], servers
        ),
    )


def describe_verify(stage: kit.Stage) -> None:
    settings, verify = stage.results["settings"], stage.results["verify"]
    table = [
        [m["model"], m["replicas"], m["planned_qps"], m["measured_qps"], m["predicted_p99_ms"],
         m["measured_p99_ms"], m["slo_p99_ms"], "yes" if m["slo_met"] else "NO", m["errors"]]
        for m in verify["models"]
    ]  # fmt: skip
    heads = ["model", "replicas", "planned QPS", "measured QPS", "predicted p99 ms",
             "measured p99 ms", "objective ms", "held", "errors"]  # fmt: skip
    stage.section(
        f"`sharedserve size --verify {verify['spec']}`: {settings['verify_warmup_s']:g} s "
        f"warm-up, {settings['verify_duration_s']:g} s measured, open loop at the planned rates; "
        + (
            "no GPU figures (simulated GPU)."
            if verify["gpus"] is None
            else f"GPU utilisation {verify['gpu_util_mean']} % (mean), "
            f"{verify['gpu_mem_used_mib']} MiB used."
        ),
        "",
        *kit.markdown_table(heads, table),
    )


def describe_correction(stage: kit.Stage) -> None:
    """The correction round: each model's factors, and the corrected plan's GPU verified."""
    corrected = stage.results["corrected"]
    verify = corrected["verify"]
    table = [
        [m["model"], m["predicted_p99_ms"], m["measured_p99_ms"],
         "-" if m["p99_error"] is None else f"{m['p99_error']:+.0%}",
         "-" if m.get("spread_p99") is None else f"{m['spread_p99']:.0%}"]
        for m in verify["models"]
    ]  # fmt: skip
    factors = ", ".join(
        f"{name} p99 x{c['p99_factor']:.3g}" for name, c in corrected["corrections"].items()
    )
    stage.section(
        f"`sharedserve size --corrections` from that verify ({factors or 'nothing corrected'}), "
        f"then `size --verify {verify['spec']}` of the corrected plan; servers on CPUs "
        f"{verify['server_cpus'] or 'any'}, the load generator on {verify['loadgen_cpus'] or 'any'}"
        f"; {verify['verdict'] or ''}.",
        "",
        *kit.markdown_table(
            ["model", "predicted p99 ms", "measured p99 ms", "error", "repeat spread"], table
        ),
    )

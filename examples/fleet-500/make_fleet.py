"""Write examples/fleet-500/fleet.yaml: 500 models drawn from the three committed profiles.

Run from the checkout (the committed fleet.yaml is its output; the same seed gives the same file):

    .venv/bin/python examples/fleet-500/make_fleet.py

Spread like a real fleet: half small tabular models, a third mobile-sized vision models, the rest
ResNet-50-sized; peak rates log-normal around a fraction of what one replica sustains (most
models need only their two replicas for availability, a few need dozens); objectives from the
usual tiers (25 ms to 2 s), never tighter than twice the best p99 the profile measured, so that
every model can be planned; a tenth of the models keep three replicas.
"""

from __future__ import annotations

import random
from pathlib import Path

from sharedserve.size.profile import load_profiles

HERE = Path(__file__).parent
SEED = 500
MODELS = 500
# profile (and model directory) -> (name prefix, share of the fleet, median peak as a share of
# one replica's best QPS)
FAMILIES = {
    "tiny": ("tabular", 0.5, 0.4),
    "mobilenet_v2": ("mobile", 0.3, 0.3),
    "resnet50": ("vision", 0.2, 0.3),
}
TIERS_MS = (25, 50, 100, 250, 500, 1000, 2000)

HEADER = """\
# 500 models drawn from three profiles, for `sharedserve size` (README, "Sizing a fleet").
# Written by make_fleet.py (seed {seed}); edit that, not this file.
#
# The profiles under profiles/ are CPU measurements: `sharedserve profile` on a 2-core machine
# without a GPU. A plan from them says so in its warnings, and sizes a GPU fleet only roughly:
# GPU memory comes from the models' files and busy shares from CPU throughput. Replace them
# with profiles measured on the GPU you plan for.
"""


def main() -> None:
    rng = random.Random(SEED)
    best = {}
    for name in FAMILIES:
        (profile,) = load_profiles(HERE / "profiles" / name).values()
        trusted = [p for p in profile.points if p.trusted and p.p99_ms and not p.failed_share]
        best[name] = (
            max(p.qps_per_replica for p in trusted),
            min(p.p99_ms for p in trusted if p.p99_ms is not None),
        )
    names = list(FAMILIES)
    counts = {n: 0 for n in names}
    lines = [
        HEADER.format(seed=SEED),
        "gpu: {name: H100-80GB, memory_mib: 81559, price_per_hour: 3.0}",
        "node: {gpus: 8, cpu_cores: 64}",
        "utilization_target: 0.8",
        "models:",
    ]
    for _ in range(MODELS):
        family = rng.choices(names, weights=[FAMILIES[n][1] for n in names])[0]
        prefix, _, median = FAMILIES[family]
        counts[family] += 1
        qps, p99 = best[family]
        peak = round(max(0.1, qps * median * rng.lognormvariate(0, 1.2)), 1)
        tiers = [t for t in TIERS_MS if t >= 2 * p99] or [TIERS_MS[-1]]
        slo = rng.choice(tiers[:4])  # the tighter objectives a team would ask for
        entry = (
            f"  - {{name: {prefix}-{counts[family]:03d}, profile: profiles/{family}, "
            f"profile_model: {family}, model: ../../models/{family}, peak_qps: {peak}, "
            f"slo_p99_ms: {slo}"
        )
        if rng.random() < 0.1:
            entry += ", min_replicas: 3"
        lines.append(entry + "}")
    (HERE / "fleet.yaml").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

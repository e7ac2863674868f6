"""A bench says how long it will take before it starts, and how much is left as it goes.

In process (the CLI's own ``main``) against a stub server: one short step, a real load generator.
Not a terminal here, so the time left comes as a line per step; test_bench_progress (unit) holds
the arithmetic and the terminal's bar is rich's.
"""

from __future__ import annotations

from pathlib import Path

from sharedserve.bench.progress import TARGETS_ALLOWANCE_S, span
from tests.support.cli import invoke


def test_bench_estimates_first_then_says_each_step_and_judges_nothing_without_an_objective(
    stub_targets: Path, tmp_path: Path
) -> None:
    result = invoke(
        "bench", "--targets", str(stub_targets), "--duration", "1", "--warmup", "0.5",
        "--stability-windows", "1", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    total = span(0.5 + 1 + TARGETS_ALLOWANCE_S)
    estimate = (
        f"estimate: about {total} for the running endpoints (each 0.5 s warm-up + 1 s measured "
        f"+ ~{TARGETS_ALLOWANCE_S:g} s to start and stop)"
    )
    step = f"density 1 (step 1 of 1): about {total} left"
    assert estimate in lines and step in lines, result.stderr
    row = next(i for i, ln in enumerate(lines) if ln.startswith("density 1: "))
    # Said before anything is measured: before the step starts, and the step before its row.
    assert lines.index(estimate) < lines.index(step) < row, result.stderr
    # No objective: measured, not judged, and the summary says so rather than "none".
    out = result.stdout.splitlines()
    assert not any(line.startswith("recommendation:") for line in out), result.stdout
    assert (
        "objective: none given; measured, not judged (pass --slo-p99-ms to judge the rows and "
        "recommend one)"
    ) in out, result.stdout

"""A bench says how long it will take before it starts, and how much is left as it goes; and a
bench that cannot run says so before anything else.

In process (the CLI's own ``main``) against a stub server: one short step, a real load generator.
Not a terminal here, so the time left comes as a line per step; test_bench_estimate (unit) holds
the arithmetic and the terminal's bar is rich's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

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
    # What a targets run measures is said once, in the estimate: the servers as they are, not a
    # density (it said "density 5", then "density 3", then "3 replicas" of one run).
    (estimate,) = [ln for ln in lines if ln.startswith("estimate: ")]
    found = re.match(
        r"estimate: about (.+?) for the running endpoints \(1 server, 1 model\) \(0\.5 s "
        r"warm-up \+ 1 s measured \+ ~\d+ s for the load generator and the report\); up to .+",
        estimate,
    )
    assert found, estimate
    step = f"the running endpoints: about {found.group(1)} left"
    assert step in lines, result.stderr
    row = next(
        i for i, ln in enumerate(lines) if ln.startswith("the running endpoints: ") and "qps" in ln
    )
    assert not any("density" in ln or "scale" in ln for ln in lines), result.stderr
    # Said before anything is measured: before the step starts, and the step before its row.
    assert lines.index(estimate) < lines.index(step) < row, result.stderr
    # No objective: measured, not judged, and the summary says so rather than "none".
    out = result.stdout.splitlines()
    assert not any(line.startswith("recommendation:") for line in out), result.stdout
    assert (
        "objective: none given; measured, not judged (pass --slo-p99-ms to judge the rows and "
        "recommend one)"
    ) in out, result.stdout


def test_a_model_or_targets_file_that_is_not_there_is_the_only_thing_said(tmp_path: Path) -> None:
    # It printed the estimate and the first step's line, then the error, and left --out empty.
    out = tmp_path / "out"
    spec = tmp_path / "mix.yaml"
    spec.write_text("models:\n  - {model: " + str(tmp_path / "nope") + ", name: b}\n")
    targets = tmp_path / "targets.json"
    for flags, message in [
        (["--model", str(tmp_path / "nope")], "model directory"),
        (["--spec", str(spec)], f"{spec}: models[0] (b): model: model directory"),
        (["--targets", str(targets)], "targets"),
    ]:
        result = invoke("bench", *flags, "--out", str(out))
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith("error: ") and message in line, result.stderr
        assert result.stdout == ""
        assert not out.exists()
    targets.write_text(json.dumps({"targets": []}))
    assert invoke("bench", "--targets", str(targets), "--out", str(out)).exit_code == 2
    assert not out.exists()

"""``sharedserve bench --spec``: a mix of three models measured at two scales, for real.

Real replicas (TensorFlow tiny and edge, TorchScript tiny) in CPU cgroups on simulated GPUs, real
Locust processes. Each model is given its weight's share of the load and judged against its own
objective; one objective no server can meet names its model in the recommendation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.pack import leaked_pack_cgroups, pack_cgroups, write_pack_spec
from tests.support.servers import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow, pytest.mark.torch]

# The models of test_pack_spec's mix, one replica each at scale 1 (six at scale 2, on two
# cores). edge's 0.001 ms is beyond any server; tiny_torch has no objective: the run's applies.
SPEC = (
    "cpu_limit: 0.5\nmodels:\n"
    "  - {model: MODELS/tiny, name: a, weight: 3, slo_p99_ms: 5000}\n"
    "  - {model: MODELS/edge, weight: 1, slo_p99_ms: 0.001}\n"
    "  - {model: TORCH/tiny, name: tiny_torch, weight: 2}\n"
)


def test_bench_spec_measures_each_model_at_each_scale_and_names_the_one_that_missed(
    models_dir: Path, torch_models_dir: Path, tmp_path: Path
) -> None:
    spec, gpus = write_pack_spec(tmp_path, models_dir, SPEC, torch_models_dir)
    out = tmp_path / "report"
    before = pack_cgroups()
    result = run_cli(
        "bench", "--spec", str(spec), "--scales", "1,2", "--fake-gpus", str(gpus),
        "--pattern", "parallel", "--concurrency", "6", "--duration", "2", "--warmup", "1",
        "--stability-windows", "1", "--slo-p99-ms", "4000", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    rows = report["rows"]
    assert [(r["scale"], r["density"]) for r in rows] == [(1, 3), (2, 6)]
    assert report["settings"]["scales"] == [1, 2] and report["settings"]["spec"] == str(spec)
    for row in rows:
        models = row["models"]
        assert list(models) == ["a", "edge", "tiny_torch"]
        assert all(m["replicas"] == row["scale"] for m in models.values())
        assert sum(m["requests"] for m in models.values()) == row["requests"]
        assert row["errors"] == 0 and all(m["requests"] > 0 for m in models.values())
        assert [m["slo_p99_ms"] for m in models.values()] == [5000.0, 0.001, 4000.0]
        assert [m["slo_met"] for m in models.values()] == [True, False, True]
        assert row["slo_met"] is False
        assert all(m["cpu_limit"] == 0.5 for m in models.values())
        # Simulated GPUs: no cap is reported as enforced, no GPU figure is made up.
        assert all(m["gpu_memory_fraction"] is None for m in models.values())
        assert row["gpus"] is None and row["gpu_util_mean"] is None
        assert {r["model"] for r in row["per_model"]} == set(models)
    # Users split by weight: 3:1:2 of 6 at scale 1, of 12 over twice the replicas at scale 2.
    users = {"a": 3, "edge": 1, "tiny_torch": 2}
    for scale in (1, 2):
        loadgen = json.loads((out / "loadgen" / f"scale-{scale}-spec.json").read_text())
        got: dict[str, list[int]] = {}
        for target in loadgen["targets"]:
            got.setdefault(target["name"].rsplit("-", 1)[0], []).append(target["users"])
        assert got == {model: [count] * scale for model, count in users.items()}
    recommendation = report["recommendation"]
    assert recommendation["scale"] is None and recommendation["failing_model"] == "edge"
    assert "model edge p99" in recommendation["reason"]
    assert "recommendation" in result.stdout and "edge" in result.stdout
    assert leaked_pack_cgroups(before) == set()

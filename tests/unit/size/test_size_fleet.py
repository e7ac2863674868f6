"""The fleet file: what it holds, its defaults, and its errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sharedserve.config import CONTEXT_RESERVE_MIB
from sharedserve.errors import ConfigError
from sharedserve.size.fleet import load_fleet, parse_fleet

FLEET = """\
gpu: {name: H100-80GB, memory_mib: 81559, price_per_hour: 3.0}
node: {gpus: 8, cpu_cores: 64}
utilization_target: 0.8
models:
  - {name: fraud, profile: profiles/fraud/report.json, peak_qps: 200, slo_p99_ms: 100}
  - name: ranker
    profile: profiles/mix/report.json
    profile_model: resnet50
    peak_qps: 35.5
    slo_p99_ms: 250
    min_replicas: 3
    max_replicas_per_gpu: 4
    model: models/ranker
"""


def test_a_fleet_file_as_the_issue_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    fleet = load_fleet(path)
    assert (fleet.gpu.name, fleet.gpu.memory_mib, fleet.gpu.price_per_hour) == (
        "H100-80GB", 81559, 3.0,
    )  # fmt: skip
    assert fleet.gpu.max_gpus is None and (fleet.node.gpus, fleet.node.cpu_cores) == (8, 64.0)
    assert fleet.utilization_target == 0.8 and fleet.context_reserve_mib == CONTEXT_RESERVE_MIB
    fraud, ranker = fleet.models
    # Paths relative to the fleet file; defaults: two replicas, the name in the report.
    assert fraud.profile == tmp_path / "profiles/fraud/report.json"
    assert (fraud.min_replicas, fraud.max_replicas_per_gpu, fraud.in_profile) == (2, None, "fraud")
    assert (ranker.peak_qps, ranker.slo_p99_ms, ranker.min_replicas) == (35.5, 250.0, 3)
    assert ranker.in_profile == "resnet50" and ranker.model == tmp_path / "models/ranker"
    assert fleet.source == path


def base(**models: Any) -> dict[str, Any]:
    model = {"name": "m", "profile": "p.json", "peak_qps": 10, "slo_p99_ms": 50} | models
    return {"gpu": {"name": "T4", "memory_mib": 15360, "price_per_hour": 0.35},
            "node": {"gpus": 4, "cpu_cores": 32}, "models": [model]}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("gpu"), "gpu must be a mapping"),
        (lambda d: d["gpu"].pop("memory_mib"), r"gpu: memory_mib must be .* \(required\)"),
        (lambda d: d["gpu"].update(memory_mib=1.5), "memory_mib must be a positive whole number"),
        (lambda d: d["gpu"].update(price_per_hr=1), "did you mean 'price_per_hour'"),
        (lambda d: d["node"].update(gpus=0), "node: gpus must be a positive whole number, got 0"),
        (lambda d: d.update(utilization_target=1.2), r"utilization_target must be in \(0, 1\]"),
        (lambda d: d.update(models=[]), r"models must be a non-empty list, got \[\]"),
        (lambda d: d["models"][0].pop("peak_qps"), r"models\[0\] \(m\): peak_qps must be"),
        (lambda d: d["models"][0].update(slo_p99_ms=True), "slo_p99_ms must be a positive number"),
        (
            lambda d: d["models"][0].update(min_replicas=0),
            "min_replicas must be a whole number >= 1",
        ),
        (
            lambda d: d["models"][0].update(slo_p99=5),
            "unknown key 'slo_p99'; did you mean 'slo_p99_ms'",
        ),
        (lambda d: d["models"].append(dict(d["models"][0])), "repeated: m"),
        (lambda d: d.update(context_reserve_mib=-1), "context_reserve_mib must be"),
        (
            lambda d: d.update(kubernetes={"vgpus_per_gpu": 4, "vgpu_memory_mib": 1024}),
            "kubernetes: give vgpus_per_gpu or vgpu_memory_mib, not both",
        ),
        (lambda d: d.update(kubernetes={"imag": "x"}), "did you mean 'image'"),
        (lambda d: d.update(kubernetes={"image": ""}), "kubernetes: image must be a non-empty"),
        (
            lambda d: d.update(paging={"page_in_ms": 1500}),
            r"paging: page_in_ms must be a number over 0 and at most 50 \(a device copy: a "
            "page-in that reloads from disk stalls the other models of its process",
        ),
    ],
)
def test_errors_name_the_place_and_the_key(change: Any, message: str) -> None:
    data = base()
    change(data)
    with pytest.raises(ConfigError, match=message):
        parse_fleet(data, base_dir=Path("."))


def test_a_file_that_does_not_parse_says_so(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text("gpu: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_fleet(path)
    with pytest.raises(ConfigError, match="cannot read fleet file"):
        load_fleet(tmp_path / "missing.yaml")


def test_the_old_name_of_vgpus_per_gpu_is_read_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Fleet files written before the allocator's --replicas became --vgpus-per-gpu still plan.
    old = parse_fleet(base() | {"kubernetes": {"replicas_per_gpu": 4}}, base_dir=Path("."))
    assert old.kubernetes.vgpus_per_gpu == 4
    assert "kubernetes.replicas_per_gpu is deprecated" in caplog.text
    both = base() | {"kubernetes": {"replicas_per_gpu": 4, "vgpus_per_gpu": 4}}
    with pytest.raises(ConfigError, match="give vgpus_per_gpu, not both"):
        parse_fleet(both, base_dir=Path("."))

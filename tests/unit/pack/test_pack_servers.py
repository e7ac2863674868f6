"""Shared servers in a pack spec (``servers:``): what each one becomes, and every refusal naming
the key at fault; the model repository a shared server's processes read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sharedserve.config import CapSource, GpuCapRequest, SharedServerModel
from sharedserve.errors import ConfigError
from sharedserve.pack.repository import remove_repository, write_repository
from sharedserve.pack.spec import parse_spec

SERVER: dict[str, Any] = {
    "name": "shared-a",
    "replicas": 2,
    "gpu_memory_mib": 6000,
    "cpu_limit": 1,
    "paging": "lru",
    "models": [
        {"model": "models/tiny", "slo_p99_ms": 50, "weight": 6, "gpu_memory_mib": 500},
        {"model": "models/mobilenet_v2", "name": "mob", "pinned": True, "max_inflight": 64},
    ],
}


def test_a_shared_server_is_one_entry_of_its_models_beside_the_other_entries() -> None:
    spec = {"servers": [SERVER], "models": [{"model": "torch/resnet50", "slo_p99_ms": 1000}]}
    shared, alone = parse_spec(spec, base_dir=Path("/b")).entries
    assert shared.is_shared_server and not alone.is_shared_server
    assert (shared.name, shared.replicas, shared.cpu_limit_cores, shared.paging) == (
        "shared-a",
        2,
        1.0,
        True,
    )
    assert shared.cap == GpuCapRequest.of(CapSource.FLAG, mib=6000)
    assert shared.models == (
        SharedServerModel(Path("/b/models/tiny"), None, 50.0, 6.0, 500, False, None),
        SharedServerModel(Path("/b/models/mobilenet_v2"), "mob", None, 1.0, None, True, 64),
    )
    assert (alone.model_dir, alone.slo_p99_ms) == (Path("/b/torch/resnet50"), 1000.0)


def test_servers_alone_is_a_spec_and_top_level_defaults_leave_shared_servers_alone() -> None:
    spec = {"cpu_limit": 0.5, "servers": [{"name": "g", "models": [{"model": "m/tiny"}]}]}
    (shared,) = parse_spec(spec, base_dir=Path("/b")).entries
    assert (shared.replicas, shared.cpu_limit_cores, shared.cap.source) == (1, None, CapSource.NONE)


def _server(**changes: Any) -> dict[str, Any]:
    return {"servers": [{**SERVER, **changes}]}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_server(models=[]), r"servers\[0\] \(shared-a\): models must be a non-empty list"),
        ({"servers": [{"name": "g"}]}, r"servers\[0\] \(g\): models must be a non-empty list"),
        ({"servers": []}, "servers must be a non-empty list of shared servers"),
        ({"cpu_limit": 1}, "give 'models' .* 'servers' .* or both"),
        (
            {**_server(), "models": [{"model": "other/tiny"}]},
            r"servers\[0\]\.models\[0\]\.name: model name 'tiny' is used twice",
        ),
        (
            {"servers": [SERVER, {**SERVER, "name": "b", "models": [{"model": "x/mob"}]}]},
            r"servers\[1\]\.models\[0\]\.name: model name 'mob' is used twice",
        ),
        (
            {"servers": [SERVER, {**SERVER, "models": [{"model": "x/y"}]}]},
            "shared server names must be unique; repeated: shared-a",
        ),
        (
            {**_server(), "models": [{"model": "x/y", "name": "shared-a"}]},
            "a shared server and an entry are both named shared-a",
        ),
        (
            _server(gpu_memory_mib=400),
            r"servers\[0\] \(shared-a\): gpu_memory_mib: the pinned models' budgets and the "
            "largest other's sum to 500 MiB, more than the shared server's cap of 400 MiB",
        ),
        (
            _server(gpu_memory_mib=400, paging=None),
            r"servers\[0\] \(shared-a\): gpu_memory_mib: the models' budgets sum to 500 MiB, "
            "more than the shared server's cap of 400 MiB",
        ),
        (
            _server(
                gpu_memory_mib=900,
                models=[
                    {"model": "m/a", "gpu_memory_mib": 500, "pinned": True},
                    {"model": "m/b", "gpu_memory_mib": 300},
                    {"model": "m/c", "gpu_memory_mib": 500},
                ],
            ),
            "the pinned models' budgets and the largest other's sum to 1000 MiB",
        ),
        (_server(paging="fifo"), "paging must be lru"),
        (_server(weight=2), "unknown key 'weight'"),
        (
            _server(models=[{"model": "m/t", "gpu_memory_mib": 1.5}]),
            r"models\[0\]: gpu_memory_mib must be a whole number of MiB above 0",
        ),
        (
            _server(models=[{"name": "t"}]),
            r"models\[0\] \(t\): model must be a non-empty string \(required\)",
        ),
        ({"servers": [{"models": [{"model": "m/t"}]}]}, r"servers\[0\]: name .*required"),
    ],
)
def test_refusals_name_the_shared_server_and_key(data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_spec(data, base_dir=Path("/b"), where="pack.yaml")


def test_paging_budgets_may_sum_past_the_cap_the_pinned_and_largest_other_may_not() -> None:
    # 500 pinned + the largest of 300 and 400 paged = 900 fit a 900 MiB cap; all three, 1200.
    models = [
        {"model": "m/a", "gpu_memory_mib": 500, "pinned": True},
        {"model": "m/b", "gpu_memory_mib": 300},
        {"model": "m/c", "gpu_memory_mib": 400},
    ]
    (shared,) = parse_spec(_server(gpu_memory_mib=900, models=models), base_dir=Path("/b")).entries
    assert shared.paging and [m.gpu_memory_mib for m in shared.models] == [500, 300, 400]
    with pytest.raises(ConfigError, match="budgets sum to 1200 MiB"):
        parse_spec(_server(gpu_memory_mib=900, models=models, paging=None), base_dir=Path("/b"))


def test_the_repository_links_each_model_and_writes_its_model_file(tmp_path: Path) -> None:
    model = tmp_path / "models" / "tiny"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.pt").write_bytes(b"weights")
    (model / "sharedserve.yaml").write_text("weight: 9\nbatching: {max_batch_size: 4}\n")
    root = write_repository(
        tmp_path / "repo",
        [("t", SharedServerModel(model, weight=2, gpu_memory_mib=300, pinned=True))],
    )
    assert (root / "t" / "1").resolve() == (model / "1").resolve()
    # The model's own file is kept, the shared server's keys over it; the model's directory
    # untouched.
    written = yaml.safe_load((root / "t" / "sharedserve.yaml").read_text())
    assert written == {
        "weight": 2.0,
        "batching": {"max_batch_size": 4},
        "gpu_memory_mib": 300,
        "pinned": True,
    }
    remove_repository(root)
    assert not root.exists() and (model / "1" / "model.pt").read_bytes() == b"weights"
    assert (model / "sharedserve.yaml").read_text().startswith("weight: 9")

"""What the DRA driver keeps on disk: CDI specs for the runtime, the checkpoint for itself."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from sharedserve.allocator.dra.cdi import CDI_VERSION, remove_spec, spec_path, write_spec
from sharedserve.allocator.dra.checkpoint import Checkpoint
from sharedserve.allocator.dra.claims import (
    CDI_KIND,
    ClaimRef,
    PreparedClaim,
    PreparedDevice,
    cdi_name,
    prepare_claim,
)
from sharedserve.allocator.inventory import Sizing, build_inventory
from sharedserve.contract import DRA_DRIVER, DRA_MEMORY
from sharedserve.gpu.info import GpuInfo

POOL = "node-a"
UUID0 = "GPU-8f1c2d3e-0000-4000-8000-000000000000"
UUID1 = "GPU-8f1c2d3e-1111-4000-8000-111111111111"
GPUS = build_inventory(
    [GpuInfo(UUID0, 0, "Tesla T4", 15360), GpuInfo(UUID1, 1, "Tesla T4", 15360)], Sizing()
).gpus


def prepared(uid: str, *requests: tuple[str, str, str]) -> PreparedClaim:
    """A claim prepared by the real code: (request, device, memory) per result."""
    results = [
        {
            "request": request,
            "driver": DRA_DRIVER,
            "pool": POOL,
            "device": device,
            "consumedCapacity": {DRA_MEMORY: memory},
        }
        for request, device, memory in requests
    ]
    body = {
        "metadata": {"uid": uid},
        "status": {"allocation": {"devices": {"results": results}}},
    }
    ref = ClaimRef("team", uid, f"claim-{uid[:4]}")
    return prepare_claim(body, ref, pool=POOL, gpus=GPUS, gpu_cdi_kind="nvidia.com/gpu")


ONE = prepared("11111111-aaaa", ("gpu", "gpu-0", "6Gi"))
TWO = prepared(
    "22222222-bbbb", ("big", "gpu-0", "4Gi"), ("big", "gpu-1", "8Gi"), ("small", "gpu-1", "1Gi")
)


@pytest.mark.parametrize("claim", [ONE, TWO], ids=["one-request", "two-requests"])
def test_write_spec(tmp_path: Path, claim: PreparedClaim) -> None:
    cdi_dir = tmp_path / "cdi"  # created on first use
    path = write_spec(cdi_dir, claim)
    assert path == spec_path(cdi_dir, claim.ref.uid)
    assert path.parent == cdi_dir
    assert path.name == f"{DRA_DRIVER}-claim_{claim.ref.uid}.json"
    written = json.loads(path.read_text())
    assert written["cdiVersion"] == CDI_VERSION
    assert written["kind"] == CDI_KIND == "gpu.sharedserve.io/claim"
    requests = sorted({d.request for d in claim.devices})
    assert [d["name"] for d in written["devices"]] == [cdi_name(claim.ref.uid, r) for r in requests]
    for device in written["devices"]:
        entries = device["containerEdits"]["env"]
        assert all(isinstance(e, str) for e in entries)
        assert dict(e.split("=", 1) for e in entries) == claim.envs[device["name"]]
    # Every CDI ID handed to the kubelet names a device of a spec that exists.
    names = {f"{CDI_KIND}={d['name']}" for d in written["devices"]}
    assert {i for d in claim.devices for i in d.cdi_ids if i.startswith(CDI_KIND)} == names


def test_write_spec_replaces(tmp_path: Path) -> None:
    write_spec(tmp_path, TWO)
    smaller = PreparedClaim(TWO.ref, TWO.devices[:1], {k: TWO.envs[k] for k in list(TWO.envs)[:1]})
    path = write_spec(tmp_path, smaller)
    assert len(json.loads(path.read_text())["devices"]) == 1
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind


def test_remove_spec(tmp_path: Path) -> None:
    write_spec(tmp_path, ONE)
    write_spec(tmp_path, TWO)
    assert remove_spec(tmp_path, ONE.ref.uid) is True
    assert remove_spec(tmp_path, ONE.ref.uid) is False
    assert not spec_path(tmp_path, ONE.ref.uid).exists()
    assert spec_path(tmp_path, TWO.ref.uid).exists()
    assert remove_spec(tmp_path / "never-made", "some-uid") is False


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "plugin" / "checkpoint.json"
    first = Checkpoint(path)
    assert first.claims == {}
    first.claims = {ONE.ref.uid: ONE, TWO.ref.uid: TWO}
    first.save()
    loaded = Checkpoint(path).claims
    assert loaded == {ONE.ref.uid: ONE, TWO.ref.uid: TWO}
    device = loaded[TWO.ref.uid].devices[0]
    assert isinstance(device, PreparedDevice)
    assert isinstance(device.cdi_ids, tuple)


def test_checkpoint_keeps_share_ids_and_none(tmp_path: Path) -> None:
    claim = PreparedClaim(
        ClaimRef("team", "33333333-cccc", "c"),
        (
            PreparedDevice("gpu", POOL, "gpu-0", "a1", ("x=y",)),
            PreparedDevice("gpu", POOL, "gpu-1", None, ()),
        ),
        {"y": {"K": "V"}},
    )
    saved = Checkpoint(tmp_path / "checkpoint.json")
    saved.claims[claim.ref.uid] = claim
    saved.save()
    assert Checkpoint(tmp_path / "checkpoint.json").claims == {claim.ref.uid: claim}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{not json", id="bad-json"),
        pytest.param('{"version": 2, "claims": {}}', id="wrong-version"),
        pytest.param('{"claims": {}}', id="no-version"),
        pytest.param("[1, 2]", id="not-an-object"),
        pytest.param('{"version": 1}', id="no-claims"),
        pytest.param('{"version": 1, "claims": {"u": {"ref": {}}}}', id="bad-claim"),
        pytest.param("", id="empty-file"),
    ],
)
def test_corrupt_checkpoint_starts_empty(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(text)
    with caplog.at_level(logging.ERROR):
        assert Checkpoint(path).claims == {}
    assert not path.exists()
    assert (tmp_path / "checkpoint.corrupt").read_text() == text
    assert "unreadable" in caplog.text

"""Allocated ResourceClaims -> prepared devices and the env contract of each request."""

from __future__ import annotations

from typing import Any

import pytest

from sharedserve.allocator.dra.claims import (
    CDI_KIND,
    ClaimRef,
    PreparedClaim,
    PreparedDevice,
    cdi_name,
    prepare_claim,
)
from sharedserve.allocator.inventory import PhysicalGpu, Sizing, build_inventory
from sharedserve.contract import (
    CUDA_VISIBLE_DEVICES,
    DRA_COMPUTE,
    DRA_DRIVER,
    DRA_MEMORY,
    Grant,
    fraction_of,
)
from sharedserve.errors import InvalidInput
from sharedserve.gpu.info import GpuInfo

POOL = "node-a"
UID = "0b7f4a1e-2c3d-4e5f-8a9b-0c1d2e3f4a5b"
UUID0 = "GPU-8f1c2d3e-0000-4000-8000-000000000000"
UUID1 = "GPU-8f1c2d3e-1111-4000-8000-111111111111"
T4 = 15360
GPUS: tuple[PhysicalGpu, ...] = build_inventory(
    [GpuInfo(UUID1, 1, "Tesla T4", T4), GpuInfo(UUID0, 0, "Tesla T4", T4)], Sizing()
).gpus


def ref(uid: str = UID) -> ClaimRef:
    return ClaimRef("team", uid, "model-gpu")


def result(
    device: str,
    memory: str | None = None,
    *,
    request: str = "gpu",
    pool: str = POOL,
    driver: str = DRA_DRIVER,
    share: str | None = None,
) -> dict[str, Any]:
    found: dict[str, Any] = {"request": request, "driver": driver, "pool": pool, "device": device}
    if memory is not None:
        found["consumedCapacity"] = {DRA_MEMORY: memory}
    if share is not None:
        found["shareID"] = share
    return found


def claim(*results: dict[str, Any], uid: str = UID) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": "team", "name": "model-gpu"},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }


def prepare(
    body: dict[str, Any], slots: int | None = None, cdi: str | None = None
) -> PreparedClaim:
    return prepare_claim(body, ref(), pool=POOL, gpus=GPUS, slots=slots, gpu_cdi_kind=cdi)


def grant_of(prepared: PreparedClaim, request: str = "gpu") -> Grant:
    return Grant.from_env(prepared.envs[cdi_name(UID, request)])


@pytest.mark.parametrize(("memory", "mib"), [("6Gi", 6144), ("2Gi", 2048), ("1536Mi", 1536)])
def test_claims_share_one_gpu(memory: str, mib: int) -> None:
    prepared = prepare(claim(result("gpu-0", memory, share="a1")))
    env = prepared.envs[cdi_name(UID, "gpu")]
    grant = Grant.from_env(env)
    assert [(g.uuid, g.mib, g.fraction) for g in grant.gpus] == [(UUID0, mib, fraction_of(mib, T4))]
    assert grant.gpus[0].fraction is not None and grant.gpus[0].fraction * T4 <= mib
    assert grant.bare_host
    assert env[CUDA_VISIBLE_DEVICES] == UUID0
    assert prepared.devices == (
        PreparedDevice("gpu", POOL, "gpu-0", "a1", (f"{CDI_KIND}={cdi_name(UID, 'gpu')}",)),
    )


def test_a_claims_compute_share_books_the_gpu_and_leaves_its_memory_cap_as_it_was() -> None:
    # size's claims ask for memory and a percent of the GPU's compute: the scheduler counts both,
    # the container's env carries the memory cap, as a claim for memory alone does.
    with_compute = result("gpu-0", "6Gi")
    with_compute["consumedCapacity"][DRA_COMPUTE] = "40"
    assert prepare(claim(with_compute)).envs == prepare(claim(result("gpu-0", "6Gi"))).envs


def test_request_granted_two_gpus() -> None:
    # Allocation order is not index order; the env lists GPUs in index order all the same.
    prepared = prepare(claim(result("gpu-1", "4Gi"), result("gpu-0", "8Gi")))
    grant = grant_of(prepared)
    assert [(g.uuid, g.mib) for g in grant.gpus] == [(UUID0, 8192), (UUID1, 4096)]
    assert len(prepared.envs) == 1
    cdi = f"{CDI_KIND}={cdi_name(UID, 'gpu')}"
    assert [(d.device, d.cdi_ids) for d in prepared.devices] == [("gpu-1", (cdi,)), ("gpu-0", ())]


def test_two_requests_two_cdi_devices() -> None:
    prepared = prepare(
        claim(result("gpu-0", "6Gi", request="big"), result("gpu-0", "2Gi", request="small"))
    )
    assert set(prepared.envs) == {cdi_name(UID, "big"), cdi_name(UID, "small")}
    assert grant_of(prepared, "big").gpus[0].mib == 6144
    assert grant_of(prepared, "small").gpus[0].mib == 2048
    assert [d.cdi_ids for d in prepared.devices] == [
        (f"{CDI_KIND}={cdi_name(UID, 'big')}",),
        (f"{CDI_KIND}={cdi_name(UID, 'small')}",),
    ]


def test_gpu_cdi_kind_names_every_device() -> None:
    prepared = prepare(claim(result("gpu-0", "4Gi"), result("gpu-1", "4Gi")), cdi="nvidia.com/gpu")
    own = f"{CDI_KIND}={cdi_name(UID, 'gpu')}"
    assert [d.cdi_ids for d in prepared.devices] == [
        (own, f"nvidia.com/gpu={UUID0}"),
        (f"nvidia.com/gpu={UUID1}",),
    ]


def test_other_drivers_results_are_left_alone() -> None:
    prepared = prepare(
        claim(result("nic-0", driver="net.example.com"), result("gpu-0", "2Gi", request="g"))
    )
    assert [d.device for d in prepared.devices] == ["gpu-0"]
    assert list(prepared.envs) == [cdi_name(UID, "g")]


@pytest.mark.parametrize(
    ("body", "slots", "fragments"),
    [
        pytest.param(
            claim(result("gpu-0"), uid="other-uid"),
            None,
            ["team/model-gpu", "other-uid", UID],
            id="uid-mismatch",
        ),
        pytest.param(
            {"metadata": {"uid": UID}, "status": {}}, None, ["not allocated"], id="no-allocation"
        ),
        pytest.param({"metadata": {"uid": UID}}, None, ["not allocated"], id="no-status"),
        pytest.param(
            claim(result("nic-0", driver="net.example.com")),
            None,
            [f"no device of driver {DRA_DRIVER}"],
            id="only-other-drivers",
        ),
        pytest.param(
            claim(result("gpu-0", pool="node-b")),
            None,
            ["node-b/gpu-0", "not on this node", POOL],
            id="other-pool",
        ),
        pytest.param(claim(result("gpu-7")), None, [f"{POOL}/gpu-7", "not one"], id="unknown-gpu"),
        pytest.param(
            claim(result("gpu-0-slot-1")), None, ["gpu-0-slot-1", "not one"], id="slot-not-slots"
        ),
        pytest.param(claim(result("gpu-0")), 4, ["gpu-0", "not one"], id="whole-in-slots-mode"),
        pytest.param(claim(result("gpu-0-slot-4")), 4, ["gpu-0-slot-4", "4 slots"], id="slot-4"),
        pytest.param(
            claim(result("gpu-0", "20Gi")),
            None,
            ["20480 MiB", "gpu-0", "Tesla T4", f"has {T4} MiB"],
            id="oversized",
        ),
        pytest.param(
            claim(result("gpu-0", "10Gi", share="a"), result("gpu-0", "6Gi", share="b")),
            None,
            ["'gpu'", "16384 MiB", f"has {T4} MiB"],
            id="one-request-twice-on-a-gpu",
        ),
        pytest.param(claim(result("gpu-0", "512Ki")), None, ["'512Ki'", "1 MiB"], id="tiny"),
        pytest.param(claim(result("gpu-0", "0")), None, ["less than 1 MiB"], id="zero"),
        pytest.param(
            claim(result("gpu-0", "lots")),
            None,
            ["team/model-gpu", "'lots'", "not a Kubernetes quantity"],
            id="unparsable",
        ),
    ],
)
def test_refused(body: dict[str, Any], slots: int | None, fragments: list[str]) -> None:
    with pytest.raises(InvalidInput) as raised:
        prepare(body, slots=slots)
    for fragment in fragments:
        assert fragment in raised.value.message


@pytest.mark.parametrize(
    ("slots", "device", "consumed", "mib"),
    [
        pytest.param(4, "gpu-0-slot-3", None, T4 // 4, id="quarter"),
        pytest.param(16, "gpu-1-slot-0", None, T4 // 16, id="sixteenth"),
        pytest.param(4, "gpu-0-slot-0", "1Gi", T4 // 4, id="consumed-ignored"),
        pytest.param(1, "gpu-0-slot-0", None, T4, id="one-slot-whole-gpu"),
    ],
)
def test_slots_mode_memory(slots: int, device: str, consumed: str | None, mib: int) -> None:
    (gpu,) = grant_of(prepare(claim(result(device, consumed)), slots=slots)).gpus
    assert gpu.mib == mib
    assert gpu.fraction == fraction_of(mib, T4)


def test_no_consumed_capacity_is_the_whole_gpu() -> None:
    prepared = prepare(claim(result("gpu-1")))
    (gpu,) = grant_of(prepared).gpus
    assert (gpu.uuid, gpu.mib, gpu.fraction) == (UUID1, T4, 1.0)
    assert prepared.devices[0].share_id is None


def test_share_id_carried_through() -> None:
    prepared = prepare(claim(result("gpu-0", "1Gi", share="7c1e"), result("gpu-1", share="9")))
    assert [d.share_id for d in prepared.devices] == ["7c1e", "9"]


@pytest.mark.parametrize(
    ("request_name", "expected"),
    [
        ("gpu", f"{UID}-gpu"),
        ("main/sub", f"{UID}-main_sub"),
        ("a b+c", f"{UID}-a_b_c"),
    ],
)
def test_cdi_name(request_name: str, expected: str) -> None:
    assert cdi_name(UID, request_name) == expected


def test_subrequest_name_in_prepared_claim() -> None:
    prepared = prepare(claim(result("gpu-0", "2Gi", request="main/sub")))
    assert list(prepared.envs) == [f"{UID}-main_sub"]
    assert prepared.devices[0].request == "main/sub"
    assert prepared.devices[0].cdi_ids == (f"{CDI_KIND}={UID}-main_sub",)

"""The DRA driver's ResourceSlice: device shapes, the v1 schema, health, names, versions."""

from __future__ import annotations

from collections.abc import Sequence

import kubernetes_validate
import pytest

from sharedserve.allocator.dra.slices import (
    MAX_DEVICES,
    SliceOptions,
    device_name,
    devices,
    parse_device_name,
    resource_slice,
    semver,
)
from sharedserve.allocator.health_state import Health
from sharedserve.allocator.inventory import PhysicalGpu, Sizing, build_inventory
from sharedserve.contract import DRA_COMPUTE, DRA_DRIVER, DRA_MEMORY
from sharedserve.errors import ConfigError
from sharedserve.gpu.info import GpuInfo

NODE = "node-a"
KUBE = "1.36.0"


def uuid(index: int) -> str:
    return f"GPU-8f1c2d3e-{index:04d}-4000-8000-{index:012d}"


def gpus(*memory_mib: int, name: str = "NVIDIA H100 80GB HBM3") -> tuple[PhysicalGpu, ...]:
    infos = [GpuInfo(uuid(i), i, name, mib) for i, mib in enumerate(memory_mib)]
    return build_inventory(infos, Sizing()).gpus


def healthy(found: Sequence[PhysicalGpu]) -> dict[str, Health]:
    return {gpu.uuid: Health.HEALTHY for gpu in found}


@pytest.mark.parametrize(
    ("name", "memory_mib", "usable_mib"),
    [
        pytest.param("Tesla T4", 15360, 15360, id="t4"),
        pytest.param("NVIDIA H100 80GB HBM3", 81559, 81408, id="h100-not-a-multiple"),
        pytest.param("NVIDIA A100-SXM4-40GB", 40960, 40960, id="a100"),
        pytest.param("Tiny", 300, None, id="smaller-than-two-steps"),
    ],
)
def test_shared_device(name: str, memory_mib: int, usable_mib: int | None) -> None:
    (gpu,) = gpus(memory_mib, name=name)
    (device,) = devices([gpu], healthy([gpu]), SliceOptions(), "535.104.5")
    assert device["name"] == "gpu-0"
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"] == {
        "uuid": {"string": uuid(0)},
        "productName": {"string": name},
        "index": {"int": 0},
        "driverVersion": {"version": "535.104.5"},
    }
    # Its time, in percent: any whole share, and none for a claim that names none (a claim for
    # memory alone counts no compute, as before the driver published it).
    assert device["capacity"][DRA_COMPUTE] == {
        "value": "100",
        "requestPolicy": {"default": "0", "validRange": {"min": "0", "step": "1", "max": "100"}},
    }
    capacity = device["capacity"][DRA_MEMORY]
    assert capacity["value"] == f"{memory_mib}Mi"
    if usable_mib is None:
        assert "requestPolicy" not in capacity
    else:
        usable = f"{usable_mib}Mi"
        assert capacity["requestPolicy"] == {
            "default": usable,
            "validRange": {"min": "256Mi", "step": "256Mi", "max": usable},
        }


def test_shared_device_without_driver_version_has_no_attribute() -> None:
    (gpu,) = gpus(15360)
    (device,) = devices([gpu], healthy([gpu]), SliceOptions(), None)
    assert "driverVersion" not in device["attributes"]


@pytest.mark.parametrize("slots", [1, 4, 16])
def test_slot_devices(slots: int) -> None:
    found = gpus(15360, 81559)
    listed = devices(found, healthy(found), SliceOptions(slots=slots), None)
    expected = [(g, s) for g in found for s in range(slots)]
    assert [d["name"] for d in listed] == [device_name(g.index, s) for g, s in expected]
    for device, (gpu, slot) in zip(listed, expected, strict=True):
        assert device["attributes"]["slot"] == {"int": slot}
        assert device["attributes"]["uuid"] == {"string": gpu.uuid}
        per_slot = gpu.memory_mib // slots
        assert device["capacity"] == {
            DRA_MEMORY: {"value": f"{per_slot}Mi"},
            DRA_COMPUTE: {"value": str(100 // slots)},  # percent of the GPU's time
        }
        assert "allowMultipleAllocations" not in device


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(SliceOptions(), id="shared"),
        pytest.param(SliceOptions(slots=1), id="slots-1"),
        pytest.param(SliceOptions(slots=4), id="slots-4"),
        pytest.param(SliceOptions(slots=16), id="slots-16"),
        pytest.param(SliceOptions(memory_step_mib=1024), id="shared-step-1g"),
    ],
)
def test_slice_is_valid_kubernetes(options: SliceOptions) -> None:
    # Mixed sizes, a tiny one among them (no requestPolicy), eight GPUs: 16 slots fill the slice.
    found = gpus(15360, 81559, 40960, 300, 81559, 81559, 15360, 24576)
    listed = devices(found, healthy(found), options, semver("580.159.04"))
    assert len(listed) == len(found) * (options.slots or 1) <= MAX_DEVICES
    obj = resource_slice(NODE, listed, generation=3)
    kubernetes_validate.validate(obj, KUBE, strict=True)
    assert obj["metadata"]["name"] == f"{NODE}-{DRA_DRIVER}"
    assert obj["spec"]["nodeName"] == NODE
    assert obj["spec"]["pool"] == {"name": NODE, "generation": 3, "resourceSliceCount": 1}


def test_schema_check_is_strict() -> None:
    # The check above means something only if a field the API does not know fails it.
    found = gpus(15360)
    obj = resource_slice(NODE, devices(found, healthy(found), SliceOptions(), None), 1)
    obj["spec"]["devices"][0]["capacity"][DRA_MEMORY]["requestPolicy"]["minimum"] = "1Mi"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, KUBE, strict=True)


def test_empty_slice_is_valid_kubernetes() -> None:
    kubernetes_validate.validate(resource_slice(NODE, [], generation=1), KUBE, strict=True)


@pytest.mark.parametrize(
    ("health", "expected"),
    [
        pytest.param([Health.HEALTHY] * 3, ["gpu-0", "gpu-1", "gpu-2"], id="all-healthy"),
        pytest.param(
            [Health.HEALTHY, Health.UNHEALTHY, Health.HEALTHY], ["gpu-0", "gpu-2"], id="one-sick"
        ),
        pytest.param([Health.HEALTHY, None, Health.HEALTHY], ["gpu-0", "gpu-2"], id="missing"),
        pytest.param([Health.UNHEALTHY] * 3, [], id="none-healthy"),
    ],
)
def test_unhealthy_gpus_leave_the_slice(health: list[Health | None], expected: list[str]) -> None:
    found = gpus(15360, 15360, 15360)
    mapping = {g.uuid: h for g, h in zip(found, health, strict=True) if h is not None}
    for options, per_gpu in (
        (SliceOptions(), [""]),
        (SliceOptions(slots=2), ["-slot-0", "-slot-1"]),
    ):
        listed = devices(found[::-1], mapping, options, None)  # any order in, index order out
        assert [d["name"] for d in listed] == [e + s for e in expected for s in per_gpu]


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("535.104.05", "535.104.5"),
        ("580.159.04", "580.159.4"),
        ("550.54", "550.54.0"),
        (" 550.54.15\n", "550.54.15"),
        ("garbage", None),
        ("1.2.3.4", None),
        ("", None),
        ("535.104.x", None),
        ("535..05", None),
    ],
)
def test_semver(version: str, expected: str | None) -> None:
    assert semver(version) == expected


@pytest.mark.parametrize(
    ("index", "slot", "name"),
    [(0, None, "gpu-0"), (7, None, "gpu-7"), (12, None, "gpu-12"), (0, 0, "gpu-0-slot-0"),
     (3, 15, "gpu-3-slot-15")],
)  # fmt: skip
def test_device_name_round_trip(index: int, slot: int | None, name: str) -> None:
    assert device_name(index, slot) == name
    assert parse_device_name(name) == (index, slot)


@pytest.mark.parametrize(
    "name",
    ["gpu-01", "gpu--1", "gpu-0-slot-", "GPU-0", "gpu-0-slot-01", "other", "gpu-", "", "gpu-0 "],
)
def test_parse_device_name_rejects(name: str) -> None:
    assert parse_device_name(name) is None


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        pytest.param(SliceOptions(slots=0), "--slots must be in 1..16, got 0", id="slots-0"),
        pytest.param(SliceOptions(slots=17), "--slots must be in 1..16, got 17", id="slots-17"),
        pytest.param(
            SliceOptions(memory_step_mib=0), "--memory-step-mib must be positive", id="step-0"
        ),
    ],
)
def test_slice_options_refused(options: SliceOptions, fragment: str) -> None:
    with pytest.raises(ConfigError) as raised:
        options.validate()
    assert fragment in raised.value.message


@pytest.mark.parametrize("options", [SliceOptions(), SliceOptions(slots=1), SliceOptions(slots=16)])
def test_slice_options_accepted(options: SliceOptions) -> None:
    options.validate()


@pytest.mark.parametrize(
    ("gpus", "slots", "fits"),
    [(8, 16, True), (9, 16, False), (128, None, True), (129, None, False)],
)
def test_a_node_whose_devices_overflow_one_slice_is_refused(
    gpus: int, slots: int | None, fits: bool
) -> None:
    options = SliceOptions(slots=slots)
    if fits:
        options.check_fits(gpus)
    else:
        with pytest.raises(ConfigError, match="one ResourceSlice holds 128"):
            options.check_fits(gpus)

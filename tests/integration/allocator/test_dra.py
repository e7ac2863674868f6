"""The real ``sharedserve allocator --api dra`` against the kubelet and API server stand-ins.

The kubelet side is real gRPC over unix sockets (plugin registration, then DRAPlugin v1 or
v1beta1); the API side is the real ``kubernetes`` client against a fake API server that checks
every ResourceSlice against the 1.36 schema. The driver is one child process per module fixture,
stopped and started again where a test needs a restart.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sharedserve.allocator.dra.cdi import spec_path
from sharedserve.allocator.dra.claims import CDI_KIND
from sharedserve.contract import DRA_DRIVER, Grant, fraction_of
from tests.support.allocator import A100, GPUS, T4, wait_for_log
from tests.support.apiserver import FakeApiServer, allocated_claim
from tests.support.dra_node import NODE, SLICE, DraNode
from tests.support.gpus import write_inventory
from tests.support.kubelet_dra import FakeDraKubelet
from tests.support.servers import SHAREDSERVE, Server, clean_env

pytestmark = pytest.mark.timeout(60)

GIB = 1024
SHARES = [f"5f0c1a2b-2222-4000-8000-00000000{n:04x}" for n in range(16)]


def uid(n: int) -> str:
    return f"5f0c1a2b-3333-4000-8000-00000000{n:04x}"


def result(device: str, memory: str | None, n: int = 0, request: str = "gpu") -> dict[str, Any]:
    found: dict[str, Any] = {"request": request, "driver": DRA_DRIVER, "pool": NODE}
    found["device"] = device
    if memory is not None:
        found |= {"consumedCapacity": {"memory": memory}, "shareID": SHARES[n]}
    return found


def claim(node: DraNode, n: int, *results: dict[str, Any]) -> tuple[str, str, str]:
    """Put an allocated claim into the API server; what the kubelet names it by."""
    node.api.set_claim(allocated_claim("models", f"claim-{n}", uid(n), list(results), node=NODE))
    return ("models", uid(n), f"claim-{n}")


def devices(slice_: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in slice_["spec"]["devices"]}


def env_of(spec: dict[str, Any]) -> dict[str, str]:
    (device,) = spec["devices"]
    return dict(e.split("=", 1) for e in device["containerEdits"]["env"])


@pytest.fixture(scope="module")
def node() -> Iterator[DraNode]:
    """Consumable capacity (the default), probes every second."""
    node = DraNode(["--health-interval", "1"], GPUS)
    node.registered()
    yield node
    log = node.log()
    assert node.close() == 0, log
    assert "Traceback" not in log, log


def test_registers_with_both_dra_versions_v1_first(node: DraNode) -> None:
    registration = node.kubelet.registrations[0]
    assert registration.info is not None
    assert registration.info.type == "DRAPlugin"
    assert registration.info.name == DRA_DRIVER
    assert list(registration.info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert registration.info.endpoint == str(node.plugin_dir / "dra.sock")
    assert registration.version == "v1"


def test_publishes_one_shared_device_per_gpu(node: DraNode) -> None:
    published = node.slice()
    spec = published["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == (DRA_DRIVER, NODE, NODE)
    found = devices(published)
    assert sorted(found) == ["gpu-0", "gpu-1"]
    t4 = found["gpu-0"]
    assert t4["attributes"]["uuid"] == {"string": T4}
    assert t4["attributes"]["productName"] == {"string": "Tesla T4"}
    assert t4["attributes"]["index"] == {"int": 0}
    # Simulated GPUs have no driver version: the attribute is left out, never made up.
    assert "driverVersion" not in t4["attributes"]
    assert t4["allowMultipleAllocations"] is True
    memory = t4["capacity"]["memory"]
    assert memory["value"] == "15360Mi"
    assert memory["requestPolicy"]["validRange"] == {
        "min": "256Mi",
        "step": "256Mi",
        "max": "15360Mi",
    }
    assert found["gpu-1"]["capacity"]["memory"]["value"] == "81920Mi"
    # Its time beside its memory, in percent: what size's claims ask for as well.
    assert t4["capacity"]["compute"]["value"] == "100"
    assert node.api.unexpected == []


def test_an_unhealthy_gpu_leaves_the_slice_and_comes_back(node: DraNode) -> None:
    before = node.slice()["spec"]["pool"]["generation"]
    node.set_gpus([{**GPUS[0], "healthy": False}, GPUS[1]])
    try:
        sick = node.slice(lambda s: sorted(devices(s)) == ["gpu-1"])
        assert sick["spec"]["pool"]["generation"] > before
    finally:
        node.set_gpus(GPUS)
    healed = node.slice(lambda s: sorted(devices(s)) == ["gpu-0", "gpu-1"])
    assert healed["spec"]["pool"]["generation"] > sick["spec"]["pool"]["generation"]


def test_two_claims_on_one_gpu_get_their_own_memory_caps(node: DraNode) -> None:
    six = claim(node, 1, result("gpu-0", "6Gi", 1))
    two = claim(node, 2, result("gpu-0", "2Gi", 2))
    answer = node.kubelet.prepare([six, two])
    for ref, mib, share_id in ((six, 6 * GIB, SHARES[1]), (two, 2 * GIB, SHARES[2])):
        prepared = answer.claims[ref[1]]
        assert prepared.error == ""
        (device,) = prepared.devices
        assert (device.pool_name, device.device_name) == (NODE, "gpu-0")
        assert list(device.request_names) == ["gpu"]
        assert device.share_id == share_id
        assert list(device.cdi_device_ids) == [f"{CDI_KIND}={ref[1]}-gpu"]
        spec = node.spec(ref[1])
        assert spec["kind"] == CDI_KIND
        env = env_of(spec)
        grant = Grant.from_env(env)
        (share,) = grant.gpus
        assert (share.uuid, share.mib) == (T4, mib)
        assert share.fraction == fraction_of(mib, 15360)  # 2 GiB: 0.133333, rounded down
        assert env["CUDA_VISIBLE_DEVICES"] == T4
    node.kubelet.unprepare([six, two])


def test_a_repeated_prepare_answers_the_same_without_asking_again(node: DraNode) -> None:
    ref = claim(node, 3, result("gpu-1", "40Gi", 3))
    first = node.kubelet.prepare([ref])
    reads = len([r for r in node.api.requests if r.path.endswith(f"/claim-{3}")])
    again = node.kubelet.prepare([ref])
    assert again == first
    assert len([r for r in node.api.requests if r.path.endswith("/claim-3")]) == reads == 1
    node.kubelet.unprepare([ref])


def test_an_oversized_claim_fails_alone(node: DraNode) -> None:
    # 20 GiB of a 15 GiB T4: the scheduler would never allocate it, but a stale or hand-made
    # claim must be refused clearly, and must not take the other claim of the call with it.
    big = claim(node, 4, result("gpu-0", "20Gi", 4))
    fine = claim(node, 5, result("gpu-1", "8Gi", 5))
    answer = node.kubelet.prepare([big, fine])
    error = answer.claims[big[1]].error
    assert "20480 MiB of gpu-0 (Tesla T4), which has 15360 MiB" in error
    assert answer.claims[fine[1]].error == ""
    assert not spec_path(node.cdi_dir, big[1]).exists()
    node.kubelet.unprepare([fine])


def test_a_device_of_another_node_or_driver_is_refused(node: DraNode) -> None:
    elsewhere = claim(node, 6, {**result("gpu-0", "1Gi", 6), "pool": "node-2"})
    unknown = claim(node, 7, result("gpu-9", "1Gi", 7))
    answer = node.kubelet.prepare([elsewhere, unknown])
    assert "not on this node" in answer.claims[elsewhere[1]].error
    assert "not one this driver publishes" in answer.claims[unknown[1]].error
    missing = ("models", uid(8), "claim-8")  # never created: the API server answers 404
    assert "404" in node.kubelet.prepare([missing]).claims[uid(8)].error


def test_unprepare_of_an_unknown_claim_succeeds_and_changes_nothing(node: DraNode) -> None:
    kept = claim(node, 9, result("gpu-1", "1Gi", 9))
    node.kubelet.prepare([kept])
    answer = node.kubelet.unprepare([("models", uid(99), "never-prepared")])
    assert answer.claims[uid(99)].error == ""
    assert node.spec(kept[1])["devices"]  # the prepared claim's spec is untouched
    node.kubelet.unprepare([kept])
    assert not spec_path(node.cdi_dir, kept[1]).exists()


def test_v1beta1_is_served_too(node: DraNode) -> None:
    ref = claim(node, 10, result("gpu-0", "1Gi", 10))
    answer = node.kubelet.prepare([ref], version="v1beta1")
    (device,) = answer.claims[ref[1]].devices
    assert list(device.cdi_device_ids) == [f"{CDI_KIND}={ref[1]}-gpu"]
    assert node.kubelet.unprepare([ref], version="v1beta1").claims[ref[1]].error == ""


def test_a_restarted_driver_answers_from_its_checkpoint(node: DraNode) -> None:
    ref = claim(node, 11, result("gpu-1", "12Gi", 11))
    before = node.kubelet.prepare([ref])
    registrations = len(node.kubelet.registrations)
    assert node.stop() == 0
    # The claim leaves the API server meanwhile: only the checkpoint can answer now.
    node.api.delete_claim("models", "claim-11")
    node.start()
    node.registered(registrations + 1)
    assert node.kubelet.prepare([ref]) == before
    assert node.kubelet.unprepare([ref]).claims[ref[1]].error == ""
    assert not spec_path(node.cdi_dir, ref[1]).exists()


def test_a_kubelet_restart_registers_again_and_republishes(node: DraNode) -> None:
    registrations = len(node.kubelet.registrations)
    node.kubelet.stop()
    # A starting kubelet deletes the node's slices; the driver must publish again.
    node.api.wipe_slices(NODE)
    node.kubelet.start()
    node.registered(registrations + 1)
    assert sorted(devices(node.slice())) == ["gpu-0", "gpu-1"]


def test_a_removed_socket_is_served_again(node: DraNode) -> None:
    registrations = len(node.kubelet.registrations)
    (node.registry / f"{DRA_DRIVER}-reg.sock").unlink()
    node.registered(registrations + 1)
    ref = claim(node, 12, result("gpu-0", "1Gi", 12))
    assert node.kubelet.prepare([ref]).claims[ref[1]].error == ""
    node.kubelet.unprepare([ref])


def test_slots_mode_publishes_exclusive_shares() -> None:
    node = DraNode(["--slots", "4"], GPUS)
    try:
        node.registered()
        found = devices(node.slice())
        assert sorted(found) == sorted(f"gpu-{g}-slot-{s}" for g in (0, 1) for s in range(4))
        assert "allowMultipleAllocations" not in found["gpu-1-slot-3"]
        assert found["gpu-1-slot-3"]["capacity"]["memory"] == {"value": "20480Mi"}
        ref = claim(node, 1, result("gpu-1-slot-3", None))
        assert node.kubelet.prepare([ref]).claims[ref[1]].error == ""
        (share,) = Grant.from_env(env_of(node.spec(ref[1]))).gpus
        assert (share.uuid, share.mib, share.fraction) == (A100, 20480, 0.25)
    finally:
        log = node.log()
        assert node.close() == 0, log


@pytest.mark.slow
@pytest.mark.tensorflow
def test_the_cdi_env_caps_the_model_server(node: DraNode, models_dir: Path, tmp_path: Path) -> None:
    """What the runtime injects from the spec is what ``sharedserve serve`` applies."""
    ref = claim(node, 13, result("gpu-0", "6Gi", 13))
    assert node.kubelet.prepare([ref]).claims[ref[1]].error == ""
    env = clean_env(**env_of(node.spec(ref[1])))
    node.kubelet.unprepare([ref])
    server = Server(
        models_dir / "tiny", tmp_path / "serve.log", ["--fake-gpus", str(node.gpus_file)], env
    )
    try:
        server.wait_available("tiny")
        limits = server.client.get("/sharedserve/v1/limits").json()
    finally:
        assert server.stop() == 0, server.log()
    assert (limits["gpu_memory_mib"], limits["gpu_memory_fraction"]) == (6144, 0.4)
    assert (limits["gpu_memory_source"], limits["gpu_memory_total_mib"]) == ("env", 15360)


def test_a_failing_api_server_is_retried(node: DraNode) -> None:
    node.api.fail_next(2, 503)
    node.set_gpus([GPUS[0], {**GPUS[1], "healthy": False}])
    try:
        node.slice(lambda s: sorted(devices(s)) == ["gpu-0"])
    finally:
        node.set_gpus(GPUS)
    node.slice(lambda s: sorted(devices(s)) == ["gpu-0", "gpu-1"])
    assert "retrying" in node.log()


def test_a_node_left_without_gpus_deletes_its_slice() -> None:
    node = DraNode([], GPUS)
    try:
        node.registered()
        node.slice()
        assert node.stop() == 0
        node.set_gpus([])  # the next start discovers none (a driver update, the GPUs gone)
        node.start()
        node.api.wait_until(lambda slices: SLICE not in slices)
        # The log line follows the API's answer: give it a moment.
        deadline = time.monotonic() + 5
        while "this node has no GPU" not in node.log():
            assert time.monotonic() < deadline, node.log()
            time.sleep(0.05)
    finally:
        log = node.log()
        assert node.close() == 0, log


def test_without_a_kubelet_it_waits_for_the_plugin_registry_and_creates_nothing() -> None:
    # The registry is the kubelet's: on a host without one the driver must say what it waits
    # for and make nothing of the kubelet's; once the kubelet comes, it registers as usual.
    api = FakeApiServer().start()
    root = Path(tempfile.mkdtemp(prefix="ss-dra-", dir="/tmp"))
    registry = root / "kubelet" / "plugins_registry"
    kubelet = FakeDraKubelet(registry)
    log_path = root / "allocator.log"
    command = [*SHAREDSERVE, "allocator", "--api", "dra", "--node-name", NODE]
    command += ["--kubeconfig", str(api.write_kubeconfig(root / "kubeconfig"))]
    command += ["--fake-gpus", str(write_inventory(root / "gpus.json", GPUS))]
    command += ["--plugin-registry-dir", str(registry), "--dra-plugin-dir", str(root / "plugin")]
    command += ["--cdi-dir", str(root / "cdi")]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=clean_env())
    try:
        waiting = f"waiting for the kubelet: its plugin registry {registry} does not exist"
        wait_for_log(log_path, waiting, process)
        assert not (root / "kubelet").exists()
        kubelet.start()
        kubelet.wait_registered(1, timeout=60)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        kubelet.close()
        api.close()
        shutil.rmtree(root, ignore_errors=True)
    assert code == 0

"""The real ``sharedserve allocator`` process against a kubelet stand-in, over unix sockets.

Each ``Node`` (tests/support/allocator.py) is a temp directory holding the device plugin
directory, a fake GPU inventory the test rewrites to fail and heal GPUs, the ``FakeKubelet`` and
the allocator child process.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from sharedserve.allocator.deviceplugin.api import deviceplugin_pb2 as pb
from tests.support.allocator import (
    A100,
    GPUS,
    T4,
    Node,
    allocate,
    ids,
    prefer,
    wait_for_log,
)
from tests.support.cli import invoke
from tests.support.gpus import write_inventory
from tests.support.kubelet import FakeKubelet
from tests.support.servers import SHAREDSERVE, clean_env, free_port


def health(response: pb.ListAndWatchResponse) -> dict[str, str]:
    return {d.ID: d.health for d in response.devices}


def gpu_health(response: pb.ListAndWatchResponse, gpu: str) -> set[str]:
    return {d.health for d in response.devices if d.ID.startswith(gpu + "::")}


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    """Bundle policy, 4 vGPUs per GPU, probes every second, metrics on."""
    node = Node(["--vgpus-per-gpu", "4", "--health-interval", "1"], metrics_port=free_port())
    node.plugin()
    yield node
    log = node.log()
    assert node.close() == 0, log


@pytest.fixture(scope="module")
def mps_dir() -> Iterator[Path]:
    """A running MPS control daemon, as far as the allocator can see: its pid file."""
    root = Path(tempfile.mkdtemp(prefix="ss-mps-", dir="/tmp"))
    (root / "pipe").mkdir()
    (root / "shm").mkdir()
    (root / "pipe" / "nvidia-cuda-mps-control.pid").write_text("4242\n")
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def spread_node(mps_dir: Path) -> Iterator[Node]:
    """Spread policy, vGPUs of 5 GiB (3 on the T4, 16 on the A100), multi-GPU, MPS and CDI."""
    args = ["--policy", "spread", "--vgpu-memory-mib", "5120", "--allow-multi-gpu", "--cdi"]
    args += ["--mps", "--mps-pipe-dir", str(mps_dir / "pipe")]
    node = Node([*args, "--mps-shm-dir", str(mps_dir / "shm"), "--health-interval", "1"])
    node.plugin()
    yield node
    log = node.log()
    assert node.close() == 0, log


def test_the_deprecated_replicas_flag_still_cuts_and_warns() -> None:
    """DaemonSets written before --vgpus-per-gpu pass --replicas: it still works, with a warning."""
    node = Node(["--replicas", "2"])
    try:
        response = node.plugin().first()
        assert [d.ID for d in response.devices] == ids(T4, 0, 1) + ids(A100, 0, 1)
    finally:
        log = node.log()
        assert node.close() == 0, log
    assert log.count("--replicas is deprecated: use --vgpus-per-gpu 2") == 1, log


def test_registration(node: Node) -> None:
    plugin = node.current()
    request = node.kubelet.registrations[0]
    assert request.version == "v1beta1"
    assert request.endpoint == "sharedserve-vgpu.sock"
    assert request.resource_name == "sharedserve.io/vgpu"
    assert request.options.get_preferred_allocation_available is True
    assert request.options.pre_start_required is False
    assert plugin.options == request.options  # GetDevicePluginOptions agrees
    assert (node.dir / "sharedserve-vgpu.sock").is_socket()


def test_list_and_watch(node: Node) -> None:
    response = node.current().first()
    assert [d.ID for d in response.devices] == ids(T4, 0, 1, 2, 3) + ids(A100, 0, 1, 2, 3)
    assert set(health(response).values()) == {"Healthy"}
    numa = {d.ID: [n.ID for n in d.topology.nodes] for d in response.devices}
    assert numa[f"{T4}::0"] == [0] and numa[f"{A100}::3"] == [1]


def test_allocate_env_contract(node: Node) -> None:
    response = allocate(node.current(), ids(A100, 2), ids(T4, 3, 1))
    one, two = response.container_responses
    assert dict(one.envs) == {
        "NVIDIA_VISIBLE_DEVICES": A100,
        "SHAREDSERVE_VGPU_IDS": f"{A100}::2",
        "SHAREDSERVE_GPU_MEMORY_FRACTION": "0.25",
        "SHAREDSERVE_GPU_MEMORY_MIB": "20480",
    }
    assert dict(two.envs) == {
        "NVIDIA_VISIBLE_DEVICES": T4,
        "SHAREDSERVE_VGPU_IDS": f"{T4}::1,{T4}::3",
        "SHAREDSERVE_GPU_MEMORY_FRACTION": "0.5",
        "SHAREDSERVE_GPU_MEMORY_MIB": "7680",
    }
    assert not one.mounts and not one.cdi_devices and not one.devices


@pytest.mark.parametrize(
    ("containers", "fragment"),
    [
        pytest.param([["GPU-0000::0"]], "unknown device", id="unknown-id"),
        pytest.param([ids(T4, 0), [f"{A100}::4"]], "unknown device", id="unknown-slot"),
        pytest.param([ids(T4, 0) + ids(A100, 0)], "--allow-multi-gpu", id="two-gpus"),
    ],
)
def test_allocate_refused(node: Node, containers: list[list[str]], fragment: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        allocate(node.current(), *containers)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in info.value.details()


def test_a_huge_device_id_is_refused_briefly(node: Node) -> None:
    # A 1 MiB ID echoed whole made the answer RESOURCE_EXHAUSTED (metadata over gRPC's limit).
    with pytest.raises(grpc.RpcError) as info:
        allocate(node.current(), ["G" * (1 << 20)])
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown device" in info.value.details() and len(info.value.details()) < 300


@pytest.mark.parametrize(
    "method", ["GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate"]
)
def test_random_bytes_are_invalid_argument(node: Node, method: str) -> None:
    # Were UNKNOWN, with a full traceback in the allocator's log for each.
    channel = node.current().channel
    path = f"/v1beta1.DevicePlugin/{method}"
    call = channel.unary_stream(path) if method == "ListAndWatch" else channel.unary_unary(path)
    with pytest.raises(grpc.RpcError) as info:
        list(call(b"\xff\xfe\x00garbage\x12\x9f", timeout=30))  # no serializer: sent as is
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid" in info.value.details()
    assert "Traceback" not in node.log()
    assert allocate(node.current(), ids(A100, 0)).container_responses  # and it still serves


def test_preferred_allocation_bundle(node: Node) -> None:
    plugin = node.current()
    # T4 has one vGPU left, the A100 all four: bundle tops up the T4 and keeps the A100 whole.
    available = ids(T4, 3) + ids(A100, 0, 1, 2, 3)
    assert prefer(plugin, available, 1) == ids(T4, 3)
    assert prefer(plugin, available, 2) == ids(A100, 0, 1)  # never split when one GPU fits
    assert prefer(plugin, available, 2, must=ids(A100, 2)) == ids(A100, 2, 0)
    with pytest.raises(grpc.RpcError) as info:
        prefer(plugin, available, 6)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    # Without --allow-multi-gpu it never prefers what Allocate refuses: it used to offer both
    # GPUs here, and the must-include pair spanning them.
    for size, must in ((5, ()), (2, ids(T4, 3) + ids(A100, 0))):
        with pytest.raises(grpc.RpcError) as info:
            prefer(plugin, available, size, must=must)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "--allow-multi-gpu" in info.value.details()


def test_pre_start_container(node: Node) -> None:
    request = pb.PreStartContainerRequest(devices_ids=ids(T4, 0))
    assert node.current().stub.PreStartContainer(request, timeout=5) == (
        pb.PreStartContainerResponse()
    )


def test_metrics(node: Node) -> None:
    plugin = node.current()
    prefer(plugin, ids(T4, 0, 1, 2, 3), 1)  # the kubelet offers these as free
    allocate(plugin, ids(T4, 2))
    text = node.metrics()
    labels = f'index="0",uuid="{T4}"'
    assert f"sharedserve_allocator_gpu_healthy{{{labels}}} 1.0" in text
    assert f"sharedserve_allocator_gpu_memory_total_bytes{{{labels}}} 1.610612736e+10" in text
    assert f"sharedserve_allocator_gpu_vgpus{{{labels}}} 4.0" in text
    assert 'simulated="true"' in text
    assert f'sharedserve_allocator_vgpu_allocated{{uuid="{T4}",vgpu="{T4}::2"}} 1.0' in text
    assert f'sharedserve_allocator_vgpu_allocated{{uuid="{T4}",vgpu="{T4}::1"}} 0.0' in text
    # Simulated GPUs have no used memory or utilization: those series stay empty.
    assert "sharedserve_allocator_gpu_memory_used_bytes{" not in text
    assert "sharedserve_allocator_gpu_utilization_ratio{" not in text


def test_health_unhealthy_and_recovery(node: Node) -> None:
    plugin = node.current()
    broken = [dict(g, healthy=g["uuid"] != A100) for g in GPUS]
    for change, expected_a100, expected_t4 in (
        (broken, "Unhealthy", "Healthy"),
        (GPUS, "Healthy", "Healthy"),
        ("not json", "Unhealthy", "Unhealthy"),  # the "driver" fails: every GPU, no crash
        (GPUS, "Healthy", "Healthy"),
    ):
        seen = len(plugin.responses)
        node.set_gpus(change)
        # The allocator re-reads the inventory every --health-interval (1 s); that the change
        # reaches the kubelet is the claim. How soon is left to a generous wait, not asserted:
        # on two loaded cores a second-scale bound failed where nothing was wrong.
        plugin.wait_for(
            lambda r, a=expected_a100, t=expected_t4: (
                gpu_health(r, A100) == {a} and gpu_health(r, T4) == {t}
            ),
            timeout=30,
            after=seen,
        )
        healthy = "1.0" if expected_a100 == "Healthy" else "0.0"
        assert f'gpu_healthy{{index="1",uuid="{A100}"}} {healthy}' in node.metrics()
    assert "is now Unhealthy" in node.log()


DEEP = '{"gpus": ' + "[" * 100_000 + "]" * 100_000 + "}"


def test_inventory_nested_too_deeply_at_a_probe_is_a_warning(node: Node) -> None:
    """The file turned bad while serving: a warning naming it, every GPU Unhealthy (as for any
    unreadable file), no traceback, and the same vGPUs back once it is mended."""
    plugin = node.current()
    try:
        seen = len(plugin.responses)
        node.set_gpus(DEEP)
        response = plugin.wait_for(
            lambda r: set(health(r).values()) == {"Unhealthy"}, timeout=30, after=seen
        )
        assert len(response.devices) == 8  # the inventory read at start is kept
    finally:
        seen = len(plugin.responses)
        node.set_gpus(GPUS)
    plugin.wait_for(lambda r: set(health(r).values()) == {"Healthy"}, timeout=30, after=seen)
    log = node.log()
    assert f"fake GPU inventory {node.gpus_file} is nested too deeply to be read" in log, log
    assert "Traceback" not in log and "RecursionError" not in log, log
    assert node.process.poll() is None


def test_kubelet_restarts(node: Node) -> None:
    for _ in range(3):
        before = len(node.kubelet.registrations)
        node.kubelet.restart()
        plugin = node.plugin(before + 1, timeout=30)  # registered again: how soon is load's
        response = plugin.first()
        assert len(response.devices) == 8
        assert node.kubelet.registrations[-1] == node.kubelet.registrations[0]
        envs = allocate(plugin, ids(T4, 0)).container_responses[0].envs
        assert envs["NVIDIA_VISIBLE_DEVICES"] == T4
    assert node.log().count("serving afresh and registering again") >= 3


def test_plugin_socket_deleted(node: Node) -> None:
    before = len(node.kubelet.registrations)
    (node.dir / "sharedserve-vgpu.sock").unlink()
    plugin = node.plugin(before + 1)
    assert len(plugin.first().devices) == 8
    assert (node.dir / "sharedserve-vgpu.sock").is_socket()


def test_spread_mixed_gpus_mps_cdi_multi_gpu(spread_node: Node, mps_dir: Path) -> None:
    plugin = spread_node.current()
    response = plugin.first()
    assert [d.ID for d in response.devices] == ids(T4, 0, 1, 2) + ids(A100, *range(16))
    assert set(health(response).values()) == {"Healthy"}
    pipe, shm = str(mps_dir / "pipe"), str(mps_dir / "shm")
    # The T4 is a third used, the A100 a sixteenth: spread picks the A100 though both fit.
    available = ids(T4, 1, 2) + ids(A100, *range(1, 16))
    assert prefer(plugin, available, 2) == ids(A100, 1, 2)
    grant = allocate(plugin, ids(T4, 1, 2) + ids(A100, 0)).container_responses[0]
    assert dict(grant.envs) == {
        "NVIDIA_VISIBLE_DEVICES": f"{T4},{A100}",
        "SHAREDSERVE_VGPU_IDS": ",".join(ids(T4, 1, 2) + ids(A100, 0)),
        "SHAREDSERVE_GPU_MEMORY_FRACTION": "0.666666,0.0625",  # the MiB's share, rounded down
        "SHAREDSERVE_GPU_MEMORY_MIB": "10240,5120",
        "CUDA_MPS_PIPE_DIRECTORY": pipe,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "6",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10240M,1=5120M",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    assert [(m.container_path, m.host_path, m.read_only) for m in grant.mounts] == [
        (pipe, pipe, False),
        ("/dev/shm", shm, False),
    ]
    assert [d.name for d in grant.cdi_devices] == [f"nvidia.com/gpu={T4}", f"nvidia.com/gpu={A100}"]


def test_mps_daemon_down_marks_every_vgpu_unhealthy(spread_node: Node, mps_dir: Path) -> None:
    plugin = spread_node.current()
    pid_file = mps_dir / "pipe" / "nvidia-cuda-mps-control.pid"
    for present, expected in ((False, "Unhealthy"), (True, "Healthy")):
        seen = len(plugin.responses)
        if present:
            pid_file.write_text("4243\n")
        else:
            pid_file.unlink()
        response = plugin.wait_for(
            lambda r, e=expected: set(health(r).values()) == {e}, timeout=5, after=seen
        )
        assert len(response.devices) == 19
    assert "MPS control daemon not running" in spread_node.log()


def test_sigterm_closes_streams_and_removes_socket() -> None:
    node = Node(["--health-interval", "1"])
    try:
        plugin = node.plugin()
        plugin.first()
        node.process.send_signal(signal.SIGTERM)
        assert node.process.wait(timeout=10) == 0, node.log()
        assert plugin.ended.wait(5) and plugin.ended_ok, plugin.error
        assert not (node.dir / "sharedserve-vgpu.sock").exists()
        assert (node.dir / "kubelet.sock").exists()  # the kubelet's own socket is not ours
        assert "stopped" in node.log()
    finally:
        node.close()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param(
            ["--vgpus-per-gpu", "0"], "--vgpus-per-gpu must be in 1..1024", id="zero-per-gpu"
        ),
        pytest.param(["--vgpus-per-gpu", "2", "--vgpu-memory-mib", "4096"], "not both", id="both"),
        pytest.param(["--replicas", "2", "--vgpu-memory-mib", "4096"], "not both", id="old-both"),
        pytest.param(["--replicas", "2", "--vgpus-per-gpu", "2"], "deprecated", id="old-and-new"),
        pytest.param(["--resource-name", "vgpu"], "--resource-name", id="bad-resource-name"),
        pytest.param(["--ignored-xids", "13,x"], "--ignored-xids", id="bad-xids"),
        pytest.param(["--health-interval", "0"], "--health-interval", id="zero-interval"),
        pytest.param(["--device-plugin-dir", "/" + "d" * 100], "too long", id="long-socket-path"),
    ],
)
def test_bad_flags(tmp_path: Path, args: list[str], fragment: str) -> None:
    # In process: refused before anything starts (test_sigterm_* and the rest run the real one).
    gpus = write_inventory(tmp_path / "gpus.json", GPUS)
    result = invoke("allocator", "--fake-gpus", str(gpus), *args)
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr


def test_inventory_nested_too_deeply_at_start_is_a_clear_error(tmp_path: Path) -> None:
    # The real process: a RecursionError would have been a traceback from the interpreter.
    gpus = write_inventory(tmp_path / "gpus.json", DEEP)
    command = [*SHAREDSERVE, "allocator", "--fake-gpus", str(gpus)]
    command += ["--device-plugin-dir", str(tmp_path)]
    result = subprocess.run(
        command, capture_output=True, text=True, env=clean_env(), timeout=60, check=False
    )
    assert result.returncode == 2, result.stderr
    expected = f"error: fake GPU inventory {gpus} is nested too deeply to be read"
    assert result.stderr.strip().splitlines()[-1] == expected, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_without_a_kubelet_it_says_what_it_waits_for_and_creates_nothing() -> None:
    # A host with no kubelet (or a mistyped --device-plugin-dir): the allocator must not make
    # the kubelet's directory, and must say what it waits for; once the kubelet comes, it
    # registers as usual.
    root = Path(tempfile.mkdtemp(prefix="ss-", dir="/tmp"))
    plugin_dir = root / "kubelet" / "device-plugins"
    gpus = write_inventory(root / "gpus.json", GPUS)
    log_path = root / "allocator.log"
    command = [*SHAREDSERVE, "allocator", "--fake-gpus", str(gpus)]
    command += ["--device-plugin-dir", str(plugin_dir)]
    kubelet = FakeKubelet(plugin_dir)
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=clean_env())
    try:
        waiting = f"waiting for the kubelet: its registration socket {plugin_dir}/kubelet.sock does"
        wait_for_log(log_path, waiting, process)
        assert not (root / "kubelet").exists()  # nothing of the kubelet's made by us
        plugin_dir.mkdir(parents=True)
        kubelet.start()
        kubelet.wait_plugins(1, timeout=60)
        assert len(kubelet.registrations) == 1
        text = log_path.read_text()
        assert text.count("waiting for the kubelet") == 1, text
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        kubelet.close()
        shutil.rmtree(root, ignore_errors=True)
    assert code == 0

"""The real ``sharedserve allocator`` process on a stand-in node, for any test that needs one.

Each ``Node`` is a short temp directory (unix socket paths must stay under 108 bytes) holding the
device plugin directory, a fake GPU inventory the test rewrites to fail and heal GPUs, the
``FakeKubelet`` (tests/support/kubelet.py) and the allocator child process.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sharedserve.allocator.deviceplugin.api import deviceplugin_pb2 as pb
from tests.support.gpus import gpu, write_inventory
from tests.support.kubelet import FakeKubelet, PluginConnection
from tests.support.servers import SHAREDSERVE, clean_env

T4 = "GPU-5f0c1a2b-0000-4000-8000-0000000000a0"
A100 = "GPU-5f0c1a2b-1111-4000-8000-0000000000a1"
GPUS = [
    gpu(0, 15360, uuid=T4, name="Tesla T4", numa_node=0),
    gpu(1, 81920, uuid=A100, name="A100-SXM4-80GB", numa_node=1),
]


def ids(gpu: str, *slots: int) -> list[str]:
    return [f"{gpu}::{s}" for s in slots]


class Node:
    def __init__(self, args: Sequence[str], metrics_port: int | None = None) -> None:
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        if metrics_port is not None:
            args = [*args, "--metrics-port", str(metrics_port)]
        self.root = Path(tempfile.mkdtemp(prefix="ss-", dir="/tmp"))
        self.dir = self.root / "dp"
        self.dir.mkdir()
        self.gpus_file = self.root / "gpus.json"
        self.set_gpus(GPUS)
        self.kubelet = FakeKubelet(self.dir)
        self.kubelet.start()
        self.log_path = self.root / "allocator.log"
        command = [*SHAREDSERVE, "allocator", "--fake-gpus", str(self.gpus_file)]
        command += ["--device-plugin-dir", str(self.dir), *args]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=clean_env()
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def set_gpus(self, gpus: list[dict[str, Any]] | str) -> None:
        """Rewrite the inventory (atomically): the allocator re-reads it on every probe."""
        write_inventory(self.gpus_file, gpus)

    def plugin(self, registrations: int = 1, timeout: float = 15) -> PluginConnection:
        """The kubelet's connection to the plugin once it has registered that many times and
        the first ListAndWatch response has arrived on it."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, f"allocator exited:\n{self.log()}"
            try:
                plugin = self.kubelet.wait_plugins(registrations, timeout=0.2)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"not registered {registrations}x:\n{self.log()}"
                    ) from None
        plugin.first(timeout=max(0.1, deadline - time.monotonic()))
        return plugin

    def current(self) -> PluginConnection:
        return self.plugin(len(self.kubelet.registrations) or 1)

    def metrics(self) -> str:
        """The text of ``/metrics`` (the node must have been started with a metrics port)."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            return str(response.read().decode())

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def close(self) -> int:
        code = self.stop()
        self.kubelet.close()
        shutil.rmtree(self.root, ignore_errors=True)
        return code


def allocate(plugin: PluginConnection, *containers: list[str]) -> pb.AllocateResponse:
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=c) for c in containers]
    )
    return plugin.stub.Allocate(request, timeout=5)


def prefer(
    plugin: PluginConnection, available: list[str], size: int, must: Sequence[str] = ()
) -> list[str]:
    container = pb.ContainerPreferredAllocationRequest(
        available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
    )
    request = pb.PreferredAllocationRequest(container_requests=[container])
    response = plugin.stub.GetPreferredAllocation(request, timeout=5)
    return list(response.container_responses[0].deviceIDs)


def wait_for_log(
    log_path: Path, text: str, process: subprocess.Popen[bytes], timeout: float = 60
) -> None:
    """Wait until ``text`` is in the child's log, failing with the log if it exits first or
    ``timeout`` seconds pass (a generous bound, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while text not in log_path.read_text() and process.poll() is None:
        assert time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.1)
    assert process.poll() is None, log_path.read_text()

"""The real ``sharedserve allocator --api dra`` process on a stand-in node, for the DRA tests
and the allocator benchmark.

A ``DraNode`` is a short temp directory (unix socket paths must stay under 108 bytes) holding the
kubelet's plugin registry and plugin directory, the CDI directory, a fake GPU inventory the test
rewrites to fail and heal GPUs, the kubelet stand-in (tests/support/kubelet_dra.py) and the fake
API server (tests/support/apiserver.py), which the driver reaches through a kubeconfig with the
real ``kubernetes`` client.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sharedserve.allocator.dra.cdi import spec_path
from sharedserve.contract import DRA_DRIVER
from tests.support.apiserver import FakeApiServer
from tests.support.gpus import write_inventory
from tests.support.kubelet_dra import FakeDraKubelet
from tests.support.servers import SHAREDSERVE, clean_env

NODE = "node-1"
SLICE = f"{NODE}-{DRA_DRIVER}"


class DraNode:
    def __init__(
        self,
        args: Sequence[str],
        gpus: list[dict[str, Any]],
        api: FakeApiServer | None = None,
        command: Sequence[str] = SHAREDSERVE,
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ss-dra-", dir="/tmp"))
        self.registry = self.root / "reg"
        self.plugin_dir = self.root / "plugin"
        self.cdi_dir = self.root / "cdi"
        self.registry.mkdir()
        self.gpus_file = self.root / "gpus.json"
        self.set_gpus(gpus)
        self.api = api or FakeApiServer().start()
        self.kubeconfig = self.api.write_kubeconfig(self.root / "kubeconfig")
        self.kubelet = FakeDraKubelet(self.registry)
        self.kubelet.start()
        self.command = [
            *command,
            "allocator",
            "--api",
            "dra",
            "--node-name",
            NODE,
            "--kubeconfig",
            str(self.kubeconfig),
            "--fake-gpus",
            str(self.gpus_file),
            "--plugin-registry-dir",
            str(self.registry),
            "--dra-plugin-dir",
            str(self.plugin_dir),
            "--cdi-dir",
            str(self.cdi_dir),
            *args,
        ]
        self.log_path = self.root / "allocator.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        """Start the driver (again, after ``stop``); its log is appended to."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=clean_env()
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def set_gpus(self, gpus: list[dict[str, Any]]) -> None:
        """Rewrite the inventory (atomically): the driver re-reads it on every probe."""
        write_inventory(self.gpus_file, gpus)

    def registered(self, count: int = 1, timeout: float = 15) -> None:
        """Wait until the kubelet stand-in has registered the driver ``count`` times."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None and self.process.poll() is None, (
                f"driver exited:\n{self.log()}"
            )
            try:
                self.kubelet.wait_registered(count, timeout=0.2)
                return
            except AssertionError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"not registered {count}x:\n{self.log()}") from None

    def slice(self, predicate: Any = lambda s: True, timeout: float = 15) -> dict[str, Any]:
        """Our ResourceSlice once it satisfies ``predicate``."""
        try:
            found: dict[str, Any] = self.api.wait_for_slice(
                lambda s: s["metadata"]["name"] == SLICE and predicate(s), timeout
            )
        except AssertionError as e:
            raise AssertionError(f"{e}\ndriver log:\n{self.log()}") from None
        return found

    def spec(self, uid: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(spec_path(self.cdi_dir, uid).read_text())
        return data

    def stop(self) -> int:
        process = self.process
        assert process is not None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode

    def close(self) -> int:
        code = self.stop()
        self.kubelet.close()
        self.api.close()
        shutil.rmtree(self.root, ignore_errors=True)
        return code

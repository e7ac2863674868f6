"""The load generator's processes for one measurement, seen from the sweep's side.

Locust never runs in the sweep's process (it monkey-patches with gevent on import), so this module
imports neither: it writes the run spec, starts ``python -m sharedserve.bench.loadgen master``
(plus local workers when one process cannot offer the load), stops them, and reads the result
file the master writes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
from typing import Any

from sharedserve.bench.offered import Offered
from sharedserve.config import BenchSettings
from sharedserve.errors import SharedServeError
from sharedserve.limits.affinity import on_cpus
from sharedserve.pack import Target
from sharedserve.pack.probe import free_port

__all__ = ["Loadgen", "loadgen_processes"]

log = logging.getLogger(__name__)

# What one gevent process comfortably offers before its own CPU becomes the limit: it sustains
# some 20,000 req/s on a core against a no-op endpoint (benchmarks/results/loadgen_capacity.md),
# so a quarter of that leaves room for real payloads. Rows whose load generator still ran above 80%
# of a core are flagged in the report.
_USERS_PER_PROCESS = 64
_RPS_PER_PROCESS = 5000.0


def loadgen_processes(settings: BenchSettings, offered: dict[str, Offered]) -> int:
    """Local Locust workers for this load: 0 when the master process alone can run the users."""
    if settings.loadgen_workers is not None:
        return settings.loadgen_workers
    if settings.external_workers:
        return 0  # remote workers were sized for the load (Kubernetes); the master only leads
    users = sum(o.users for o in offered.values())
    rate = sum(o.rate or 0.0 for o in offered.values())
    needed = max(math.ceil(users / _USERS_PER_PROCESS), math.ceil(rate / _RPS_PER_PROCESS))
    cpus = len(settings.loadgen_cpus) if settings.loadgen_cpus else os.cpu_count() or 1
    return 0 if needed <= 1 else min(needed, cpus)


def _spec(
    settings: BenchSettings, targets: list[Target], offered: dict[str, Offered], workers: int
) -> dict[str, Any]:
    return {
        "targets": [
            {
                "name": t.name,
                "model": t.model,
                "rest": t.rest,
                "grpc": t.grpc,
                "tls_ca_file": t.tls_ca_file,
                "tls_cert_file": t.tls_cert_file,
                "tls_key_file": t.tls_key_file,
                "users": offered[t.name].users,
                "rate": offered[t.name].rate,
            }
            for t in targets
        ],
        "pattern": settings.pattern.value,
        "max_in_flight": settings.max_in_flight,
        "protocol": settings.protocol,
        "warmup_s": settings.warmup_s,
        "duration_s": settings.duration_s,
        "stability_windows": settings.stability_windows,
        "max_duration_s": settings.max_measured_s,
        "expect_workers": workers,
        "connect_timeout_s": 120.0,
        "seed": settings.seed,
    }


class Loadgen:
    """The master process (and its local workers) of one measurement."""

    def __init__(
        self, settings: BenchSettings, targets: list[Target], offered: dict[str, Offered], tag: str
    ) -> None:
        directory = settings.out_dir / "loadgen"
        directory.mkdir(parents=True, exist_ok=True)
        self._cpus = settings.loadgen_cpus
        local = loadgen_processes(settings, offered)
        workers = local + settings.external_workers
        self.result_path = directory / f"{tag}-result.json"
        self.result_path.unlink(missing_ok=True)
        spec_path = directory / f"{tag}-spec.json"
        spec_path.write_text(json.dumps(_spec(settings, targets, offered, workers), indent=2))
        if settings.external_workers:
            host, port = "*", settings.master_bind_port  # remote workers must reach us
        else:
            host, port = "127.0.0.1", free_port()
        self.log_path = directory / f"{tag}.log"
        self._log = self.log_path.open("wb")
        module = [sys.executable, "-m", "sharedserve.bench.loadgen"]
        command = [*module, "master", "--spec", str(spec_path), "--result", str(self.result_path)]
        self.processes = [self._spawn([*command, "--bind", f"{host}:{port}"])]
        for _ in range(local):
            self.processes.append(self._spawn([*module, "worker", "--master", f"127.0.0.1:{port}"]))
        if local or settings.external_workers:
            log.info(
                "load generator: master + %d local + %d remote workers",
                local,
                settings.external_workers,
            )

    def _spawn(self, command: list[str]) -> subprocess.Popen[bytes]:
        # On its own CPUs where bench gave it some: it then neither waits for the servers' CPU
        # to send on time nor takes it from them.
        command = on_cpus(command, self._cpus)
        # Own session, as pack's replicas: a Ctrl-C in the terminal reaches the sweep alone,
        # which stops the load generator in order (``stop``) rather than see it die mid-run.
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def master(self) -> subprocess.Popen[bytes]:
        return self.processes[0]

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._log.close()

    def result(self) -> dict[str, Any]:
        code = self.master.returncode
        if code != 0 or not self.result_path.exists():
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise SharedServeError(
                f"the load generator failed (exit {code}); its log ends:\n{tail}"
            )
        data: dict[str, Any] = json.loads(self.result_path.read_text())
        if data["setup_errors"] and not any(t["requests"] for t in data["targets"].values()):
            raise SharedServeError("no request was sent: " + "; ".join(data["setup_errors"][:5]))
        return data

"""What a model server sets up before it serves: its listeners bound (REST's for good, gRPC's
probed, so a port in use fails before a framework is imported), its GPU cap sized against the
visible GPU, and the limits it reports (logged, ``/sharedserve/v1/limits``, GPU memory metrics).
``run.py`` calls these in its start-up order."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import grpc

from sharedserve.config import BatchingSettings
from sharedserve.enums import Paging
from sharedserve.errors import ConfigError, SharedServeError
from sharedserve.gpu.backend import GpuBackend, open_gpu_backend
from sharedserve.limits.cpu import CpuLimit
from sharedserve.limits.gpu import GpuCap, resolve_cap, select_visible_gpu
from sharedserve.server.memory.paging import Memory
from sharedserve.server.metrics.prometheus import GpuMemoryReading, Metrics
from sharedserve.server.settings import ServerSettings
from sharedserve.server.version.backends.base import Backend
from sharedserve.server.version.footprint import MIB

__all__ = [
    "batching_report",
    "bind",
    "bind_grpc",
    "check_grpc_port",
    "limits_report",
    "model_memory",
    "report_limits",
    "size_gpu_cap",
    "track_gpu_memory",
]

log = logging.getLogger(__name__)


def batching_report(batching: BatchingSettings | None) -> dict[str, Any]:
    if batching is None:
        return {"enabled": False}
    return {"enabled": True, **asdict(batching)}


def size_gpu_cap(settings: ServerSettings) -> tuple[GpuBackend | None, GpuCap]:
    """The cap sized against the visible GPU, and the GPU backend, left open for metrics."""
    backend = open_gpu_backend(settings.gpu.fake_gpus)
    try:
        gpus = backend.list_gpus() if backend is not None else []
        gpu = select_visible_gpu(gpus, settings.gpu.visible_devices)
        return backend, resolve_cap(settings.gpu.cap, gpu)
    except SharedServeError:
        if backend is not None:
            backend.close()
        raise


def limits_report(
    cap: GpuCap, cpu: CpuLimit, threads: tuple[int, int], batching: dict[str, Any]
) -> dict[str, Any]:
    """The ``/sharedserve/v1/limits`` body: the caps in force, where each came from, whether
    it is enforced (README shows it)."""
    return {
        "device": cap.share.uuid if cap.enforced and cap.share.uuid else "cpu",
        "gpu_memory_fraction": cap.share.fraction,
        "gpu_memory_mib": cap.share.mib,
        "gpu_memory_total_mib": cap.total_mib,
        "gpu_memory_source": cap.source.value,
        "gpu_memory_enforced": cap.enforced,
        "cpu_limit": cpu.cores,
        "cpu_limit_source": cpu.source.value,
        "cpu_limit_cgroup": cpu.cgroup_path,
        "available_cpus": cpu.available_cpus,
        "intra_op_threads": threads[0],
        "inter_op_threads": threads[1],
        "batching": batching,
    }


def model_memory(settings: ServerSettings, cap: GpuCap, metrics: Metrics) -> Memory:
    """What the models may hold together: the GPU cap in force (recorded, on a host without a
    GPU); ConfigError for ``--paging lru`` without one, which would have nothing to page by."""
    capacity = None if cap.share.mib is None else cap.share.mib * MIB
    paging = settings.paging is Paging.LRU
    if paging and capacity is None:
        raise ConfigError(
            "--paging lru pages models by the GPU memory cap: give --gpu-memory-mib (or "
            "--gpu-memory-fraction on a GPU), or set the env contract's"
        )
    return Memory(
        metrics.paging, capacity, paging=paging, page_in_timeout_s=settings.page_in_timeout_s
    )


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _in_use(api: str, host: str, port: int, error: OSError | str) -> str:
    """The one line for a port that cannot be listened on, naming the flag that moves it: a
    second server started with only --rest-port changed meets the first one's gRPC port."""
    reason = error.strerror if isinstance(error, OSError) else error
    flag = "--rest-port" if api == "REST" else "--grpc-port"
    return (
        f"cannot listen for {api} on {_address(host, port)}: {reason}; give this server "
        f"another {flag} (0 picks a free one)"
    )


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must be IPPROTO_TCP, not 0: asyncio turns on TCP_NODELAY only for sockets that say
    # so. Without it, Nagle holds back a response's body until the client ACKs its headers,
    # which a keep-alive client delays by up to 40 ms (delayed ACK).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ConfigError(_in_use("REST", host, port, e)) from e
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def check_grpc_port(host: str, port: int) -> None:
    """Fail now if gRPC's own bind, made once the model's framework is up, is bound to fail.

    A probe socket binds as gRPC core's listener does (SO_REUSEADDR on, SO_REUSEPORT off:
    grpc_api sets ``grpc.so_reuseport=0``) and is closed at once. A wildcard host is bound by
    gRPC as ``[::]`` (dual-stack) or, failing that, ``0.0.0.0``: either will do, as for gRPC.
    The port can still be taken in between; gRPC's bind then fails with its own error.
    """
    if port == 0:
        return
    if host in ("", "0.0.0.0", "::"):
        candidates = [(socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")]
    else:
        candidates = [(socket.AF_INET6 if ":" in host else socket.AF_INET, host)]
    errors: list[OSError] = []
    for family, address in candidates:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and address == "::":
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                probe.bind((address, port))
            return
        except OSError as e:
            errors.append(e)
    first = errors[0]
    raise ConfigError(_in_use("gRPC", host, port, first)) from first


def bind_grpc(
    server: grpc.aio.Server,
    host: str,
    port: int,
    credentials: grpc.ServerCredentials | None = None,
) -> int:
    """-> the port bound; a secure one (TLS) with ``credentials``."""
    address = _address(host, port)
    try:
        if credentials is not None:
            bound = server.add_secure_port(address, credentials)
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError as e:  # grpc raises RuntimeError("Failed to bind ...")
        raise SharedServeError(_in_use("gRPC", host, port, str(e))) from e
    if bound == 0:  # older grpc versions signal failure with port 0
        raise SharedServeError(_in_use("gRPC", host, port, "in use or not allowed"))
    return int(bound)


def gpu_memory_reader(
    backend: GpuBackend | None, cap: GpuCap, framework: Backend
) -> Callable[[], GpuMemoryReading]:
    """Reads this process's GPU memory at scrape time through the backend opened at start-up.

    A simulated backend answers None itself, so no figure is ever made up here.
    """
    mib = 1024 * 1024
    cap_bytes = None if cap.share.mib is None else float(cap.share.mib * mib)
    pid = os.getpid()
    device = cap.share.uuid

    def read() -> GpuMemoryReading:
        pool = framework.allocator_reserved_bytes()
        pool_bytes = None if pool is None else float(pool)
        if backend is None or device is None:
            return None, cap_bytes, pool_bytes
        try:
            used = backend.process_memory_mib(device, pid)
        except SharedServeError:
            used = None
        return (None if used is None else float(used * mib)), cap_bytes, pool_bytes

    return read


def report_limits(
    settings: ServerSettings, cap: GpuCap, cpu: CpuLimit, threads: tuple[int, int]
) -> dict[str, Any]:
    """Logs the limits in force; -> the ``/sharedserve/v1/limits`` body."""
    log.info(
        "limits: cpu=%s (%s) threads intra=%d inter=%d; gpu cap fraction=%s mib=%s (%s, %s)",
        cpu.cores,
        cpu.source.value,
        threads[0],
        threads[1],
        cap.share.fraction,
        cap.share.mib,
        cap.source.value,
        "enforced" if cap.enforced else "not enforced",
    )
    return limits_report(cap, cpu, threads, batching_report(settings.batching))


def track_gpu_memory(
    metrics: Metrics, gpu_backend: GpuBackend | None, cap: GpuCap, framework: Backend
) -> None:
    if cap.enforced:
        # NVML stays open for the life of the process: a scrape is then one query, not an
        # initialisation of the driver library.
        metrics.track_gpu_memory(gpu_memory_reader(gpu_backend, cap, framework))
    elif gpu_backend is not None:
        gpu_backend.close()

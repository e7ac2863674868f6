"""Start a model server: limits first, then the listener, then the models.

Order matters: both ports are taken (gRPC's probed) before a framework is imported, so a port in
use fails at once; the GPU cap and thread pools are applied before the framework first touches
the device; the REST listener serves before the model loads so status and readiness probes
answer (LOADING) during a long load; predictions are refused with 503 until warm-up completes.
The models load one after another in one loader thread, each AVAILABLE as soon as it is warm,
so a slow one does not hold the others' readiness (the server's waits for all of them). With
``--model`` a model that fails to load stops the server (exit 1); with many, it is reported
(status END with its error, the repository index) and the others serve. From then on
``model_manager.py`` loads and unloads models on request, and on a model config file's re-read.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import threading
from collections.abc import Sequence

import uvicorn

from sharedserve.enums import Framework
from sharedserve.errors import ConfigError
from sharedserve.framework_output import require_installed
from sharedserve.limits.cpu import CpuLimit, resolve_cpu_limit, thread_pool_sizes
from sharedserve.server.inference.scheduler import Share, model_call_slots
from sharedserve.server.memory.paging import Memory
from sharedserve.server.metrics.prometheus import EVERY_MODEL, Metrics
from sharedserve.server.process.connections import protocol_class
from sharedserve.server.process.grpc_server import GrpcHealth, create_grpc_server
from sharedserve.server.process.http import create_app
from sharedserve.server.process.shutdown import GracefulServer
from sharedserve.server.process.start_up import (
    bind,
    bind_grpc,
    check_grpc_port,
    model_memory,
    report_limits,
    size_gpu_cap,
    track_gpu_memory,
)
from sharedserve.server.repository.config_file import read_model_config_file
from sharedserve.server.repository.directory import read_model_repository
from sharedserve.server.repository.manager import (
    Catalog,
    ConfigCatalog,
    ModelManager,
    RepositoryCatalog,
)
from sharedserve.server.repository.registry import ModelRegistry
from sharedserve.server.repository.versions import VersionToServe, versions_of
from sharedserve.server.settings import ServerSettings
from sharedserve.server.version.backends import make_backend
from sharedserve.server.version.backends.base import AppliedRuntime, Backend, RuntimeConfig
from sharedserve.server.version.model import ServedModel
from sharedserve.server.version.source import find_model
from sharedserve.server.wire.body_bytes import DECODE_WAIT_S, ByteBudget

__all__ = ["run"]

log = logging.getLogger(__name__)


def run(settings: ServerSettings, models: Sequence[VersionToServe] | None = None) -> int:
    """Serve ``models`` (None: what ``settings`` names: ``--model``'s one, or a model config
    file's or repository's) until SIGINT/SIGTERM; returns the process exit code."""
    # Limits before the model directory: a bad --cpu-limit is reported as such, not as a
    # side effect of some other check.
    cpu = resolve_cpu_limit(settings.cpu_limit_cores)
    threads = thread_pool_sizes(cpu)
    catalog: Catalog | None = None
    if models is None:
        models, catalog = _versions(settings)
    if not models:
        raise ConfigError("no model to serve: the model config file or repository names none")
    if catalog is None:  # --model: its framework missing is the one line to say, and first
        require_installed(models[0].source.framework)
    # The ports before the framework: a port in use fails in milliseconds, not after seconds of
    # TensorFlow start-up. The REST socket is bound for good (connections made meanwhile wait in
    # its backlog); gRPC's can only be probed.
    sock = bind(settings.rest.host, settings.rest.port)
    try:
        check_grpc_port(settings.rest.host, settings.grpc.port)
        return _serve(settings, sock, cpu, threads, entries=models, catalog=catalog)
    finally:
        sock.close()  # closed already by the server once it ran; not if start-up failed


def _versions(settings: ServerSettings) -> tuple[list[VersionToServe], Catalog | None]:
    """What ``--model``, ``--model-config-file`` or ``--model-repository`` names, on disk, and
    what may be loaded while serving (None: nothing but ``--model``'s model, loaded at start)."""
    batching = settings.batching
    if settings.model_config_file is not None:
        entries = read_model_config_file(settings.model_config_file)
        return versions_of(entries, batching), ConfigCatalog(entries, batching)
    if settings.model_repository is not None:
        versions = versions_of(read_model_repository(settings.model_repository), batching)
        return versions, RepositoryCatalog(settings.model_repository, batching)
    assert settings.model_dir is not None  # ServerSettings.validate: exactly one is given
    return [VersionToServe(find_model(settings.model_dir, settings.model_name), batching)], None


def _process_label(entries: Sequence[VersionToServe]) -> str:
    """The process-wide series' model label: the model's name, or every model's mark."""
    names = {entry.source.name for entry in entries}
    return names.pop() if len(names) == 1 else EVERY_MODEL


def _log_models(entries: Sequence[VersionToServe]) -> None:
    for entry in entries:
        source = entry.source
        log.info(
            "serving model %r version %d (%s) from %s",
            source.name,
            source.version,
            source.framework.value,
            source.path,
        )


def _configure(
    entries: Sequence[VersionToServe],
    backends: Sequence[Backend],
    config: RuntimeConfig,
    configured: dict[Framework, AppliedRuntime],
) -> AppliedRuntime:
    """Each framework's thread pools and GPU cap, once (into ``configured``): they can be set
    only before its runtime starts. -> the first model's framework's, which the limits report
    and the metrics show."""
    for entry, backend in zip(entries, backends, strict=True):
        if entry.source.framework not in configured:
            configured[entry.source.framework] = backend.configure(config)
    return configured[entries[0].source.framework]


def _registry(
    settings: ServerSettings,
    entries: Sequence[VersionToServe],
    backends: Sequence[Backend],
    metrics: Metrics,
    memory: Memory,
    *,
    inter_op_threads: int,
) -> ModelRegistry:
    """The models named at start, not loaded yet, in one scheduler and one memory."""
    return ModelRegistry.build(
        metrics,
        entries,
        [entry.served_model(each) for entry, each in zip(entries, backends, strict=True)],
        settings.request_element_limit,
        slots=model_call_slots(inter_op_threads),
        defaults=Share(max_inflight=settings.max_inflight_per_model),
        memory=memory,
    )


def _poll_task(settings: ServerSettings, manager: ModelManager) -> asyncio.Task[None] | None:
    """TF Serving's ``--model_config_file_poll_wait_seconds``, when given."""
    path, wait_s = settings.model_config_file, settings.model_config_poll_s
    if path is None or not wait_s:
        return None
    return asyncio.get_running_loop().create_task(manager.poll_config_file(path, wait_s))


def _load_at_start(
    registry: ModelRegistry, loop: asyncio.AbstractEventLoop, health: GrpcHealth, *, one_model: bool
) -> bool:
    """In the loader thread: every model named at start; False when ``--model``'s (the one
    model) failed to load. With many models a failure is logged and the others load."""

    def failing(model: ServedModel, e: Exception) -> None:
        log.error("failed to load model %r: %s", model.name, getattr(e, "message", e))

    try:
        # Each model's gRPC health turns SERVING as it turns AVAILABLE; the server's at the end.
        registry.load(
            lambda name: asyncio.run_coroutine_threadsafe(health.model_serving(name), loop),
            None if one_model else failing,
        )
    except Exception as e:
        failing(next(m for m in registry.models() if not m.serving), e)
        return False
    asyncio.run_coroutine_threadsafe(health.serving(), loop)
    # The framework and the model leave hundreds of thousands of objects that live as long as
    # the process. A large JSON body allocates enough lists to start full collections, each of
    # which would walk all of them; frozen, they are skipped (benchmarks/README.md).
    gc.freeze()
    return True


def _serve(
    settings: ServerSettings,
    sock: socket.socket,
    cpu: CpuLimit,
    threads: tuple[int, int],
    *,
    entries: Sequence[VersionToServe],
    catalog: Catalog | None,
) -> int:
    gpu_backend, gpu_cap = size_gpu_cap(settings)
    metrics = Metrics(_process_label(entries))
    memory = model_memory(settings, gpu_cap, metrics)  # before a framework: paging needs a cap
    backends = [make_backend(entry.source) for entry in entries]
    # Many models: TorchScript's per-model specialised plans cost more than they bring.
    runtime = RuntimeConfig(gpu_cap, *threads, torchscript_optimize=catalog is None)
    configured: dict[Framework, AppliedRuntime] = {}
    applied = _configure(entries, backends, runtime, configured)
    cap, threads = applied.gpu_cap, (applied.intra_op_threads, applied.inter_op_threads)
    report = report_limits(settings, cap, cpu, threads)
    registry = _registry(settings, entries, backends, metrics, memory, inter_op_threads=threads[1])
    manager = ModelManager(
        registry,
        catalog,
        runtime,
        set(configured),
        settings.request_element_limit,
        batching=settings.batching,
    )
    track_gpu_memory(metrics, gpu_backend, cap, backends[0])
    # One budget for every API: it bounds the memory of decoding, whoever sent the bytes.
    decoding = ByteBudget(settings.rest.decoding_limit, DECODE_WAIT_S)
    app = create_app(
        registry,
        lambda: {**report, **registry.models_report()},
        settings.rest,
        settings.connections,
        decoding,
        manager=manager,
    )

    config = uvicorn.Config(
        app,
        http=protocol_class(settings.connections, metrics.refuse_connection),
        timeout_keep_alive=settings.connections.keep_alive_timeout_s,  # type: ignore[arg-type]
        log_level="warning",
        access_log=False,
        lifespan="off",
    )
    failed = threading.Event()

    def load(
        loop: asyncio.AbstractEventLoop,
        server: GracefulServer,
        health: GrpcHealth,
        loaded: asyncio.Event,
    ) -> None:
        try:
            if not _load_at_start(registry, loop, health, one_model=catalog is None):
                failed.set()
                server.should_exit = True
        finally:
            loop.call_soon_threadsafe(loaded.set)

    async def serve() -> None:
        health = GrpcHealth(list(registry.served()))
        await health.not_yet()
        manager.on_available, manager.on_gone = health.model_serving, health.model_not_serving
        grpc_server = create_grpc_server(
            registry,
            settings.grpc.max_message_bytes,
            settings.connections,
            decoding,
            health_service=health,
            manager=manager,
        )
        server = GracefulServer(config, settings.shutdown, registry, grpc_server, health)
        grpc_port = bind_grpc(grpc_server, settings.rest.host, settings.grpc.port)
        await grpc_server.start()
        await registry.start()
        _log_models(entries)
        log.info(
            "REST API on http://%s:%d, gRPC on %s:%d",
            *sock.getsockname()[:2],
            settings.rest.host,
            grpc_port,
        )
        loaded = asyncio.Event()
        manager.wait_for(loaded)
        threading.Thread(
            target=load,
            args=(asyncio.get_running_loop(), server, health, loaded),
            name="model-loader",
            daemon=True,
        ).start()
        poll = _poll_task(settings, manager)
        try:
            await server.serve(sockets=[sock])
        finally:
            if poll is not None:
                poll.cancel()
            await server.stop_grpc()
            await registry.stop()

    asyncio.run(serve())
    registry.unload()
    log.info("server stopped")
    return 1 if failed.is_set() else 0

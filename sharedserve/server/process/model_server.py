"""One model server process: ``ModelServer`` builds and owns what serves, in start-up order.

Limits first: the GPU cap sized against the visible GPU, the thread pools against the CPU
limit, the first framework configured with both before it touches the device. Then the
listeners: REST (its socket bound by the caller, before any framework was imported, so a port
in use fails at once) and gRPC, with every wire format on each; status and readiness answer
(LOADING) during a long load, and predictions get 503 until their model is warm. Then the
models, loaded by the repository manager one after another, each AVAILABLE as soon as it is
warm. With ``--model`` a model that fails to load stops the server (exit 1); with many, it is
reported (status END with its error, the repository index, the log, metrics) and the others
serve, unless ``--exit-on-error``. Readiness then follows ``--strict-readiness``
(``repository/registry.py``). SIGTERM stops it gracefully (``shutdown.py``).

``serve`` (``run.py``) and the tests' in-process servers run this same object.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import Any

import uvicorn

from sharedserve.errors import ConfigError
from sharedserve.limits.cpu import CpuLimit, resolve_cpu_limit, thread_pool_sizes
from sharedserve.server.inference import (
    InferencePath,
    Share,
    model_call_slots,
    model_call_threads,
)
from sharedserve.server.metrics import EVERY_MODEL, Metrics
from sharedserve.server.process.connections import protocol_class
from sharedserve.server.process.grpc_server import GrpcHealth, create_grpc_server
from sharedserve.server.process.http import create_app
from sharedserve.server.process.shutdown import GracefulServer
from sharedserve.server.process.start_up import (
    bind_grpc,
    model_memory,
    report_limits,
    size_gpu_cap,
    track_gpu_memory,
)
from sharedserve.server.process.tls import server_tls, tls_protocol, tls_words
from sharedserve.server.repository import (
    Catalog,
    FixedCatalog,
    ModelManager,
    ModelRegistry,
    poll_config_file,
)
from sharedserve.server.settings import ServerSettings
from sharedserve.server.version import (
    BackendFactory,
    Frameworks,
    ModelSource,
    RuntimeConfig,
    freeze_process,
    make_backend,
)
from sharedserve.server.wire import DECODE_WAIT_S, DecodePool, DecodingBytes, decode_workers

__all__ = ["ModelServer"]

log = logging.getLogger(__name__)


class ModelServer:
    """The process's listeners, models, metrics and stop; see the module docstring."""

    def __init__(
        self,
        settings: ServerSettings,
        catalog: Catalog,
        *,
        cpu: CpuLimit | None = None,
        backends: BackendFactory = make_backend,
    ) -> None:
        """``catalog``: what to serve (``--model``'s fixed one, a model config, a repository);
        ``cpu``: the CPU limit resolved already (None: resolved here); ``backends``: how a
        model version's backend is made from its source (the frameworks', by default)."""
        self.settings, self.catalog = settings, catalog
        self.tls = server_tls(settings.tls)  # its files read and checked before anything loads
        cpu = cpu or resolve_cpu_limit(settings.cpu_limit_cores)
        self.one_model = isinstance(catalog, FixedCatalog)
        # The names, and the first readable model's versions for its framework: the manager
        # reads every model's as it loads them, once the listeners answer.
        names = catalog.names()
        if not names:
            raise ConfigError("no model to serve: the model config file or repository names none")
        first_source = _first_source(catalog, names)
        gpu_backend, gpu_cap = size_gpu_cap(settings)
        self.metrics = Metrics(names[0] if len(names) == 1 else EVERY_MODEL)
        self.memory = model_memory(settings, gpu_cap, self.metrics)  # paging needs a cap
        intra_op, cores = thread_pool_sizes(cpu)
        slots = model_call_slots(cores)
        # TensorFlow's inter-op pool runs the kernels of every call in the process from one
        # queue: with fewer threads than calls running, a light model's few kernels wait
        # behind a heavy neighbour's (a `tiny` beside `mobilenet_v2` over gRPC, one core: p99
        # 3.9x its p99 in a process of its own with 1 thread, 0.7x with one a call:
        # benchmarks/results/multimodel_cpu.md). One per call that
        # may run, so the scheduler decides who runs, not that queue. Many models:
        # TorchScript's per-model specialised plans cost more than they bring.
        runtime = RuntimeConfig(gpu_cap, intra_op, model_call_threads(slots), self.one_model)
        self.frameworks = Frameworks(runtime, backends)
        first = self.frameworks.backend(first_source)  # its framework configured, as the cap says
        # The framework leaves hundreds of thousands of objects that live as long as the
        # process: frozen before any model loads, no collection walks them again, neither the
        # one that frees a model paged out or unloaded (a pause every other model's requests
        # wait through) nor one a large JSON body's lists start (benchmarks/README.md).
        freeze_process()
        applied = self.frameworks.applied[first_source.framework]
        threads = (applied.intra_op_threads, applied.inter_op_threads)
        self.limits = report_limits(settings, applied.gpu_cap, cpu, threads)
        track_gpu_memory(self.metrics, gpu_backend, applied.gpu_cap, first)
        self.path = InferencePath(
            self.metrics,
            self.memory,
            slots,
            Share(max_inflight=settings.max_inflight_per_model),
            settings.request_element_limit,
        )
        self.registry = ModelRegistry(self.metrics, strict=settings.strict_readiness)
        self.health = GrpcHealth(sorted(names), lambda: self.registry.ready)
        self.manager = ModelManager(
            self.registry,
            self.path,
            self.memory,
            self.frameworks,
            catalog,
            events=self.health,
            roots=catalog.roots(settings.allowed_model_roots),
        )
        if settings.admin.key is None and not self.one_model:
            log.warning(
                "the management APIs (model repository, HandleReloadConfigRequest) are open to "
                "every client of these ports; --admin-key-file restricts them to the platform"
            )
        # One decoding limit for every API: it bounds decoding's memory, whoever sent the bytes.
        self.decoding = DecodingBytes(settings.rest.decoding_limit, DECODE_WAIT_S)
        # A large JSON body's parse holds the interpreter lock every model's requests need.
        self.decode_pool = DecodePool(decode_workers(slots))
        self.app = create_app(
            self.registry,
            self.path,
            self.manager,
            limits=lambda: {**self.limits, **self.report()},
            rest=settings.rest,
            connections=settings.connections,
            decoding=self.decoding,
            admin=settings.admin,
            pool=self.decode_pool,
        )
        self.rest_address: tuple[str, int] | None = None
        self.grpc_port: int | None = None
        self.started = threading.Event()
        """The listeners answer (set from the server's loop)."""
        self.loaded = threading.Event()
        """The models named at start have loaded or failed."""
        self.failed = False
        """``--model``'s one model, or with ``--exit-on-error`` any named at start, failed to
        load: the server stopped (exit 1)."""
        self._server: GracefulServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def report(self) -> dict[str, Any]:
        """For ``/sharedserve/v1/limits``, beside the limits: the scheduler's threads, the
        process's memory, and each routed model's share, CPU seconds by phase and versions
        (state, budget, footprint, last use)."""
        shares = self.path.shares()
        served = self.registry.served()
        cpu = self.metrics.cpu.totals(served)
        models: dict[str, Any] = {}
        for name, numbers in sorted(served.items()):
            share = shares.get(name, self.path.defaults)
            versions = self.registry.versions_by_number(name)
            models[name] = {
                "weight": share.weight,
                "max_inflight": share.max_inflight,
                "cpu_seconds": cpu[name],
                "versions": {str(n): versions[n].report() for n in numbers},
            }
        return {
            "model_call_slots": self.path.scheduler.slots,
            "memory": self.memory.report(),
            "models": models,
        }

    def run(self, sock: socket.socket) -> int:
        """Serve on ``sock`` (REST, bound) until a stop signal; -> the exit code."""
        try:
            asyncio.run(self.serve(sock))
        finally:
            self.manager.close()
            self.decode_pool.close()
        log.info("server stopped")
        return 1 if self.failed else 0

    def stop(self) -> None:
        """From another thread: stop as a SIGTERM would (not ready, drain, close), but for the
        last resort of exiting the process, which is the caller's."""
        if self._loop is not None and self._server is not None:
            server = self._server
            self._loop.call_soon_threadsafe(lambda: server.begin_stop(last_resort=False))

    async def serve(self, sock: socket.socket) -> None:
        settings = self.settings
        await self.health.not_yet()
        grpc_server = create_grpc_server(
            self.registry,
            self.path,
            self.manager,
            max_message_bytes=settings.grpc.max_message_bytes,
            connections=settings.connections,
            decoding=self.decoding,
            health_service=self.health,
            admin=settings.admin,
        )
        refused = self.metrics.refuse_connection
        http: Any = protocol_class(settings.connections, refused)
        if self.tls is not None:
            timeout_s = settings.connections.header_timeout_s
            http = tls_protocol(http, self.tls.context, timeout_s, refused)
        config = uvicorn.Config(
            self.app,
            http=http,
            timeout_keep_alive=settings.connections.keep_alive_timeout_s,  # type: ignore[arg-type]
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
        server = GracefulServer(config, settings.shutdown, self.registry, grpc_server, self.health)
        self._server, self._loop = server, asyncio.get_running_loop()
        credentials = None if self.tls is None else self.tls.grpc_credentials
        self.grpc_port = bind_grpc(grpc_server, settings.rest.host, settings.grpc.port, credentials)
        await grpc_server.start()
        self.rest_address = sock.getsockname()[:2]
        log.info(
            "REST API on %s://%s:%d, gRPC on %s:%d%s",
            "http" if self.tls is None else "https",
            *self.rest_address,
            settings.rest.host,
            self.grpc_port,
            tls_words(self.tls),
        )
        routed = asyncio.Event()
        loading = asyncio.get_running_loop().create_task(self._load(server, routed))
        poll = self._poll()
        try:
            # Connections wait in the REST socket's backlog meanwhile: status answers every
            # model from the first request on.
            await routed.wait()
            self._loop.call_soon(self.started.set)
            await server.serve(sockets=[sock])
        finally:
            for task in (loading, poll):
                if task is not None:
                    task.cancel()
            await server.stop_grpc()
            await self.path.stop()

    async def _load(self, server: GracefulServer, routed: asyncio.Event) -> None:
        try:
            failures: dict[str, str] | None = None  # None: the loads themselves broke
            try:
                failures = await self.manager.start(routed)
            except Exception:
                log.exception("loading the models named at start failed")
                routed.set()
            if (failures is None or failures) and (self.one_model or self.settings.exit_on_error):
                if failures and not self.one_model:
                    log.error(
                        "stopping (--exit-on-error): %s",
                        "; ".join(
                            f"{name!r} failed to load: {why}" for name, why in failures.items()
                        ),
                    )
                self.failed = True
                server.should_exit = True
                return
            self.registry.settle()
            await self.health.settled()
        finally:
            self.loaded.set()

    def _poll(self) -> asyncio.Task[None] | None:
        """TF Serving's ``--model_config_file_poll_wait_seconds``, when given."""
        path, wait_s = self.settings.model_config_file, self.settings.model_config_poll_s
        if path is None or not wait_s:
            return None
        return asyncio.get_running_loop().create_task(poll_config_file(self.manager, path, wait_s))


def _first_source(catalog: Catalog, names: list[str]) -> ModelSource:
    """The first model version the catalog can read (its framework is configured first, as the
    cap says); ConfigError, naming each model and why, where none can be: a server with no model
    it could ever load is refused at start, as one with none named is."""
    why: list[str] = []
    for name in names:
        try:
            return catalog.versions(name)[0].source
        except ConfigError as e:
            why.append(e.message)
    raise ConfigError(
        f"no model to serve: none of the {len(names)} models named can be read: " + "; ".join(why)
    )

"""``sharedserve serve`` below its flags: what to serve, the ports, then the ``ModelServer``.

The interpreter hands its lock over more often than Python's default (``SWITCH_INTERVAL_S``).
Order matters: the CPU limit is resolved first (a bad ``--cpu-limit`` is reported as such),
then what the flags name is read from disk, then both ports are taken (gRPC's probed) before a
framework is imported, so a port in use fails in milliseconds, not after seconds of TensorFlow
start-up; the REST socket is bound for good (connections made meanwhile wait in its backlog).
"""

from __future__ import annotations

import sys

from sharedserve.framework_output import require_installed
from sharedserve.limits.cpu import resolve_cpu_limit
from sharedserve.server.process.model_server import ModelServer
from sharedserve.server.process.start_up import bind, check_grpc_port
from sharedserve.server.repository import (
    Catalog,
    ConfigCatalog,
    FixedCatalog,
    RepositoryCatalog,
    VersionToServe,
    check_model_repository,
    read_model_config_file,
    read_model_repository,
    versions_of,
)
from sharedserve.server.settings import ServerSettings
from sharedserve.server.version import ModelSettings, find_model

__all__ = ["SWITCH_INTERVAL_S", "run"]

SWITCH_INTERVAL_S = 0.001
"""How long a thread holding the interpreter lock runs Python before one waiting for it takes
it (Python's default: 5 ms). Every model's requests hop between the event loop and the model
threads, each hop a wait for the lock, which a neighbour's decoding or TensorFlow's loading
holds: at 1 ms a light model's p99 beside a model sent 3 MiB JSON bodies was 1.36-1.54x its
p99 in a process of its own, against 1.72-1.97x at 5 ms (before large bodies were parsed in
worker processes); the model calls themselves let go of the lock."""


def run(settings: ServerSettings) -> int:
    """Serve what ``settings`` names (``--model``'s one model, or a model config file's or
    repository's) until SIGINT/SIGTERM; returns the process exit code."""
    cpu = resolve_cpu_limit(settings.cpu_limit_cores)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    catalog = catalog_of(settings)
    if isinstance(catalog, FixedCatalog):  # its framework missing is the one line to say, first
        require_installed(catalog.versions(catalog.names()[0])[0].source.framework)
    sock = bind(settings.rest.host, settings.rest.port)
    try:
        check_grpc_port(settings.rest.host, settings.grpc.port)
        return ModelServer(settings, catalog, cpu=cpu).run(sock)
    finally:
        sock.close()  # closed already by the server once it ran; not if start-up failed


def catalog_of(settings: ServerSettings) -> Catalog:
    """What ``--model``, ``--model-config-file`` or ``--model-repository`` names, read from
    disk now, so that what cannot be served at all is refused before anything starts: a config
    file that does not parse, a repository that does not exist. A model of many that cannot be
    read is the manager's to report while the others serve, as it would be at run time; with
    ``--exit-on-error`` every model's versions are read now, and the first that cannot be is
    refused here."""
    batching = settings.batching
    if settings.model_config_file is not None:
        entries = read_model_config_file(settings.model_config_file)
        if settings.exit_on_error:
            versions_of(entries, batching)  # every model's versions on disk, or a ConfigError
        return ConfigCatalog(entries, batching)
    if settings.model_repository is not None:
        if settings.exit_on_error:
            versions_of(read_model_repository(settings.model_repository), batching)
        root = check_model_repository(settings.model_repository)
        return RepositoryCatalog(root, batching)
    assert settings.model_dir is not None  # ServerSettings.validate: exactly one is given
    source = find_model(settings.model_dir, settings.model_name)
    return FixedCatalog([VersionToServe(source, ModelSettings(batching=batching))])

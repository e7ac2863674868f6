"""The one load path: the models named at start, the OIP model repository API, TF Serving's
HandleReloadConfigRequest and ``--model-config-file-poll-wait-seconds`` (``polling.py``) all
load and unload model versions through ``_prepare`` and ``_complete`` here.

A load reads the model's versions from the catalog, keeps the ones already serving that are
unchanged (a reloaded config), makes the others (``Frameworks``: each framework configured
once), loads them one after another in a worker thread (``memory.Memory.load``: room, load,
warm-up, measure, count), then routes the model's new set of versions in one swap and retires
what it no longer routes (``retire.py``): once idle (its requests in flight finished, at most
``drain_s``), off the scheduler, unloaded. A model with no version serving is routed from the
start of its load, so that status and readiness say LOADING, then why it failed; a model still
serving keeps serving its old versions until the new ones are ready, and a failed reload leaves
it as it was. A model none of whose versions can even be made (its path missing, its folder
empty or half-copied) and of which nothing serves is routed as a stand-in, FAILED with the
reason, so that it is reported as one that failed to load. A failure is cleaned up in one
place, ``_fail``, at start and while serving alike.

Nothing is read from outside the roots the operator allows (``roots.py``): every load's
directories are checked first, and a reloaded config is checked whole before anything changes,
so a refused reload unloads nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import NoReturn, Protocol

from anyio import to_thread

from sharedserve.errors import (
    ConfigError,
    InsufficientMemory,
    InvalidInput,
    LoadFailed,
    NotFound,
    PermissionDenied,
    SharedServeError,
    quoted,
)
from sharedserve.server.inference import InferencePath
from sharedserve.server.memory import Memory
from sharedserve.server.repository.config_file import ModelEntry
from sharedserve.server.repository.registry import ModelRegistry
from sharedserve.server.repository.retire import DRAIN_S, retire, unload_settled
from sharedserve.server.repository.roots import ModelRoots
from sharedserve.server.repository.threads import in_loader_thread, load_versions
from sharedserve.server.repository.versions import (
    Catalog,
    ConfigCatalog,
    FixedCatalog,
    VersionToServe,
    unknown,
)
from sharedserve.server.version import Frameworks, ModelVersion, VersionState

__all__ = ["IndexEntry", "ModelEvents", "ModelManager"]

log = logging.getLogger(__name__)


class ModelEvents(Protocol):
    """Told on the server's loop as models come and go (the gRPC health service)."""

    async def model_serving(self, name: str) -> None: ...

    async def model_not_serving(self, name: str) -> None: ...


@dataclass(frozen=True)
class IndexEntry:
    """One row of the repository index, in no wire format's words."""

    name: str
    version: int | None
    """None: the model has no version routed."""
    state: VersionState | None
    """The version's; None: not routed (``loading`` says whether a load is under way)."""
    loading: bool = False
    reason: str = ""


@dataclass
class _Change:
    """A model's load under way: what it keeps, what it makes, its labels."""

    name: str
    kept: list[ModelVersion]
    fresh: list[ModelVersion]
    labels: dict[str, int] = field(default_factory=dict)
    routed_early: bool = False


class ModelManager:
    """Changes the registry's models; every method runs on the server's loop."""

    def __init__(
        self,
        registry: ModelRegistry,
        path: InferencePath,
        memory: Memory,
        frameworks: Frameworks,
        catalog: Catalog,
        *,
        events: ModelEvents,
        roots: ModelRoots | None = None,
        drain_s: float = DRAIN_S,
    ) -> None:
        """``roots``: where models may be read from (None: anywhere, for ``--model``'s fixed
        catalog, which never changes)."""
        self.registry, self.path, self.memory = registry, path, memory
        self.roots = roots
        self.frameworks, self.catalog = frameworks, catalog
        self.events = events
        self._drain_s = drain_s
        self._batching = getattr(catalog, "batching", None)
        self._changing = asyncio.Lock()
        self._loading: set[str] = set()
        self._failures: dict[str, str] = {}  # name -> why its last load failed

    # -- start-up -------------------------------------------------------------------------------

    async def start(self, routed: asyncio.Event | None = None) -> dict[str, str]:
        """Every model the catalog names: each routed at once (status answers START, then
        LOADING; ``routed`` is set then), then loaded one after another, each serving as soon
        as it is warm, so a slow one holds no other's readiness. -> the models that failed,
        with why (the others serve). Changes asked for meanwhile wait for it."""
        async with self._changing:
            names = await to_thread.run_sync(self.catalog.names)
            changes: list[_Change] = []
            for name in names:
                try:
                    changes.append(await self._prepare(name, reuse=False))
                except SharedServeError as e:
                    log.error("%s", e.message)  # "failed to load 'NAME': why"
            if routed is not None:
                routed.set()
            for change in changes:
                try:
                    await self._complete(change)
                except SharedServeError as e:
                    log.error("%s", e.message)
            return dict(self._failures)

    # -- the repository API ----------------------------------------------------------------

    async def load(self, name: str) -> None:
        """Load (or reload: every version anew, as Triton does) model ``name``; NotFound for
        a name the catalog does not know, LoadFailed with the reason for one that fails."""
        self.require_changeable()
        async with self._changing:
            await self._complete(await self._prepare(name, reuse=False))

    async def unload(self, name: str) -> None:
        """Model ``name`` is not served from now on; returns once its requests in flight have
        finished and it is unloaded. A known model not loaded: nothing to do."""
        self.require_changeable()
        async with self._changing:
            if name not in self.registry.served():
                known = await to_thread.run_sync(self._names)
                if name not in known and name not in self._failures:
                    raise unknown(name)
                return
            await self._unload(name)

    async def index(self) -> list[IndexEntry]:
        """Every model the server knows of: a row per routed version, one row for a model
        not routed (loading, or unavailable with the reason)."""
        names = await to_thread.run_sync(self._names)
        served = self.registry.served()
        rows: list[IndexEntry] = []
        for name in sorted({*names, *served, *self._failures, *self._loading}):
            versions = self.registry.statuses(name) if name in served else []
            for version in versions:
                number = None if version.is_stand_in else version.version
                rows.append(IndexEntry(name, number, version.state, False, version.error or ""))
            if not versions:
                reason = self._failures.get(name, "unloaded")
                rows.append(IndexEntry(name, None, None, name in self._loading, reason))
        return rows

    # -- TF Serving's model config -----------------------------------------------------------

    async def converge(self, entries: Sequence[ModelEntry], *, trusted: bool = False) -> None:
        """Serve what ``entries`` (a whole model config) name and nothing else: new models
        loaded, models no longer named unloaded, changed versions and labels applied (versions
        unchanged keep serving). LoadFailed naming each model that failed; the rest converge.
        PermissionDenied, and nothing changed, where a base path leads outside the roots;
        ``trusted``: the operator's own file, whose base paths become roots instead."""
        self.require_changeable()
        async with self._changing:
            if self.roots is not None:
                if trusted:
                    self.roots.trust(e.base_path for e in entries)
                else:
                    await to_thread.run_sync(self._check_entries, entries)
            self.catalog = ConfigCatalog(entries, self._batching)
            wanted = [e.name for e in entries]
            failures: list[str] = []
            for name in wanted:
                try:
                    await self._complete(await self._prepare(name, reuse=True))
                except SharedServeError as e:
                    failures.append(e.message)
            for name in self.registry.served():
                if name not in wanted:
                    await self._unload(name)
            for name in list(self._failures):
                if name not in wanted:
                    del self._failures[name]
                    self.registry.metrics.forget_model_load(name)
            if failures:
                raise LoadFailed("; ".join(failures))

    def require_changeable(self) -> None:
        """InvalidInput unless models may be loaded and unloaded (not with ``--model``)."""
        if isinstance(self.catalog, FixedCatalog):
            raise InvalidInput(
                "this server serves the one model --model names, loaded at start; load and "
                "unload need --model-config-file or --model-repository"
            )

    # -- the one path -------------------------------------------------------------------------

    def _names(self) -> list[str]:
        try:
            return self.catalog.names()
        except ConfigError as e:
            log.warning("cannot list the model repository: %s", e.message)
            return []

    def _check_entries(self, entries: Sequence[ModelEntry]) -> None:
        """In a worker thread: PermissionDenied where a model's base path leads out of the
        roots (the first one found)."""
        assert self.roots is not None
        for entry in entries:
            path = quoted(str(entry.base_path))
            what = f"the base_path of model {quoted(entry.name)}, {path},"
            self.roots.check(entry.base_path, what)

    def _versions(self, name: str) -> list[VersionToServe]:
        """In a worker thread: model ``name``'s versions on disk, each inside the roots."""
        entries = self.catalog.versions(name)
        if self.roots is not None:
            for entry in entries:
                what = f"model {quoted(name)} version {entry.source.version}"
                self.roots.check(entry.source.path, what)
        return entries

    async def _prepare(self, name: str, *, reuse: bool) -> _Change:
        """Model ``name``'s versions made (not loaded) and on the inference path, kept where
        ``reuse`` and unchanged; routed now where none of the model's serves. NotFound for a
        name the catalog does not know; where none can be made, ``_unmade``."""
        self._loading.add(name)
        try:
            entries = await to_thread.run_sync(self._versions, name)
            current = self.registry.versions_by_number(name)
            change = _Change(name, [], [], dict(entries[0].labels))
            for entry in entries:
                old = current.get(entry.source.version)
                if reuse and old is not None and old.serving and _same(old, entry):
                    change.kept.append(old)
                else:
                    change.fresh.append(self._version(entry))  # its framework missing: raises
        except BaseException as e:
            self._loading.discard(name)
            if isinstance(e, SharedServeError) and not isinstance(e, NotFound):
                await self._unmade(name, e)  # the files, the roots or the framework
            raise
        for version in change.fresh:
            self.path.add(version)
        if not any(v.serving for v in current.values()):
            change.routed_early = True
            await self._retire(self.registry.replace(name, [*change.kept, *change.fresh], {}))
            await self.events.model_not_serving(name)  # loading: strict readiness says so
        return change

    async def _unmade(self, name: str, error: SharedServeError) -> NoReturn:
        """No version of model ``name`` could be made: where none of it serves (and the roots
        did not refuse it: a refused load changes nothing), a stand-in is routed in its place
        (``ModelVersion.stand_in``), FAILED with the reason; then the one cleanup, which
        raises."""
        serving = any(v.serving for v in self.registry.versions_by_number(name).values())
        change = _Change(name, [], [])
        if not serving and not isinstance(error, PermissionDenied):
            change.fresh.append(ModelVersion.stand_in(name, error.message))
            change.routed_early = True
            self.path.add(change.fresh[0])  # its model's lane: a request is admitted, then 503
            await self._retire(self.registry.replace(name, change.fresh, {}))
        await self._fail(change, error)

    def _version(self, entry: VersionToServe) -> ModelVersion:
        source = entry.source
        log.info(
            "serving model %r version %d (%s) from %s",
            source.name,
            source.version,
            source.framework.value,
            source.path,
        )
        return ModelVersion(source, entry.settings, self.frameworks.backend(source))

    async def _complete(self, change: _Change) -> None:
        """``change``'s new versions loaded (in a worker thread), then routed with what it
        keeps, and what the model no longer routes retired."""
        name = change.name
        try:
            error = await in_loader_thread(partial(load_versions, self.memory), change.fresh)
            if error is not None:
                await self._fail(change, error)
            for version in change.fresh:
                await self.path.start(version)
            gone = self.registry.replace(name, [*change.kept, *change.fresh], change.labels)
        finally:
            self._loading.discard(name)
        self._failures.pop(name, None)
        self.registry.metrics.model_load(name, failed=False)
        log.info("model %r loaded: versions %s", name, self.registry.served().get(name))
        await self.events.model_serving(name)
        await self._retire(gone)

    async def _fail(self, change: _Change, error: Exception) -> NoReturn:
        """The one cleanup of a failed load. Routed early (nothing of the model served before),
        its versions stay routed: the loaded serve, the failed say why (FAILED). Otherwise the
        model goes on as it was, and every version the load made is retired. Either way the
        failure is counted (``sharedserve_model_load_failed``). Then raises: 507 where the
        server's room was short, 403 where the roots refused it, else LoadFailed, each naming
        the model."""
        name = change.name
        reason = getattr(error, "message", None) or str(error)
        self._failures[name] = reason
        self.registry.metrics.model_load(name, failed=True)
        if change.routed_early:
            for version in change.fresh:
                if version.state is VersionState.FAILED:
                    await self.path.remove(version)
                else:
                    await self.path.start(version)
            self.registry.replace(name, [*change.kept, *change.fresh], {})
            if any(v.serving for v in change.fresh):
                await self.events.model_serving(name)
            else:
                await self.events.model_not_serving(name)
        else:
            await self._retire(change.fresh)
        if isinstance(error, InsufficientMemory):  # 507: the server's room, not the files
            raise InsufficientMemory(f"failed to load {quoted(name)}: {reason}")
        if isinstance(error, PermissionDenied):
            raise PermissionDenied(f"failed to load {quoted(name)}: {reason}")
        raise LoadFailed(f"failed to load {quoted(name)}: {reason}")

    async def _unload(self, name: str) -> None:
        gone = self.registry.replace(name, [], {})
        await self.events.model_not_serving(name)
        await self._retire(gone)
        log.info("model %r unloaded", name)

    async def _retire(self, gone: Sequence[ModelVersion]) -> None:
        """Versions no longer routed: each once idle (at most ``drain_s``), off the path, then
        all unloaded (``retire.py``)."""
        await retire(gone, self.memory, self.path, self._drain_s)

    # -- the end --------------------------------------------------------------------

    def close(self) -> None:
        """After the listeners closed: every version that is not loading or moving unloaded
        (those are the process's to drop as it exits)."""
        unload_settled(self.registry.versions())


def _same(old: ModelVersion, entry: VersionToServe) -> bool:
    return old.source == entry.source and old.settings == entry.settings

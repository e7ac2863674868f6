"""Models loaded and unloaded while the server runs: the OIP model repository API, TF Serving's
HandleReloadConfigRequest and ``--model-config-file-poll-wait-seconds``.

A load reads what the model config or repository says of the model now (``Catalog``), loads
and warms its versions in a worker thread, starts their batchers, then swaps them into the
registry in one step, so requests see the old versions until the new ones are warm. Versions
no longer served are retired at the swap (new requests: NotFound, or the next latest version),
their requests in flight finish (waited for, up to ``drain_s``), then their batchers stop and
their frameworks let go of them. Changes are made one at a time (one asyncio lock, which no
request takes); a model that fails to load leaves the served ones as they were.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol

from anyio import to_thread

from sharedserve.config import BatchingSettings
from sharedserve.enums import Framework
from sharedserve.errors import (
    ConfigError,
    InsufficientMemory,
    InvalidInput,
    LoadFailed,
    NotFound,
    SharedServeError,
    quoted,
)
from sharedserve.server.inference.path import Predictor
from sharedserve.server.repository.config_file import ModelEntry, read_model_config_file
from sharedserve.server.repository.directory import read_repository_model, repository_names
from sharedserve.server.repository.registry import ModelRegistry
from sharedserve.server.repository.versions import VersionToServe, versions_of
from sharedserve.server.version.backends import make_backend
from sharedserve.server.version.backends.base import RuntimeConfig
from sharedserve.server.version.model import ModelState, ServedModel, unfrozen

__all__ = ["Catalog", "ConfigCatalog", "FixedCatalog", "ModelManager", "RepositoryCatalog"]

log = logging.getLogger(__name__)

DRAIN_S = 30.0
"""How long an unload waits for a version's requests in flight before it stops it anyway."""

Notify = Callable[[str], Awaitable[object]]


class Catalog(Protocol):
    """What may be loaded: the models a model config file or repository names."""

    def names(self) -> list[str]: ...

    def versions(self, name: str) -> list[VersionToServe]:
        """Model ``name``'s versions as on disk now; NotFound for a name it does not know,
        ConfigError for a model that cannot be served as configured."""
        ...


def _unknown(name: str) -> NotFound:
    return NotFound(f"model {quoted(name)} is not in the model repository")


class FixedCatalog:
    """``--model``'s one model (or a test's versions): what was named at start."""

    def __init__(self, entries: Sequence[VersionToServe]) -> None:
        self._entries = list(entries)

    def names(self) -> list[str]:
        return list(dict.fromkeys(e.source.name for e in self._entries))

    def versions(self, name: str) -> list[VersionToServe]:
        found = [e for e in self._entries if e.source.name == name]
        if not found:
            raise _unknown(name)
        return found


class ConfigCatalog:
    """A TF Serving model config: the file's at start, the last reload's or poll's since."""

    def __init__(self, entries: Sequence[ModelEntry], batching: BatchingSettings | None) -> None:
        self.entries, self._batching = list(entries), batching

    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    def versions(self, name: str) -> list[VersionToServe]:
        found = [e for e in self.entries if e.name == name]
        if not found:
            raise _unknown(name)
        return versions_of(found, self._batching)


class RepositoryCatalog:
    """A model repository, read again at each question (Triton's explicit mode): a model
    directory added since start can be loaded."""

    def __init__(self, root: Path, batching: BatchingSettings | None) -> None:
        self._root, self._batching = root.expanduser().resolve(), batching

    def names(self) -> list[str]:
        return repository_names(self._root)

    def versions(self, name: str) -> list[VersionToServe]:
        entry = read_repository_model(self._root, name)
        if entry is None:
            raise _unknown(name)
        return versions_of([entry], self._batching)


async def _nothing(_: str) -> None:
    return None


class ModelManager:
    """Changes the registry's models while serving; every method runs on the server's loop."""

    def __init__(
        self,
        registry: ModelRegistry,
        catalog: Catalog | None = None,
        runtime: RuntimeConfig | None = None,
        configured: set[Framework] | None = None,
        max_elements: int | None = None,
        *,
        batching: BatchingSettings | None = None,
        drain_s: float = DRAIN_S,
        on_available: Notify = _nothing,
        on_gone: Notify = _nothing,
    ) -> None:
        self.registry, self.catalog = registry, catalog
        self._runtime, self._configured = runtime, configured if configured is not None else set()
        self._max_elements, self._drain_s = max_elements, drain_s
        self._batching = batching  # the flags', for a reloaded config's models with none
        self.on_available, self.on_gone = on_available, on_gone
        self._changing = asyncio.Lock()
        self._loading: set[str] = set()
        self._failures: dict[str, str] = {}  # name -> why its last load failed (not served)
        self._started: asyncio.Event | None = None

    def wait_for(self, started: asyncio.Event) -> None:
        """Changes wait until ``started`` is set: the models named at start have loaded (or
        failed), so none of them is taken for one to load again."""
        self._started = started

    async def _begin(self) -> None:
        if self._started is not None:
            await self._started.wait()

    # -- the repository API ----------------------------------------------------------------

    async def load(self, name: str) -> None:
        """Load (or reload: every version anew, as Triton does) model ``name``; NotFound for
        a name the catalog does not know, LoadFailed with the reason for one that fails."""
        self.require_changeable()
        async with self._changing:
            await self._begin()
            await self._load(name, reuse=False)

    async def unload(self, name: str) -> None:
        """Model ``name`` is not served from now on; returns once its requests in flight have
        finished and it is unloaded. A known model not loaded: nothing to do."""
        self.require_changeable()
        async with self._changing:
            await self._begin()
            if name not in self.registry.served():
                known = await to_thread.run_sync(self._names)
                if name not in known and name not in self._failures:
                    raise _unknown(name)
                return
            await self._unload(name)

    async def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Triton's repository index: every model the server knows of, a row per served
        version (READY, LOADING or UNAVAILABLE with the reason), one row for a model not
        served."""
        names = await to_thread.run_sync(self._names)
        served = self.registry.served()
        rows: list[dict[str, str]] = []
        for name in sorted({*names, *served, *self._failures, *self._loading}):
            models = self.registry.statuses(name) if name in served else []
            for model in models:
                rows.append({"name": name, "version": str(model.version), **_state(model)})
            if not models:
                state = "LOADING" if name in self._loading else "UNAVAILABLE"
                reason = self._failures.get(name, "unloaded")
                rows.append({"name": name, "version": "", "state": state, "reason": reason})
        return [r for r in rows if r["state"] == "READY"] if ready_only else rows

    # -- TF Serving's model config -----------------------------------------------------------

    async def converge(self, entries: Sequence[ModelEntry]) -> None:
        """Serve what ``entries`` (a whole model config) name and nothing else: new models
        loaded, models no longer named unloaded, changed versions and labels applied (versions
        unchanged keep serving). LoadFailed naming each model that failed; the rest converge."""
        self.require_changeable()
        async with self._changing:
            await self._begin()
            self.catalog = ConfigCatalog(entries, self._batching)
            wanted = [e.name for e in entries]
            failures: list[str] = []
            for name in wanted:
                try:
                    await self._load(name, reuse=True)
                except SharedServeError as e:
                    failures.append(e.message)
            for name in self.registry.served():
                if name not in wanted:
                    await self._unload(name)
            for name in list(self._failures):
                if name not in wanted:
                    del self._failures[name]
            if failures:
                raise LoadFailed("; ".join(failures))

    async def poll_config_file(self, path: Path, wait_s: float) -> None:
        """TF Serving's ``--model_config_file_poll_wait_seconds``: every ``wait_s``, the file
        read again and, when it changed, served as it says; one that cannot be read or parsed
        changes nothing. Applied on change only, so a HandleReloadConfigRequest's config stands
        until the file is edited, and a model that failed to load is not retried every poll."""
        await self._begin()  # a model still loading from start is no changed one
        catalog = self.catalog
        last = list(catalog.entries) if isinstance(catalog, ConfigCatalog) else None
        while True:
            await asyncio.sleep(wait_s)
            try:
                entries = await to_thread.run_sync(read_model_config_file, path)
            except ConfigError as e:
                log.error("model config file not applied (the served models stay): %s", e.message)
                continue
            if entries == last:
                continue
            last = entries
            try:
                await self.converge(entries)
            except SharedServeError as e:
                log.error("model config file applied, but: %s", e.message)

    # -- the steps -----------------------------------------------------------------------------

    def require_changeable(self) -> None:
        """InvalidInput unless models may be loaded and unloaded (not with ``--model``)."""
        if self.catalog is None:
            raise InvalidInput(
                "this server serves the one model --model names, loaded at start; load and "
                "unload need --model-config-file or --model-repository"
            )

    def _names(self) -> list[str]:
        if self.catalog is None:
            return list(self.registry.served())
        try:
            return self.catalog.names()
        except ConfigError as e:
            log.warning("cannot list the model repository: %s", e.message)
            return []

    async def _load(self, name: str, *, reuse: bool) -> None:
        self._loading.add(name)
        try:
            catalog = self.catalog
            assert catalog is not None  # require_changeable
            try:
                entries = await to_thread.run_sync(catalog.versions, name)
            except ConfigError as e:
                self._failures[name] = e.message
                raise LoadFailed(f"failed to load {quoted(name)}: {e.message}") from None
            current = self.registry.versions_by_number(name)
            kept: list[Predictor] = []
            fresh: list[Predictor] = []
            for entry in entries:
                old = current.get(entry.source.version)
                if (
                    reuse
                    and old is not None
                    and old.model.serving
                    and old.model.source == entry.source
                    and old.batching == entry.batching
                ):
                    kept.append(old)
                else:
                    fresh.append(self._predictor(entry))
            error = await to_thread.run_sync(self._load_models, fresh)
            if error is not None:
                await to_thread.run_sync(_unload_models, [p.model for p in fresh])
                for predictor in fresh:
                    self.registry.memory.forget(predictor.tenant)
                reason = getattr(error, "message", None) or str(error)
                self._failures[name] = reason
                if isinstance(error, InsufficientMemory):  # 507: the server's room, not the files
                    raise InsufficientMemory(f"failed to load {quoted(name)}: {reason}")
                raise LoadFailed(f"failed to load {quoted(name)}: {reason}")
            for predictor in fresh:
                await predictor.start()
            gone = self.registry.replace(name, [*kept, *fresh], entries[0].labels)
            self._failures.pop(name, None)
            log.info("model %r loaded: versions %s", name, self.registry.versions_of(name))
            await self.on_available(name)
            await self._retire(gone)
        finally:
            self._loading.discard(name)

    async def _unload(self, name: str) -> None:
        gone = self.registry.replace(name, [], {})
        await self.on_gone(name)
        await self._retire(gone)
        log.info("model %r unloaded", name)

    def _predictor(self, entry: VersionToServe) -> Predictor:
        model = entry.served_model(make_backend(entry.source))
        return self.registry.predictor_for(model, entry, self._max_elements)

    def _load_models(self, predictors: Sequence[Predictor]) -> Exception | None:
        """In a worker thread: each version loaded, warmed and counted in the process's memory;
        the first failure."""
        for predictor in predictors:
            model = predictor.model
            try:
                if model.source.framework not in self._configured and self._runtime:
                    # Thread pools and the GPU cap, before this framework first runs.
                    model.backend.configure(self._runtime)
                    self._configured.add(model.source.framework)
                predictor.tenant.load()
            except Exception as e:
                reason = model.error or getattr(e, "message", None) or str(e)
                log.error(
                    "failed to load model %r version %d: %s", model.name, model.version, reason
                )
                return e
        return None

    async def _retire(self, gone: Sequence[Predictor]) -> None:
        for predictor in gone:
            if not await to_thread.run_sync(predictor.wait_idle, self._drain_s):
                log.warning(
                    "model %r version %d still had %d request(s) in flight after %g s; unloading",
                    predictor.model.name,
                    predictor.model.version,
                    predictor.in_flight,
                    self._drain_s,
                )
            await predictor.stop()
            predictor.forget_metrics()
            self.registry.memory.forget(predictor.tenant)
        if gone:
            await to_thread.run_sync(_unload_models, [p.model for p in gone])


def _state(model: ServedModel) -> dict[str, str]:
    if model.state is ModelState.AVAILABLE:
        return {"state": "READY", "reason": ""}
    if model.state in (ModelState.START, ModelState.LOADING):
        return {"state": "LOADING", "reason": ""}
    return {"state": "UNAVAILABLE", "reason": model.error or model.state.value.lower()}


def _unload_models(models: Sequence[ServedModel]) -> None:
    """In a worker thread: each model unloaded, then a full collection, what was frozen at
    start included (``model.unfrozen``), so the frameworks' objects are freed now."""
    with unfrozen():
        for model in models:
            model.unload()
        gc.collect()

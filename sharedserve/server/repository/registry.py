"""The models one server process serves, and the one place a request's model is looked up.

Each name has one or more versions, a ``ServedModel`` and a ``Predictor`` each (its own batcher
when the model batches: batching settings are per model, and a batch never mixes versions), and
optional version labels (label -> version), as TF Serving's model config gives them. Every wire
format asks ``lookup`` with what the request names and gets the version to run, or NotFound in
TF Serving's words. The latest version is the highest one serving predictions (TF Serving: the
highest loaded); while none is, the highest of all, whose answer then says why it is not ready.

The table changes while serving (``model_manager.py`` loads and unloads): a writer builds a new
table and swaps it in with one assignment, under a lock that only writers take, so a lookup
reads one table, the old or the new, and never waits. Every version's model calls go through
the registry's one ``Scheduler``, in its model's lane (weight and ``max_inflight`` per model,
shared by its versions).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sharedserve.errors import ConfigError, NotFound, quoted
from sharedserve.server.inference.path import Predictor
from sharedserve.server.inference.scheduler import (
    DEFAULT_SHARE,
    ModelLane,
    Scheduler,
    Share,
    model_call_slots,
)
from sharedserve.server.memory.paging import Memory
from sharedserve.server.metrics.prometheus import Metrics
from sharedserve.server.repository.versions import VersionToServe
from sharedserve.server.version.model import ModelState, ServedModel

__all__ = ["ModelRegistry"]


@dataclass(frozen=True)
class _Table:
    """Never changed once swapped in: name -> version -> predictor, name -> label -> version."""

    versions: Mapping[str, Mapping[int, Predictor]] = field(default_factory=dict)
    labels: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


class ModelRegistry:
    """Served model versions by name and version; ``metrics`` is the process's one registry.

    ``slots``: model calls that run at once (``scheduler.model_call_slots``); ``defaults``: a
    model's share where its entry sets none; ``memory``: what the versions may hold (None: no
    cap, no paging)."""

    def __init__(
        self,
        metrics: Metrics,
        slots: int = model_call_slots(1),
        defaults: Share = DEFAULT_SHARE,
        memory: Memory | None = None,
    ) -> None:
        self.metrics = metrics
        self.memory = memory or Memory(metrics.paging)
        self.scheduler = Scheduler(slots)
        self.defaults = defaults
        self._table = _Table()
        self._writing = threading.Lock()

    @property
    def _versions(self) -> Mapping[str, Mapping[int, Predictor]]:
        return self._table.versions

    @property
    def _labels(self) -> Mapping[str, Mapping[str, int]]:
        return self._table.labels

    @classmethod
    def of(cls, predictor: Predictor) -> ModelRegistry:
        """A registry of the one version ``predictor`` serves, counted in its ``Metrics``."""
        if not isinstance(predictor.metrics, Metrics):
            raise TypeError("a lone predictor must record into a Metrics registry")
        registry = cls(predictor.metrics, memory=predictor.tenant.memory)
        registry.scheduler = predictor.lane.scheduler  # its own: nothing else shares it
        registry._put(predictor)
        return registry

    @classmethod
    def build(
        cls,
        metrics: Metrics,
        entries: Sequence[VersionToServe],
        models: Sequence[ServedModel],
        max_elements: int | None = None,
        *,
        slots: int = model_call_slots(1),
        defaults: Share = DEFAULT_SHARE,
        memory: Memory | None = None,
    ) -> ModelRegistry:
        """A registry of ``models``, one per entry (its version), with the entries' labels."""
        registry = cls(metrics, slots, defaults, memory)
        for entry, model in zip(entries, models, strict=True):
            registry.add(model, entry, max_elements)
        for entry in entries:
            for label, version in entry.labels.items():
                registry.label(entry.source.name, label, version)
        return registry

    def add(
        self,
        model: ServedModel,
        entry: VersionToServe | None = None,
        max_elements: int | None = None,
    ) -> Predictor:
        """Serve ``model`` (one version, as ``entry`` says: batching, share, memory), with its
        per-model series and its own batcher, in its model's lane of the scheduler."""
        predictor = self.predictor_for(model, entry, max_elements)
        self._put(predictor)
        return predictor

    def predictor_for(
        self,
        model: ServedModel,
        entry: VersionToServe | None = None,
        max_elements: int | None = None,
    ) -> Predictor:
        """A predictor for ``model`` in its model's series and lane, with its place in the
        process's memory, not routed to yet (the model manager loads it first, then
        ``replace`` routes to it). A weight or limit the entry gives replaces the model's."""
        entry = entry or VersionToServe(model.source)
        series = self.metrics.for_model(model.name)
        lane = self._lane(model.name, entry.weight, entry.max_inflight)
        tenant = self.memory.tenant(model, entry.budget_bytes, entry.pinned)
        return Predictor(model, series, entry.batching, max_elements, lane=lane, tenant=tenant)

    def _lane(self, name: str, weight: float | None, max_inflight: int | None) -> ModelLane:
        known = name in self.scheduler.shares()
        old = self.scheduler.shares().get(name, self.defaults)
        share = Share(
            old.weight if weight is None else weight,
            old.max_inflight if max_inflight is None else max_inflight,
        )
        lane = self.scheduler.lane(name, share)
        if not known:  # the model's series read its lane, once whatever its versions
            series = self.metrics.for_model(name)
            series.track_queue_depth(lambda: lane.depth)
            lane.on_wait(series.observe_queue_wait)
        return lane

    def models_report(self) -> dict[str, Any]:
        """For ``/sharedserve/v1/limits``: the scheduler's threads, the process's memory, and
        each served model's share and versions (state, budget, footprint, last use)."""
        shares = self.scheduler.shares()
        models: dict[str, Any] = {}
        for name, versions in sorted(self._versions.items()):
            share = shares.get(name, self.defaults)
            models[name] = {
                "weight": share.weight,
                "max_inflight": share.max_inflight,
                "versions": {str(v): p.tenant.report() for v, p in sorted(versions.items())},
            }
        return {
            "model_call_slots": self.scheduler.slots,
            "memory": self.memory.report(),
            "models": models,
        }

    def _put(self, predictor: Predictor) -> None:
        model = predictor.model
        with self._writing:
            versions = dict(self._versions.get(model.name, {}))
            if model.version in versions:
                raise ConfigError(f"model {model.name!r} version {model.version} is served twice")
            versions[model.version] = predictor
            self._swap(model.name, versions, self._labels.get(model.name, {}))

    def label(self, name: str, label: str, version: int) -> None:
        """``label`` names ``version`` of model ``name`` from now on."""
        with self._writing:
            if version not in self._versions.get(name, {}):
                raise ConfigError(
                    f"label {label!r} of model {name!r} names version {version}, "
                    "which is not served"
                )
            labels = {**self._labels.get(name, {}), label: version}
            self._swap(name, self._versions[name], labels)

    def replace(
        self, name: str, predictors: Sequence[Predictor], labels: Mapping[str, int]
    ) -> list[Predictor]:
        """Model ``name`` is served by ``predictors`` (none: no longer served) with ``labels``
        from now on, in one swap; -> the predictors it no longer routes to, retired (their
        requests in flight finish; the caller waits for them, then stops and unloads them)."""
        with self._writing:
            old = list(self._versions.get(name, {}).values())
            versions = {p.model.version: p for p in predictors}
            for label, version in labels.items():
                if version not in versions:
                    raise ConfigError(
                        f"label {label!r} of model {name!r} names version {version}, "
                        "which is not served"
                    )
            self._swap(name, versions, labels)
        gone = [p for p in old if all(p is not q for q in predictors)]
        for predictor in gone:
            predictor.retire()
        return gone

    def _swap(
        self, name: str, versions: Mapping[int, Predictor], labels: Mapping[str, int]
    ) -> None:
        """The new table, with ``name``'s entries as given; under ``_writing``."""
        table = self._table
        all_versions = {**table.versions, name: MappingProxyType(dict(versions))}
        all_labels = {**table.labels, name: MappingProxyType(dict(labels))}
        if not versions:
            del all_versions[name]
            del all_labels[name]
        self._table = _Table(MappingProxyType(all_versions), MappingProxyType(all_labels))

    # -- what requests ask ---------------------------------------------------------------

    def lookup(self, name: str, version: int | None = None, label: str | None = None) -> Predictor:
        """The version a request names: by number, by label, else the latest."""
        table = self._table  # one table throughout, whatever a writer swaps in meanwhile
        versions = table.versions.get(name)
        if label:
            number = table.labels.get(name, {}).get(label)
            if versions is None or number is None:
                raise NotFound(f"Unrecognized servable version label: {quoted(label)}")
            return versions[number]
        if versions is None:
            shown = quoted(name)
            wanted = f"Latest({shown})" if version is None else f"Specific({shown}, {version})"
            raise NotFound(f"Servable not found for request: {wanted}")
        if version is not None:
            if version not in versions:
                raise NotFound(
                    f"Servable not found for request: Specific({quoted(name)}, {version})"
                )
            return versions[version]
        serving = [v for v, p in versions.items() if p.model.serving]
        return versions[max(serving or versions)]

    def statuses(
        self, name: str, version: int | None = None, label: str | None = None
    ) -> list[ServedModel]:
        """The versions a status request names: one if it names one, else all of the model's."""
        if version is not None or label:
            return [self.lookup(name, version, label).model]
        versions = self._versions.get(name)
        if versions is None:
            self.lookup(name)  # NotFound for an unknown name, in TF Serving's words
        return [p.model for _, p in sorted((versions or {}).items())]

    def status_json(
        self, name: str, version: int | None = None, label: str | None = None
    ) -> dict[str, Any]:
        """TF Serving's GetModelStatus as JSON: every version of the model, or the one named."""
        entries = [
            m.status_json()["model_version_status"][0] for m in self.statuses(name, version, label)
        ]
        return {"model_version_status": entries}

    def versions_by_number(self, name: str) -> Mapping[int, Predictor]:
        """Model ``name``'s versions now (empty: not served)."""
        return self._versions.get(name, {})

    def versions_of(self, name: str) -> list[int]:
        return sorted(self._versions.get(name, {}))

    def served(self) -> dict[str, list[int]]:
        """Name -> its versions, every model."""
        return {name: sorted(versions) for name, versions in self._versions.items()}

    def require_ready(self) -> None:
        """NotReady, saying why, unless every version of every model is AVAILABLE: the OIP's
        server readiness ("all the models are ready for inferencing"). A version that failed
        to load does not count: it is reported (status, repository index), and the others
        serve; a server that stays unready for it would take their traffic away too."""
        for model in self.models():
            if not model.failed:
                model.require_available()

    @property
    def ready(self) -> bool:
        return all(m.state is ModelState.AVAILABLE or m.failed for m in self.models())

    def models(self) -> Iterator[ServedModel]:
        for predictor in self.predictors():
            yield predictor.model

    def predictors(self) -> list[Predictor]:
        return [p for versions in self._versions.values() for _, p in sorted(versions.items())]

    # -- life cycle ----------------------------------------------------------------------

    def load(
        self,
        available: Callable[[str], object] = lambda _: None,
        failed: Callable[[ServedModel, Exception], object] | None = None,
    ) -> None:
        """Load every version, one after another (in the caller's thread), each AVAILABLE as
        soon as it is warm: a slow model holds no other's readiness. ``available(name)`` once
        all of a model's versions are. A failure is raised at once (the rest stay unloaded),
        or, given ``failed``, reported to it (the version stays END with its error) and the
        others load."""
        for predictor in self.predictors():
            model = predictor.model
            try:
                predictor.tenant.load()
            except Exception as e:
                if failed is None:
                    raise
                failed(model, e)
                continue
            if all(p.model.serving for p in self._versions.get(model.name, {}).values()):
                available(model.name)

    async def start(self) -> None:
        for predictor in self.predictors():
            await predictor.start()

    async def stop(self) -> None:
        for predictor in self.predictors():
            await predictor.stop()
        self.scheduler.close()

    def begin_shutdown(self) -> None:
        """Every model not ready from now on, each still answering until the listeners close."""
        for model in self.models():
            model.begin_shutdown()

    def unload(self) -> None:
        for model in self.models():
            model.unload()

"""The model versions one server process routes to, and the one place a request's version is
looked up.

Each name has one or more versions and optional version labels (label -> version), as TF
Serving's model config gives them. Every wire format asks ``lookup`` with what the request
names and gets the version to run, or NotFound in TF Serving's words. The latest version is the
highest one serving predictions (TF Serving: the highest loaded); while none is, the highest
of all, whose answer then says why it is not ready.

The table changes while serving (``manager.py`` loads and unloads): a writer builds a new table
and swaps it in with one assignment, under a lock that only writers take, so a lookup reads one
table, the old or the new, and never waits.

Readiness is the server's as well as its versions'. The server is ready once the models named
at start have each loaded or failed (``settle``): a model that failed is reported (status, the
repository index, metrics) and does not hold the others' traffic back, as TF Serving's server
serves what loaded; later loads, unloads and failures leave it ready, each model's own
readiness saying where it is. Strict (``--strict-readiness``, Triton's default), it is ready
only while every routed version serves: a model that failed, at start or since, or one loading
makes it not ready. From the first stop signal on (``begin_shutdown``) every readiness answer
says not-ready, while the versions keep serving until the listeners close.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from sharedserve.errors import ConfigError, NotFound, NotReady, quoted
from sharedserve.server.metrics import Metrics
from sharedserve.server.version import SERVING, ModelVersion, VersionState

__all__ = ["ModelRegistry"]


@dataclass(frozen=True)
class _Table:
    """Never changed once swapped in: name -> number -> version, name -> label -> number."""

    versions: Mapping[str, Mapping[int, ModelVersion]] = field(default_factory=dict)
    labels: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


class ModelRegistry:
    """Routed model versions by name and number; ``metrics`` is the process's one registry."""

    def __init__(self, metrics: Metrics, *, strict: bool = False) -> None:
        """``strict``: ready only while every routed version serves (module docstring)."""
        self.metrics, self.strict = metrics, strict
        self.stopping = False
        """A stop signal came: not ready from now on (``process/shutdown.py``)."""
        self.settled = False
        """The models named at start have each loaded or failed (``settle``)."""
        self._table = _Table()
        self._writing = threading.Lock()

    # -- writers (the manager) --------------------------------------------------------------

    def replace(
        self, name: str, versions: Sequence[ModelVersion], labels: Mapping[str, int]
    ) -> list[ModelVersion]:
        """Model ``name`` is served by ``versions`` (none: no longer served) with ``labels``
        from now on, in one swap; -> the versions it no longer routes to (the caller retires
        them once their requests in flight have finished)."""
        numbers = [v.version for v in versions]
        if len(set(numbers)) != len(numbers):
            raise ConfigError(f"model {name!r} has a version served twice: {sorted(numbers)}")
        for label, number in labels.items():
            if number not in numbers:
                raise ConfigError(
                    f"label {label!r} of model {name!r} names version {number}, which is not served"
                )
        with self._writing:
            old = list(self._table.versions.get(name, {}).values())
            table = self._table
            all_versions = {
                **table.versions,
                name: MappingProxyType({v.version: v for v in versions}),
            }
            all_labels = {**table.labels, name: MappingProxyType(dict(labels))}
            if not versions:
                del all_versions[name]
                del all_labels[name]
            self._table = _Table(MappingProxyType(all_versions), MappingProxyType(all_labels))
        return [v for v in old if all(v is not w for w in versions)]

    def settle(self) -> None:
        """The loads at start are over, each model loaded or failed: ready from now on, unless
        strict readiness says otherwise or a stop signal came."""
        self.settled = True

    def begin_shutdown(self) -> None:
        """Not ready from now on; every version still answers until the listeners close."""
        self.stopping = True

    # -- what requests ask ---------------------------------------------------------------------

    def lookup(
        self, name: str, version: int | None = None, label: str | None = None
    ) -> ModelVersion:
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
        serving = [n for n, v in versions.items() if v.serving]
        return versions[max(serving or versions)]

    def statuses(
        self, name: str, version: int | None = None, label: str | None = None
    ) -> list[ModelVersion]:
        """The versions a status request names: one if it names one, else all of the model's."""
        if version is not None or label:
            return [self.lookup(name, version, label)]
        versions = self._table.versions.get(name)
        if versions is None:
            self.lookup(name)  # NotFound for an unknown name, in TF Serving's words
        return [v for _, v in sorted((versions or {}).items())]

    def versions_by_number(self, name: str) -> Mapping[int, ModelVersion]:
        """Model ``name``'s routed versions now (empty: not served)."""
        return self._table.versions.get(name, {})

    def served(self) -> dict[str, list[int]]:
        """Name -> its routed versions, every model."""
        return {name: sorted(versions) for name, versions in self._table.versions.items()}

    def versions(self) -> list[ModelVersion]:
        """Every routed version, by name and number."""
        table = self._table.versions
        return [v for name in sorted(table) for _, v in sorted(table[name].items())]

    # -- readiness -------------------------------------------------------------------------------

    def require_ready(self, version: ModelVersion | None = None) -> None:
        """NotReady, saying why, unless ``version`` is ready for traffic, or (None) the whole
        server is (module docstring): the OIP's "all the models are ready for inferencing",
        where a model that failed to load is reported instead, unless readiness is strict. A
        server that stayed unready for one failed model would take the others' traffic away."""
        if version is not None:
            self._require_ready(version)
            return
        if self.stopping:
            raise NotReady("the server is shutting down (not ready)")
        if self.settled and not self.strict:
            return
        for each in self.versions():
            if self.strict or each.state is not VersionState.FAILED:
                self._require_ready(each)
        if not self.settled:
            raise NotReady("the models named at start are still loading (not ready)")

    def _require_ready(self, version: ModelVersion) -> None:
        if version.state not in SERVING:
            raise NotReady(version.not_ready_message())
        if self.stopping:
            raise NotReady(
                f"model {version.name!r} version {version.version} is shutting down (not ready)"
            )

    def is_ready(self, version: ModelVersion) -> bool:
        try:
            self._require_ready(version)
        except NotReady:
            return False
        return True

    @property
    def ready(self) -> bool:
        try:
            self.require_ready()
        except NotReady:
            return False
        return True

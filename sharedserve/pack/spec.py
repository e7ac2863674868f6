"""Pack spec files (``pack --spec pack.yaml``): a mix of models for one host. Pure (reads a file).

Format (YAML; JSON is YAML too)::

    replicas: 2              # any entry key at the top level is every entry's default
    cpu_limit: 0.5
    models:
      - model: models/resnet50            # relative to the spec file
        replicas: 3
        gpu_memory_mib: 6000
        serve_args: [--enable-batching, --max-batch-size, "8"]
        slo_p99_ms: 50
        weight: 3
      - model: models/tiny
        name: tiny-a

Entry keys: ``model`` (required, here or at the top), ``name``, ``replicas``, ``gpu``,
``gpu_memory_mib`` or ``gpu_memory_fraction``, ``slo_p99_ms``, ``weight``, ``cpu_limit``,
``serve_args``.

Shared servers (``servers:``, beside or instead of ``models:``): each replica of a shared server
is one ``sharedserve serve --model-repository`` process holding all its models::

    servers:
      - name: shared-a
        replicas: 2
        gpu_memory_mib: 6000     # each process's cap; its models' budgets must fit inside it
        cpu_limit: 1
        paging: lru              # optional: page the coldest models out under the cap
        models:
          - {model: models/tiny, slo_p99_ms: 50, weight: 6, gpu_memory_mib: 500, pinned: true}
          - {model: models/mobilenet_v2, slo_p99_ms: 500, weight: 2, max_inflight: 64}

The top level's defaults apply to ``models:`` entries only. Model names (``name``, else the
directory's) are unique across the whole spec, shared servers' models included.

``PackSpecFile`` is the file, read by ``load_spec`` and written by ``write_spec``
(``size`` writes each planned GPU's share with it); ``PackSpec`` is what pack runs: defaults
applied, paths resolved.
"""

from __future__ import annotations

from dataclasses import dataclass as plain_dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass

from sharedserve.config import NO_CAP, CapSource, GpuCapRequest, PackEntry, SharedServerModel
from sharedserve.documents import (
    DOCUMENT,
    Must,
    Positive,
    PositiveWhole,
    Text,
    dump,
    json_schema,
    number,
    parse,
    read_document,
    refuse,
    repeated,
    whole,
)
from sharedserve.files import write_atomic

__all__ = [
    "PackSpec",
    "PackSpecFile",
    "ServerGroup",
    "ServerModel",
    "SpecEntry",
    "load_spec",
    "pack_schema",
    "parse_spec",
    "spec_yaml",
    "write_spec",
]


def _plain(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


@dataclass(frozen=True, config=DOCUMENT)
class SpecEntry:
    """One model's replicas on the host."""

    model: Text | None = None
    """The model's base path (TF Serving layout), relative to the spec file."""
    name: Text | None = None
    """Its name in the targets and reports; none: the directory's name."""
    replicas: PositiveWhole | None = None
    """Server processes of it; none: 1."""
    gpu: Annotated[
        int | str | None,
        Must("an index or a UUID (prefix)", lambda v: _plain(v) and not isinstance(v, float)),
    ] = None
    """Pin it to this GPU; none: pack places it."""
    gpu_memory_mib: Annotated[
        int | None,
        Field(gt=0),
        Must("a whole number of MiB above 0", lambda v: whole(v) and v > 0),
    ] = None
    """Each replica's GPU memory cap in MiB (not with gpu_memory_fraction)."""
    gpu_memory_fraction: Annotated[
        float | None,
        Field(gt=0, le=1),
        Must("in (0, 1]", lambda v: number(v) and 0 < v <= 1),
    ] = None
    """Each replica's GPU memory cap as a share of the GPU (not with gpu_memory_mib)."""
    slo_p99_ms: Positive | None = None
    """Its objective, p99 latency in milliseconds (bench --spec holds it to it)."""
    weight: Positive | None = None
    """Its share of the mix's traffic; none: 1."""
    cpu_limit: Positive | None = None
    """CPU cores for each replica (a cgroup quota)."""
    serve_args: Annotated[
        list[str | int | float] | None,
        Must("a list of strings", lambda v: isinstance(v, list) and all(_plain(a) for a in v)),
    ] = None
    """More ``sharedserve serve`` flags for each replica (YAML reads "8" as 8: numbers pass)."""

    @model_validator(mode="after")
    def _one_cap(self) -> SpecEntry:
        if self.gpu_memory_fraction is not None and self.gpu_memory_mib is not None:
            raise refuse("give gpu_memory_fraction or gpu_memory_mib, not both")
        return self


_WholeMib = Annotated[
    int | None,
    Field(gt=0),
    Must("a whole number of MiB above 0", lambda v: whole(v) and v > 0),
]


def _nonempty(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 0


@dataclass(frozen=True, config=DOCUMENT)
class ServerModel:
    """One model of a shared server; its keys but ``model``, ``name`` and ``slo_p99_ms`` are
    written to its ``sharedserve.yaml`` in the shared server's model repository."""

    model: Text
    """The model's base path, relative to the spec file."""
    name: Text | None = None
    """Its name in URLs, targets and reports; none: the directory's name."""
    slo_p99_ms: Positive | None = None
    """Its objective, p99 latency in milliseconds (bench --spec holds it to it)."""
    weight: Positive | None = None
    """Its share of the mix's traffic, and of its server's model-call threads; none: 1."""
    gpu_memory_mib: _WholeMib = None
    """Its memory budget inside the shared server's cap, in MiB; none: its peak measured at
    load."""
    pinned: bool = False
    """Never paged out (``paging: lru``)."""
    max_inflight: PositiveWhole | None = None
    """Its requests queued or running in one server at most; more are refused at once."""


@dataclass(frozen=True, config=DOCUMENT)
class ServerGroup:
    """Models served together: each replica is one ``sharedserve serve --model-repository``
    process holding all of them."""

    name: Text
    """The shared server's name: its replicas are NAME-0, NAME-1..."""
    models: Annotated[
        tuple[ServerModel, ...],
        Field(min_length=1),
        Must("a non-empty list of models", _nonempty),
    ]
    """The models each of its servers holds."""
    replicas: PositiveWhole | None = None
    """Server processes of the shared server; none: 1."""
    gpu: Annotated[
        int | str | None,
        Must("an index or a UUID (prefix)", lambda v: _plain(v) and not isinstance(v, float)),
    ] = None
    """Pin its replicas to this GPU; none: pack places them."""
    gpu_memory_mib: _WholeMib = None
    """Each process's GPU memory cap in MiB; its models' budgets must fit inside it. None: a
    share of the GPU in proportion to its models' weights on disk."""
    cpu_limit: Positive | None = None
    """CPU cores for each process (a cgroup quota)."""
    paging: Annotated[str | None, Must("lru (or leave it out)", lambda v: v == "lru")] = None
    """``lru``: page the least recently used models out under the cap (``serve --paging``)."""
    serve_args: Annotated[
        list[str | int | float] | None,
        Must("a list of strings", lambda v: isinstance(v, list) and all(_plain(a) for a in v)),
    ] = None
    """More ``sharedserve serve`` flags for each process."""

    @model_validator(mode="after")
    def _budgets(self) -> ServerGroup:
        budgets = [m.gpu_memory_mib for m in self.models if m.gpu_memory_mib is not None]
        need, what = sum(budgets), "the models' budgets sum to"
        if self.paging == "lru":
            # Paging, the unpinned models take turns under the cap beside the pinned ones.
            pinned = [m.gpu_memory_mib or 0 for m in self.models if m.pinned]
            paged = [m.gpu_memory_mib or 0 for m in self.models if not m.pinned]
            need = sum(pinned) + max(paged, default=0)
            what = "the pinned models' budgets and the largest other's sum to"
        if self.gpu_memory_mib is not None and need > self.gpu_memory_mib:
            raise refuse(
                f"gpu_memory_mib: {what} {need} MiB, more than the shared server's cap of "
                f"{self.gpu_memory_mib} MiB; raise the cap or lower the budgets"
            )
        return self


def _model_name(model: str | None, name: str | None) -> str:
    return name if name is not None else Path(model or "").name


@dataclass(frozen=True, config=DOCUMENT, kw_only=True)
class PackSpecFile(SpecEntry):
    """A pack spec (``sharedserve pack --spec``): models for one host. A key of an entry given
    here, beside ``models``, is every entry's default (not a shared server's)."""

    models: Annotated[
        tuple[SpecEntry, ...] | None,
        Must("a non-empty list of entries", _nonempty),
    ] = None
    """The entries: a process per replica of each."""
    servers: Annotated[
        tuple[ServerGroup, ...] | None,
        Must("a non-empty list of shared servers", _nonempty),
    ] = None
    """Shared servers: a process per replica holding all of a shared server's models."""

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """Each entry is read with the top-level keys under its own."""
        if not isinstance(data, dict) or not isinstance(data.get("models"), list):
            return data
        top = {k: v for k, v in data.items() if k not in ("models", "servers")}
        if "name" in top and len(data["models"]) > 1:
            raise refuse("'name' names one entry; give it in each entry, not at the top")
        merged = [{**top, **e} if isinstance(e, dict) else e for e in data["models"]]
        return {**data, "models": merged}

    @model_validator(mode="after")
    def _whole(self) -> PackSpecFile:
        if not self.models and not self.servers:
            raise refuse("give 'models' (a list of entries), 'servers' (shared servers) or both")
        for i, entry in enumerate(self.models or ()):
            if entry.model is None:
                raise refuse(f"models[{i}]: 'model' (the model's base path) is required")
        twice = repeated(e.name for e in self.models or () if e.name is not None)
        if twice:
            raise refuse(f"entry names must be unique; repeated: {', '.join(twice)}")
        if self.servers:
            self._unique_across_servers(self.servers)
        return self

    def _unique_across_servers(self, servers: tuple[ServerGroup, ...]) -> None:
        twice = repeated(s.name for s in servers)
        if twice:
            raise refuse(
                f"servers: shared server names must be unique; repeated: {', '.join(twice)}"
            )
        # Every model is one name in the targets and URLs, whichever process serves it.
        named = [_model_name(e.model, e.name) for e in self.models or ()]
        clash = sorted({s.name for s in servers} & set(named))
        if clash:
            # Replicas and their logs are NAME-i, a shared server's or an entry's alike.
            raise refuse(f"servers: a shared server and an entry are both named {', '.join(clash)}")
        for i, server in enumerate(servers):
            for j, m in enumerate(server.models):
                name = _model_name(m.model, m.name)
                if name in named:
                    raise refuse(
                        f"servers[{i}].models[{j}].name: model name {name!r} is used twice in "
                        "the spec; give each model a unique 'name'"
                    )
                named.append(name)


@plain_dataclass(frozen=True)
class PackSpec:
    """The models of a pack spec, defaults applied and model paths resolved."""

    entries: tuple[PackEntry, ...]
    source: Path | None = None
    """The file it was read from."""


def load_spec(path: Path) -> PackSpec:
    """Read and check a spec file; ConfigError names the entry and key at fault."""
    data = read_document(path, "pack spec")
    return parse_spec(data, base_dir=path.parent, where=str(path))


def parse_spec(data: Any, *, base_dir: Path, where: str = "pack spec") -> PackSpec:
    """Check parsed spec data; model paths are taken relative to ``base_dir``."""
    spec = parse(PackSpecFile, data, where=where)
    servers = tuple(
        _shared_server(s, base_dir, _place(where, "servers", i, s.name))
        for i, s in enumerate(spec.servers or ())
    )
    return PackSpec(
        servers
        + tuple(
            _entry(e, base_dir, _place(where, "models", i, e.name))
            for i, e in enumerate(spec.models or ())
        ),
        None if where == "pack spec" else Path(where),
    )


def _place(where: str, key: str, index: int, name: str | None) -> str:
    """An entry's place in the file, as its parse errors say it: ``pack.yaml: models[1] (b)``."""
    return f"{where}: {key}[{index}]" + ("" if name is None else f" ({name})")


def spec_yaml(spec: PackSpecFile) -> str:
    """The spec as its file says it: keys in the order above, unset ones left out."""
    return yaml.safe_dump(dump(spec, drop_none=True), sort_keys=False)


def write_spec(spec: PackSpecFile, path: Path) -> Path:
    """Write ``spec`` to ``path`` (atomically: a running pack may be reading the last one)."""
    return write_atomic(path, spec_yaml(spec).encode())


def pack_schema() -> dict[str, Any]:
    """The pack spec's JSON Schema (``sharedserve schema pack``)."""
    schema = json_schema(PackSpecFile, "sharedserve pack spec")
    # Either list may be left out, not both: what PackSpecFile._whole refuses.
    schema["anyOf"] = [{"required": ["models"]}, {"required": ["servers"]}]
    return schema


def _entry(entry: SpecEntry, base_dir: Path, origin: str) -> PackEntry:
    cap = NO_CAP
    if entry.gpu_memory_fraction is not None:
        cap = GpuCapRequest.of(CapSource.FLAG, fraction=entry.gpu_memory_fraction)
    elif entry.gpu_memory_mib is not None:
        cap = GpuCapRequest.of(CapSource.FLAG, mib=entry.gpu_memory_mib)
    assert entry.model is not None  # PackSpecFile refuses an entry without one
    return PackEntry(
        model_dir=(base_dir / Path(entry.model).expanduser()),
        replicas=entry.replicas or 1,
        name=entry.name,
        gpu=None if entry.gpu is None else str(entry.gpu),
        cap=cap,
        cpu_limit_cores=entry.cpu_limit,
        server_args=tuple(str(a) for a in entry.serve_args or ()),
        slo_p99_ms=entry.slo_p99_ms,
        weight=1.0 if entry.weight is None else entry.weight,
        origin=origin,
    )


def _shared_server(server: ServerGroup, base_dir: Path, origin: str) -> PackEntry:
    models = tuple(
        SharedServerModel(
            model_dir=base_dir / Path(m.model).expanduser(),
            name=m.name,
            slo_p99_ms=m.slo_p99_ms,
            weight=1.0 if m.weight is None else m.weight,
            gpu_memory_mib=m.gpu_memory_mib,
            pinned=m.pinned,
            max_inflight=m.max_inflight,
            origin=_place(origin, "models", j, m.name),
        )
        for j, m in enumerate(server.models)
    )
    cap = NO_CAP
    if server.gpu_memory_mib is not None:
        cap = GpuCapRequest.of(CapSource.FLAG, mib=server.gpu_memory_mib)
    return PackEntry(
        model_dir=models[0].model_dir,
        replicas=server.replicas or 1,
        name=server.name,
        gpu=None if server.gpu is None else str(server.gpu),
        cap=cap,
        cpu_limit_cores=server.cpu_limit,
        server_args=tuple(str(a) for a in server.serve_args or ()),
        models=models,
        paging=server.paging == "lru",
        origin=origin,
    )

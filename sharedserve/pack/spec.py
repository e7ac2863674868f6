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
``serve_args``. ``PackSpecFile`` is the file, read by ``load_spec`` and written by ``write_spec``
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

from sharedserve.config import NO_CAP, CapSource, GpuCapRequest, PackEntry
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


@dataclass(frozen=True, config=DOCUMENT, kw_only=True)
class PackSpecFile(SpecEntry):
    """A pack spec (``sharedserve pack --spec``): models for one host. A key of an entry given
    here, beside ``models``, is every entry's default."""

    models: Annotated[
        tuple[SpecEntry, ...],
        Field(min_length=1),
        Must("a non-empty list of entries", lambda v: isinstance(v, (list, tuple)) and len(v) > 0),
    ]
    """The entries."""

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """Each entry is read with the top-level keys under its own."""
        if not isinstance(data, dict) or not isinstance(data.get("models"), list):
            return data
        top = {k: v for k, v in data.items() if k != "models"}
        if "name" in top and len(data["models"]) > 1:
            raise refuse("'name' names one entry; give it in each entry, not at the top")
        merged = [{**top, **e} if isinstance(e, dict) else e for e in data["models"]]
        return {**data, "models": merged}

    @model_validator(mode="after")
    def _whole(self) -> PackSpecFile:
        for i, entry in enumerate(self.models):
            if entry.model is None:
                raise refuse(f"models[{i}]: 'model' (the model's base path) is required")
        twice = repeated(e.name for e in self.models if e.name is not None)
        if twice:
            raise refuse(f"entry names must be unique; repeated: {', '.join(twice)}")
        return self


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
    return PackSpec(
        tuple(_entry(e, base_dir) for e in spec.models),
        None if where == "pack spec" else Path(where),
    )


def spec_yaml(spec: PackSpecFile) -> str:
    """The spec as its file says it: keys in the order above, unset ones left out."""
    return yaml.safe_dump(dump(spec, drop_none=True), sort_keys=False)


def write_spec(spec: PackSpecFile, path: Path) -> Path:
    """Write ``spec`` to ``path`` (atomically: a running pack may be reading the last one)."""
    return write_atomic(path, spec_yaml(spec).encode())


def pack_schema() -> dict[str, Any]:
    """The pack spec's JSON Schema (``sharedserve schema pack``)."""
    return json_schema(PackSpecFile, "sharedserve pack spec")


def _entry(entry: SpecEntry, base_dir: Path) -> PackEntry:
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
    )

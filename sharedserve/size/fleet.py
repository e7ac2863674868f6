"""The fleet file (``size --fleet fleet.yaml``): the GPUs on offer and the models to serve. Pure
(reads the file).

Format (YAML; JSON is YAML too)::

    gpu: {name: H100-80GB, memory_mib: 81559, price_per_hour: 3.0}   # optional max_gpus
    node: {gpus: 8, cpu_cores: 64}   # optional host_memory_mib: the plan warns past it
    utilization_target: 0.8          # share of a GPU's time the plan may fill (default 0.8)
    context_reserve_mib: 704         # kept per process beside its cap, as pack keeps it
    host_memory_per_process_mib: 250 # a serve process's runtime in host memory, paid once
    paging: {policy: lru, page_in_ms: 50}   # optional: shared servers page their coldest out
    models:
      - name: fraud
        profile: profiles/fraud/report.json   # a bench report, relative to this file
        peak_qps: 200
        slo_p99_ms: 100
        min_replicas: 2              # default 2, for availability
        max_replicas_per_gpu: 4      # optional
        profile_model: resnet50      # the model's name in the report (default: name)
        model: models/fraud          # its files, for pack specs and sizes on disk (optional)
    kubernetes:                      # optional, for the plan's k8s.yaml; defaults shown
      image: sharedserve:0.1.0
      namespace: sharedserve
      model_pvc: sharedserve-models
      runtime_class: nvidia          # optional
      vgpus_per_gpu: 20              # or vgpu_memory_mib: the allocator's cut of a GPU;
                                     # default: the coarsest that holds each pod's share
      dra: false                     # true: claims on the DRA driver, memory and compute
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator
from pydantic.dataclasses import dataclass

from sharedserve import __version__
from sharedserve.config import CONTEXT_RESERVE_MIB
from sharedserve.documents import (
    DOCUMENT,
    INTERNAL,
    Must,
    Positive,
    PositiveWhole,
    Text,
    json_schema,
    number,
    parse,
    read_document,
    refuse,
    repeated,
    whole,
)

MAX_PAGE_IN_MS = 50.0
"""The longest page-in a plan pages with: a device copy (``PagingSettings.page_in_ms``)."""

__all__ = [
    "MAX_PAGE_IN_MS",
    "Fleet",
    "FleetModel",
    "GpuType",
    "KubernetesSettings",
    "NodeType",
    "PagingSettings",
    "fleet_schema",
    "listed",
    "load_fleet",
    "parse_fleet",
]

log = logging.getLogger(__name__)


def _beside_file(path: Path, info: ValidationInfo) -> Path:
    """A path in the file, taken relative to the file (``parse_fleet``'s ``base_dir``)."""
    base = (info.context or {}).get("base_dir")
    return path if base is None else base / path.expanduser()


FilePath = Annotated[
    Path,
    Must("a non-empty string", lambda v: isinstance(v, Path) or (isinstance(v, str) and v != "")),
    AfterValidator(_beside_file),
]


@dataclass(frozen=True, config=DOCUMENT)
class GpuType:
    """The one kind of GPU the fleet is planned on."""

    name: Text
    """The GPU's name, as NVML gives it (a profile from another GPU is a warning)."""
    memory_mib: PositiveWhole
    """Its memory in MiB."""
    price_per_hour: Positive
    """What one GPU costs an hour, in any currency: the plan's costs are in it."""
    max_gpus: PositiveWhole | None = None
    """At most this many GPUs; none: as many as the plan needs."""


@dataclass(frozen=True, config=DOCUMENT)
class NodeType:
    """The nodes the GPUs are in."""

    gpus: PositiveWhole
    """GPUs per node: replicas of one model go on different nodes where possible."""
    cpu_cores: Positive
    """CPU cores per node: the plan warns of a node whose replicas need more."""
    host_memory_mib: PositiveWhole | None = None
    """Host memory per node in MiB: the plan warns of a node whose processes need more (each
    process's runtime once, and its models, ``size.host``); none: not checked."""


@dataclass(frozen=True, config=DOCUMENT)
class FleetModel:
    """One model to serve."""

    name: Text
    """Its name: unique in the fleet; the Deployment's name in k8s.yaml."""
    profile: FilePath
    """A ``bench`` report.json that measured it, or a directory of them (``sharedserve
    profile``'s), relative to the fleet file."""
    peak_qps: Positive
    """The request rate it must sustain at peak."""
    slo_p99_ms: Positive
    """Its objective: p99 latency in milliseconds."""
    min_replicas: Annotated[
        int, Field(ge=1), Must("a whole number >= 1", lambda v: whole(v) and v >= 1)
    ] = 2
    """At least this many replicas, on different GPUs (and nodes), for availability."""
    max_replicas_per_gpu: PositiveWhole | None = None
    """At most this many replicas on a GPU with it."""
    profile_model: Text | None = None
    """Its name in the report; none: ``name``."""
    model: FilePath | None = None
    """Its files (TF Serving layout), relative to the fleet file: for the plan's pack specs, and
    its size on disk."""

    @property
    def in_profile(self) -> str:
        return self.profile_model or self.name


@dataclass(frozen=True, config=DOCUMENT)
class PagingSettings:
    """Shared servers may page their coldest models out of GPU memory and back in on demand
    (``serve --paging lru``): a server then needs room for its other models and the largest of
    those it pages, not for all of them (``size.grouping``)."""

    policy: Annotated[str, Must("lru", lambda v: v == "lru")] = "lru"
    """Which model a full server pages out: the least recently used (the only policy)."""
    page_in_ms: Annotated[
        float,
        Field(gt=0, le=MAX_PAGE_IN_MS),
        Must(
            f"a number over 0 and at most {MAX_PAGE_IN_MS:g} (a device copy: a page-in that "
            "reloads from disk stalls the other models of its process; serve those dedicated)",
            lambda v: number(v) and 0 < v <= MAX_PAGE_IN_MS,
        ),
    ] = 50.0
    """The time one page-in adds to a request, in ms: a model is paged only where its
    objective has room for it over its p99 (the GPU kit's multimodel stage measures it). At
    most 50: a device copy. A reload from disk (a TensorFlow model's page-in) holds the server
    process's interpreter lock for long stretches, and its neighbours' p99 went to 24 times
    theirs in a process of their own (``benchmarks/results/multimodel_cpu.md``)."""


_OLD_VGPUS = "replicas_per_gpu"


@dataclass(frozen=True, config=DOCUMENT)
class KubernetesSettings:
    """What the plan's manifests (``k8s.yaml``) need beyond the plan: ``k8s render``'s options."""

    image: Text = f"sharedserve:{__version__}"
    """The model servers' image."""
    namespace: Text = "sharedserve"
    model_pvc: Text = "sharedserve-models"
    """The PersistentVolumeClaim holding the models' files."""
    runtime_class: Text | None = None
    """The pods' RuntimeClass (e.g. nvidia); none: the cluster's default."""
    vgpus_per_gpu: PositiveWhole | None = None
    """vGPUs per GPU, the allocator's ``--vgpus-per-gpu``. Read from ``replicas_per_gpu`` too, its
    name before the allocator's flag was renamed (with a warning): "replicas" are processes on
    ``pack`` and pods on ``k8s render``."""
    vgpu_memory_mib: PositiveWhole | None = None
    """MiB per vGPU, the allocator's ``--vgpu-memory-mib``. Neither: the plan picks the coarsest
    ``--vgpus-per-gpu`` (at most 100) that holds every pod's planned share to within a twentieth
    of a GPU (``size.manifests``)."""
    dra: Annotated[bool, Must("true or false", lambda v: isinstance(v, bool))] = False
    """Pods claim their share from the DRA driver (``allocator --api dra``): GPU memory and a
    percent of the GPU's compute, as consumable capacity, instead of vGPUs."""

    @model_validator(mode="before")
    @classmethod
    def _old_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and _OLD_VGPUS in data:
            if "vgpus_per_gpu" in data:
                raise refuse(f"give vgpus_per_gpu, not both it and {_OLD_VGPUS} (its old name)")
            log.warning("kubernetes.%s is deprecated: call it vgpus_per_gpu", _OLD_VGPUS)
            data = {("vgpus_per_gpu" if k == _OLD_VGPUS else k): v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _one_cut(self) -> KubernetesSettings:
        if self.vgpus_per_gpu is not None and self.vgpu_memory_mib is not None:
            raise refuse("give vgpus_per_gpu or vgpu_memory_mib, not both")
        if self.dra and (self.vgpus_per_gpu is not None or self.vgpu_memory_mib is not None):
            raise refuse(
                "dra: pods claim memory and compute from the DRA driver, not vGPUs: "
                "give dra or a vGPU cut (vgpus_per_gpu, vgpu_memory_mib), not both"
            )
        return self


@dataclass(frozen=True, config=DOCUMENT)
class Fleet:
    """A fleet file: the GPUs on offer and the models to serve (``sharedserve size --fleet``)."""

    gpu: GpuType
    node: NodeType
    models: Annotated[
        tuple[FleetModel, ...],
        Field(min_length=1),
        Must("a non-empty list", lambda v: isinstance(v, (list, tuple)) and len(v) > 0),
    ]
    utilization_target: Annotated[
        float, Field(gt=0, le=1), Must("in (0, 1]", lambda v: number(v) and 0 < v <= 1)
    ] = 0.8
    """Share of a GPU's time the plan may fill."""
    context_reserve_mib: Annotated[
        int, Field(ge=0), Must("a whole number >= 0", lambda v: whole(v) and v >= 0)
    ] = CONTEXT_RESERVE_MIB
    """MiB kept per process beside its cap (its CUDA context), as pack keeps it."""
    host_memory_per_process_mib: Annotated[
        int, Field(ge=0), Must("a whole number >= 0", lambda v: whole(v) and v >= 0)
    ] = 250
    """Host memory in MiB each serve process pays once for its runtime, whatever it holds:
    178 (torch) to 246 (TensorFlow) per process measured on CPU
    (benchmarks/results/multimodel_memory_cpu.md)."""
    paging: PagingSettings | None = None
    """Shared servers page their coldest models (``serve --paging lru``); none: every model of
    a server stays in GPU memory."""
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    """For the plan's k8s.yaml."""
    source: Annotated[Path | None, INTERNAL] = None
    """The file it was read from."""

    @field_validator("kubernetes", mode="before")
    @classmethod
    def _empty_block(cls, value: Any) -> Any:
        """``kubernetes:`` with every key commented out is YAML's null: the defaults."""
        return {} if value is None else value

    @field_validator("paging", mode="before")
    @classmethod
    def _paging_policy(cls, value: Any) -> Any:
        """``paging: lru``: the policy, with the page-in time's default."""
        return {"policy": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _unique_names(self) -> Fleet:
        twice = repeated(m.name for m in self.models)
        if twice:
            raise refuse(f"model names must be unique; repeated: {', '.join(twice)}")
        return self


def listed(names: list[str], most: int = 5) -> str:
    """``a, b, c``; past ``most`` names, ``a, b, c, d, e and 495 more``: a fleet has thousands."""
    if len(names) <= most:
        return ", ".join(names)
    return f"{', '.join(names[:most])} and {len(names) - most} more"


def parse_fleet(data: Any, *, base_dir: Path, where: str = "fleet file") -> Fleet:
    """Check parsed fleet data; paths are taken relative to ``base_dir``."""
    fleet = parse(Fleet, data, where=where, context={"base_dir": base_dir})
    return dataclasses.replace(fleet, source=None if where == "fleet file" else Path(where))


def load_fleet(path: Path) -> Fleet:
    """Read and check a fleet file; ConfigError names the model and key at fault."""
    return parse_fleet(read_document(path, "fleet file"), base_dir=path.parent, where=str(path))


def fleet_schema() -> dict[str, Any]:
    """The fleet file's JSON Schema (``sharedserve schema fleet``)."""
    return json_schema(Fleet, "sharedserve fleet file")

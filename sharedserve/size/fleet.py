"""The fleet file (``size --fleet fleet.yaml``): the GPUs on offer and the models to serve. Pure
(reads the file).

Format (YAML; JSON is YAML too)::

    gpu: {name: H100-80GB, memory_mib: 81559, price_per_hour: 3.0}   # optional max_gpus
    node: {gpus: 8, cpu_cores: 64}
    utilization_target: 0.8          # share of a GPU's time the plan may fill (default 0.8)
    context_reserve_mib: 512         # kept per replica beside its cap, as pack keeps it
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
      replicas_per_gpu: 8            # or vgpu_memory_mib: the allocator's cut of a GPU;
                                     # default: the coarsest cut every planned GPU's share fits
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sharedserve import __version__
from sharedserve.errors import ConfigError
from sharedserve.pack.spec import read_document, unknown_key

__all__ = [
    "Fleet",
    "FleetModel",
    "GpuType",
    "KubernetesSettings",
    "NodeType",
    "listed",
    "load_fleet",
    "parse_fleet",
]

_TOP_KEYS = ("gpu", "node", "utilization_target", "context_reserve_mib", "models", "kubernetes")
_KUBE_KEYS = (
    *("image", "namespace", "model_pvc", "runtime_class", "replicas_per_gpu"),
    "vgpu_memory_mib",
)
_GPU_KEYS = ("name", "memory_mib", "price_per_hour", "max_gpus")
_NODE_KEYS = ("gpus", "cpu_cores")
_MODEL_KEYS = (
    *("name", "profile", "peak_qps", "slo_p99_ms", "min_replicas", "max_replicas_per_gpu"),
    *("profile_model", "model"),
)


@dataclass(frozen=True)
class GpuType:
    """The one kind of GPU the fleet is planned on."""

    name: str
    memory_mib: int
    price_per_hour: float
    max_gpus: int | None = None
    """At most this many GPUs; None: as many as the plan needs."""


@dataclass(frozen=True)
class NodeType:
    gpus: int
    """GPUs per node: replicas of one model go on different nodes where possible."""
    cpu_cores: float
    """CPU cores per node: the plan warns of a node whose replicas need more."""


@dataclass(frozen=True)
class FleetModel:
    """One model to serve."""

    name: str
    profile: Path
    """A ``bench`` report.json that measured it."""
    peak_qps: float
    """The request rate it must sustain at peak."""
    slo_p99_ms: float
    min_replicas: int = 2
    max_replicas_per_gpu: int | None = None
    profile_model: str | None = None
    """Its name in the report; None: ``name``."""
    model: Path | None = None
    """Its files (TF Serving layout): for the plan's pack specs, and its size on disk."""

    @property
    def in_profile(self) -> str:
        return self.profile_model or self.name


@dataclass(frozen=True)
class KubernetesSettings:
    """What the plan's manifests (``k8s.yaml``) need beyond the plan: ``k8s render``'s options."""

    image: str = f"sharedserve:{__version__}"
    namespace: str = "sharedserve"
    model_pvc: str = "sharedserve-models"
    runtime_class: str | None = None
    replicas_per_gpu: int | None = None
    """vGPUs per GPU, the allocator's ``--vgpus-per-gpu``."""
    vgpu_memory_mib: int | None = None
    """MiB per vGPU, the allocator's ``--vgpu-memory-mib``. Neither: the plan picks the coarsest
    ``--vgpus-per-gpu`` that every planned GPU's share fits."""


@dataclass(frozen=True)
class Fleet:
    gpu: GpuType
    node: NodeType
    models: tuple[FleetModel, ...]
    utilization_target: float = 0.8
    context_reserve_mib: int = 512
    source: Path | None = None
    kubernetes: KubernetesSettings = KubernetesSettings()


def listed(names: list[str], most: int = 5) -> str:
    """``a, b, c``; past ``most`` names, ``a, b, c, d, e and 495 more``: a fleet has thousands."""
    if len(names) <= most:
        return ", ".join(names)
    return f"{', '.join(names[:most])} and {len(names) - most} more"


def _check_keys(values: Any, known: tuple[str, ...], where: str) -> dict[str, Any]:
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a mapping, got {values!r}")
    for key in values:
        if key not in known:
            raise unknown_key(key, known, where)
    return values


def _positive(values: dict[str, Any], key: str, where: str, *, whole: bool = False) -> Any:
    value: Any = values.get(key)
    ok = isinstance(value, int if whole else (int, float)) and not isinstance(value, bool)
    if not ok or not value > 0:
        what = "a positive whole number" if whole else "a positive number"
        missing = " (required)" if value is None else f", got {value!r}"
        raise ConfigError(f"{where}: {key} must be {what}{missing}")
    return value


def _optional(values: dict[str, Any], key: str, where: str, *, whole: bool = False) -> Any:
    return None if values.get(key) is None else _positive(values, key, where, whole=whole)


def _name(values: dict[str, Any], key: str, where: str) -> str:
    value = values.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def _model(raw: Any, base_dir: Path, where: str) -> FleetModel:
    values = _check_keys(raw, _MODEL_KEYS, where)
    name = _name(values, "name", where)
    where = f"{where} ({name})"
    min_replicas = values.get("min_replicas", 2)
    if isinstance(min_replicas, bool) or not isinstance(min_replicas, int) or min_replicas < 1:
        raise ConfigError(
            f"{where}: min_replicas must be a whole number >= 1, got {min_replicas!r}"
        )
    model = values.get("model")
    return FleetModel(
        name=name,
        profile=base_dir / _name(values, "profile", where),
        peak_qps=float(_positive(values, "peak_qps", where)),
        slo_p99_ms=float(_positive(values, "slo_p99_ms", where)),
        min_replicas=min_replicas,
        max_replicas_per_gpu=_optional(values, "max_replicas_per_gpu", where, whole=True),
        profile_model=None if values.get("profile_model") is None
        else _name(values, "profile_model", where),
        model=None if model is None else base_dir / _name(values, "model", where),
    )  # fmt: skip


def _kubernetes(raw: Any, where: str) -> KubernetesSettings:
    if raw is None:
        return KubernetesSettings()
    values = _check_keys(raw, _KUBE_KEYS, where)
    if values.get("replicas_per_gpu") is not None and values.get("vgpu_memory_mib") is not None:
        raise ConfigError(f"{where}: give replicas_per_gpu or vgpu_memory_mib, not both")
    names = {
        key: _name(values, key, where)
        for key in ("image", "namespace", "model_pvc", "runtime_class")
        if values.get(key) is not None
    }
    return KubernetesSettings(
        **names,
        replicas_per_gpu=_optional(values, "replicas_per_gpu", where, whole=True),
        vgpu_memory_mib=_optional(values, "vgpu_memory_mib", where, whole=True),
    )


def parse_fleet(data: Any, *, base_dir: Path, where: str = "fleet file") -> Fleet:
    """Check parsed fleet data; paths are taken relative to ``base_dir``."""
    top = _check_keys(data, _TOP_KEYS, where)
    gpu = _check_keys(top.get("gpu"), _GPU_KEYS, f"{where}: gpu")
    node = _check_keys(top.get("node"), _NODE_KEYS, f"{where}: node")
    target = top.get("utilization_target", 0.8)
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target <= 1:
        raise ConfigError(f"{where}: utilization_target must be in (0, 1], got {target!r}")
    reserve = top.get("context_reserve_mib", 512)
    if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
        raise ConfigError(f"{where}: context_reserve_mib must be a whole number >= 0")
    models = top.get("models")
    if not isinstance(models, list) or not models:
        raise ConfigError(f"{where}: 'models' must be a non-empty list")
    parsed = tuple(_model(m, base_dir, f"{where}: models[{i}]") for i, m in enumerate(models))
    names = [m.name for m in parsed]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"{where}: model names must be unique; repeated: {', '.join(repeated)}")
    return Fleet(
        gpu=GpuType(
            name=_name(gpu, "name", f"{where}: gpu"),
            memory_mib=_positive(gpu, "memory_mib", f"{where}: gpu", whole=True),
            price_per_hour=float(_positive(gpu, "price_per_hour", f"{where}: gpu")),
            max_gpus=_optional(gpu, "max_gpus", f"{where}: gpu", whole=True),
        ),
        node=NodeType(
            gpus=_positive(node, "gpus", f"{where}: node", whole=True),
            cpu_cores=float(_positive(node, "cpu_cores", f"{where}: node")),
        ),
        models=parsed,
        utilization_target=float(target),
        context_reserve_mib=reserve,
        source=None if where == "fleet file" else Path(where),
        kubernetes=_kubernetes(top.get("kubernetes"), f"{where}: kubernetes"),
    )


def load_fleet(path: Path) -> Fleet:
    """Read and check a fleet file; ConfigError names the model and key at fault."""
    return parse_fleet(read_document(path, "fleet file"), base_dir=path.parent, where=str(path))

"""The Helm chart's values (``charts/sharedserve``) as typed documents. Pure.

One set of types makes the chart's ``values.schema.json`` (``sharedserve schema chart-values``,
which Helm checks every ``install``, ``upgrade`` and ``template`` against), the ``values.yaml``
``sharedserve size`` writes beside ``k8s.yaml`` (``chart_values``), and the model servers
``k8s render`` would render for the same values (``chart_deployments``): the chart's tests
render both and compare the objects, so the chart's templates cannot drift from the one source
of a model's Deployment (``k8s/model/``, ``k8s.render``). Keys are camelCase, as in every chart;
a server's keys are ``ModelDeployment``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Annotated, Any

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.dataclasses import dataclass

from sharedserve import contract
from sharedserve.documents import PositiveWhole, dump, json_schema
from sharedserve.enums import PlacementPolicy
from sharedserve.k8s.admin import ADMIN_SECRET
from sharedserve.k8s.render import ModelDeployment, PodSpread
from sharedserve.k8s.shared_server import SharedServerModelFiles, SharedServerPods

__all__ = [
    "AllocatorMode",
    "AllocatorValues",
    "AutoscalingKind",
    "AutoscalingValues",
    "ChartValues",
    "ScalingMetric",
    "ServerModelValues",
    "ServerValues",
    "chart_deployments",
    "chart_schema",
    "chart_values",
]

_VALUES = ConfigDict(
    extra="forbid", use_attribute_docstrings=True, alias_generator=to_camel, populate_by_name=True
)
# The JSON Schema's patterns: what ModelDeployment.validate checks, anchored.
_MODEL_NAME = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
_DNS_LABEL = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$"
ModelName = Annotated[str, Field(pattern=_MODEL_NAME)]
Quantity = Annotated[str, Field(pattern=_QUANTITY)]


class AllocatorMode(str, Enum):
    """How the allocator offers GPUs to pods."""

    DEVICE_PLUGIN = "device-plugin"
    """A kubelet device plugin advertising ``sharedserve.io/vgpu`` (k8s/base/allocator)."""
    DRA = "dra"
    """The DRA driver ``gpu.sharedserve.io``: DeviceClass, RBAC, admission policy
    (k8s/overlays/dra/driver)."""


class AutoscalingKind(str, Enum):
    NONE = "none"
    HPA = "hpa"
    KEDA = "keda"


class ScalingMetric(str, Enum):
    """The servers' own metrics an autoscaler holds at a target."""

    QUEUE_DEPTH = "sharedserve_queue_depth"
    QUEUE_WAIT = "sharedserve_queue_wait_seconds"


@dataclass(frozen=True, config=_VALUES)
class AllocatorValues:
    """The per-node allocator DaemonSet, as k8s/base/allocator and its overlays install it."""

    enabled: bool = True
    """Install it (off where another release of the chart, or kustomize, already does)."""
    mode: AllocatorMode = AllocatorMode.DEVICE_PLUGIN
    """``device-plugin`` (vGPUs) or ``dra`` (the DRA driver; Kubernetes 1.36)."""
    vgpus_per_gpu: PositiveWhole = 4
    """Device plugin: vGPUs each GPU is cut into (``allocator --vgpus-per-gpu``)."""
    policy: PlacementPolicy = PlacementPolicy.BUNDLE
    """Device plugin: which GPU a pod's vGPUs come from (``allocator --policy``)."""
    mps: bool = False
    """Device plugin: run NVIDIA MPS (the control daemon DaemonSet, ``allocator --mps``)."""
    health_interval: PositiveWhole = 10
    """Seconds between GPU health checks (``allocator --health-interval``)."""
    memory_step_mib: PositiveWhole = 256
    """DRA: the step a claim's memory is rounded up to (``allocator --memory-step-mib``)."""


@dataclass(frozen=True, config=_VALUES)
class ServerModelValues:
    """One model of a shared server."""

    name: ModelName
    """Its name in the server's repository and URLs."""
    directory: ModelName
    """Its directory on the models' claim."""
    model_file: dict[str, Any] = Field(default_factory=dict)
    """Its ``sharedserve.yaml`` in the pod (``sharedserve schema model``): weight, budget,
    GPU memory cap, pinned."""


@dataclass(frozen=True, config=_VALUES)
class ServerValues:
    """One model server's Deployment and Service: a model's, or a shared server's (``models``)."""

    model: ModelName
    """The model's name (a shared server's: its name, in labels)."""
    name: Annotated[str, Field(pattern=_DNS_LABEL)] | None = None
    """Deployment and Service name [default: the model name lower-cased]."""
    vgpu: PositiveWhole = 1
    """vGPUs per pod (device plugin)."""
    gpu_memory: Quantity | None = None
    """DRA: GPU memory each pod's claim asks for (``6Gi``), instead of vGPUs."""
    gpu_compute: Annotated[int, Field(ge=1, le=contract.DRA_COMPUTE_UNITS)] | None = None
    """DRA: percent of the GPU's compute each pod's claim asks for."""
    cpu: Quantity = "500m"
    """CPU request and limit (cores)."""
    memory: Quantity = "2Gi"
    """Memory request and limit (bytes)."""
    replicas: PositiveWhole = 1
    """Pods (the lower bound where autoscaling is on)."""
    model_dir: ModelName | None = None
    """The model's directory on the claim [default: the model name]."""
    serve_args: list[str] = Field(default_factory=list)
    """Extra ``sharedserve serve`` options."""
    spread: PodSpread = PodSpread.NONE
    """Keep its pods apart: ``nodes`` (anti-affinity) or ``preferred`` (a topology spread)."""
    models: list[ServerModelValues] = Field(default_factory=list)
    """A shared server's models: its pods serve them from one repository; empty: one model."""
    paging: bool = False
    """A shared server pages its models in and out (``serve --paging lru``)."""


@dataclass(frozen=True, config=_VALUES)
class AutoscalingValues:
    """An HPA or a KEDA ScaledObject per server, on the servers' own metrics."""

    kind: AutoscalingKind = AutoscalingKind.NONE
    """``none``, ``hpa`` (a Pods metric, through a custom metrics adapter) or ``keda``."""
    max_replicas: Annotated[int, Field(ge=1, le=100)] = 4
    """At most this many pods a server (each its share of a GPU)."""
    metric: ScalingMetric = ScalingMetric.QUEUE_DEPTH
    """What it holds at ``target``: ``sharedserve_queue_depth``, the calls waiting, on average
    per pod; or (``keda`` only) ``sharedserve_queue_wait_seconds``, the server's 90th percentile
    wait for a thread over the last 2 minutes, in seconds."""
    target: Annotated[float, Field(gt=0)] = 4.0
    """The value it holds the metric at (calls waiting a pod; seconds of wait)."""
    prometheus: str = "http://prometheus-operated.monitoring.svc:9090"
    """KEDA: the Prometheus its trigger queries."""


@dataclass(frozen=True, config=_VALUES)
class MonitoringValues:
    """The Prometheus Operator's objects and the Grafana dashboard (k8s/monitoring)."""

    service_monitor: bool = False
    """A ServiceMonitor for the allocators' metrics."""
    pod_monitor: bool = False
    """A PodMonitor for the model servers' metrics."""
    dashboard: bool = False
    """The Grafana dashboard as a ConfigMap (label ``grafana_dashboard``)."""


@dataclass(frozen=True, config=_VALUES)
class ChartValues:
    """The sharedserve chart's values."""

    image: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")] = "sharedserve:0.1.0"
    """The sharedserve image, for the allocator and the servers."""
    model_pvc: Annotated[str, Field(pattern=_DNS_SUBDOMAIN)] = "sharedserve-models"
    """The PersistentVolumeClaim holding the models (TF Serving's layout)."""
    admin_secret: Annotated[str, Field(pattern=_DNS_SUBDOMAIN)] = ADMIN_SECRET
    """The Secret whose ``key`` is the servers' management key."""
    create_admin_secret: bool = True
    """Make that Secret with a random key, kept across upgrades; off: it must exist."""
    runtime_class: Annotated[str, Field(pattern=_DNS_SUBDOMAIN)] | None = None
    """RuntimeClass of the servers' pods, where NVIDIA's is not the default."""
    allocator: AllocatorValues = AllocatorValues()
    """The allocator DaemonSet."""
    servers: list[ServerValues] = Field(default_factory=list)
    """The model servers (``sharedserve size`` writes them from a plan)."""
    autoscaling: AutoscalingValues = AutoscalingValues()
    """Scaling each server's pods."""
    monitoring: MonitoringValues = MonitoringValues()
    """Prometheus Operator objects, Grafana dashboard."""


def chart_schema() -> dict[str, Any]:
    """The chart's ``values.schema.json`` (``sharedserve schema chart-values``)."""
    return json_schema(ChartValues, "sharedserve Helm chart values")


def chart_deployments(
    values: ChartValues, namespace: str
) -> list[tuple[ModelDeployment, SharedServerPods | None]]:
    """What ``k8s render`` renders for the chart's servers, in ``namespace``."""
    out = []
    for s in values.servers:
        deployment = ModelDeployment(
            model=s.model, image=values.image, name=s.name, vgpu=s.vgpu,
            gpu_memory=s.gpu_memory, gpu_compute=s.gpu_compute, cpu=s.cpu, memory=s.memory,
            model_pvc=values.model_pvc, namespace=namespace, replicas=s.replicas,
            runtime_class=values.runtime_class, model_dir=s.model_dir,
            serve_args=tuple(s.serve_args), admin_secret=values.admin_secret, spread=s.spread,
        )  # fmt: skip
        pods = None
        if s.models:
            files = [SharedServerModelFiles(m.name, m.directory, m.model_file) for m in s.models]
            pods = SharedServerPods(tuple(files), paging=s.paging)
        out.append((deployment, pods))
    return out


def _server(deployment: ModelDeployment, pods: SharedServerPods | None) -> ServerValues:
    models = [] if pods is None else [ServerModelValues(m.name, m.directory, m.model_file)
                                      for m in pods.models]  # fmt: skip
    return ServerValues(
        model=deployment.model, name=deployment.name, vgpu=deployment.vgpu,
        gpu_memory=deployment.gpu_memory, gpu_compute=deployment.gpu_compute,
        cpu=deployment.cpu, memory=deployment.memory, replicas=deployment.replicas,
        model_dir=deployment.model_dir, serve_args=list(deployment.serve_args),
        spread=deployment.spread, models=models, paging=pods is not None and pods.paging,
    )  # fmt: skip


def chart_values(
    servers: Sequence[tuple[ModelDeployment, SharedServerPods | None]],
    allocator: AllocatorValues,
) -> dict[str, Any]:
    """Values installing ``servers`` (their image, claim and RuntimeClass: the first's) and
    ``allocator``, as plain data for a values file: keys left at their defaults are left out, so
    the file says what differs. The chart makes the management key at install, so the file,
    unlike a rendered one, holds none."""
    first = servers[0][0] if servers else ModelDeployment(model="none", image="sharedserve:0.1.0")
    values = ChartValues(
        image=first.image, model_pvc=first.model_pvc, admin_secret=first.admin_secret,
        runtime_class=first.runtime_class, allocator=allocator,
        servers=[_server(d, p) for d, p in servers],
    )  # fmt: skip
    data: dict[str, Any] = _without_defaults(
        dump(values, by_alias=True), dump(ChartValues(), by_alias=True)
    )
    return data


def _without_defaults(data: Any, defaults: Any) -> Any:
    """``data`` less what equals ``defaults``, a server's keys less a server's defaults."""
    if isinstance(data, dict) and isinstance(defaults, dict):
        out = {}
        for key, value in data.items():
            if key in defaults and value == defaults[key]:
                continue
            out[key] = _without_defaults(value, defaults.get(key))
        return out
    if isinstance(data, list):
        return [_without_server_defaults(item) for item in data]
    return data


def _without_server_defaults(item: Any) -> Any:
    if not isinstance(item, dict) or "model" not in item:
        return item
    default = dump(ServerValues(model=item["model"]), by_alias=True)
    return {k: v for k, v in item.items() if k == "model" or v != default.get(k)}

"""A model's Deployment and Service, from their one source and one settings object.

The source is ``sharedserve/k8s/model/`` (package data): commented YAML written out for the example
model ``tiny``, which ``k8s/base/model`` also builds from. ``render_model`` loads it and sets what
differs per model; everything else, and the comments explaining it, live in that YAML. In short:

- ``sharedserve.io/vgpu`` in requests and limits: the allocator grants vGPUs and injects the env
  contract (GPU, memory cap); the scheduler places the pod only on a node advertising vGPUs.
- CPU and memory requests equal to limits: Guaranteed QoS, and a CFS quota the server reads to
  size its thread pools (``sharedserve serve`` looks at its own cgroup).
- Probes: liveness and start-up on ``GET /v2/health/live``, readiness on ``GET /v2/health/ready``,
  which answers 503 until the model has loaded and warmed up, and again from SIGTERM on; a
  ``preStop`` wait and a termination grace longer than it plus the server's shutdown grace.
- ``maxSurge: 0``: a surge pod would need one more vGPU, which a full node does not have.
- The management key: a Secret's ``key``, mounted read-only and passed as ``serve
  --admin-key-file``; ``sharedserve.k8s.admin`` makes the Secret.
- ``spread``, where a plan put a model's pods on different GPUs (``size``): pod anti-affinity
  over nodes where it put each on a node of its own, else a topology spread over nodes that the
  scheduler prefers. Kubernetes places pods on nodes; which GPU of a node a pod gets is the
  allocator's (``--policy``), which no pod-level rule reaches.

In DRA mode (``gpu_memory`` set: ``k8s render --dra``) the pod asks the DRA driver
``gpu.sharedserve.io`` for GPU memory instead of vGPUs, and for a share of the GPU's compute
where ``gpu_compute`` is set: the Component in ``model/dra/`` (which ``k8s/overlays/dra/model``
builds with too) adds a ResourceClaimTemplate and patches the Deployment to claim from it, and
``render_model`` applies the same two files.

A mix of models (a pack spec) is several of these; ``sharedserve.k8s.mix`` sizes them.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from importlib import resources
from typing import Any

import jsonpatch
import yaml

from sharedserve import contract
from sharedserve.config import REPLICA_SERVE_OPTIONS
from sharedserve.enums import Framework
from sharedserve.errors import ConfigError
from sharedserve.k8s.admin import ADMIN_SECRET, admin_secret_note, admin_secrets
from sharedserve.quantity import parse_cpu, parse_memory

__all__ = [
    "RUN_AS_USER",
    "VGPU_RESOURCE",
    "ModelDeployment",
    "PodSpread",
    "check_serve_args",
    "dump_all",
    "image_note",
    "render_model",
    "render_model_yaml",
]

VGPU_RESOURCE = contract.VGPU_RESOURCE
RUN_AS_USER = 10001
"""The image's ``sharedserve`` user (see the Dockerfile); the manifests run as it (tested)."""

# The server's URLs take the model name as one path segment; a label value must also hold it.
_MODEL_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
# Service names are RFC 1035 labels, the strictest of the names used here.
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")


# The Dockerfile's EXTRAS (sharedserve's extras) each framework's models need in the image; its
# default image has tensorflow only.
IMAGE_EXTRAS = {
    Framework.TENSORFLOW: "tensorflow",
    Framework.TORCH: "torch",
    Framework.EXPORT: "torch",
    Framework.ONNX: "onnx",
}
_DEFAULT_EXTRAS = ("tensorflow",)


def image_note(frameworks: Sequence[Framework], image: str) -> list[str]:
    """Comment lines saying how ``image`` must be built where the models' frameworks need
    extras the Dockerfile's default image lacks (ONNX: onnx; TorchScript, torch.export: torch);
    none where TensorFlow's is all they need. A pod whose image lacks its framework fails its
    model's load with a line naming the extra; this says so before it is applied."""
    extras = sorted({IMAGE_EXTRAS[f] for f in frameworks})
    if not extras or tuple(extras) == _DEFAULT_EXTRAS:
        return []
    return [
        f"The models need the image built with sharedserve's {', '.join(extras)} extra"
        f"{'s' if len(extras) > 1 else ''} ({image} must be):",
        f"  docker build --build-arg EXTRAS={','.join(extras)} -t {image} .",
    ]


# Beside what every replica's runner sets: the management key, a file from the pod's Secret.
# Not --admin-header, which the manifest leaves at its default: an entry may name another.
_POD_SERVE_OPTIONS = REPLICA_SERVE_OPTIONS | {"--admin-key-file"}


def check_serve_args(args: Sequence[str]) -> None:
    """ConfigError for extra ``serve`` options that the pod's manifest or the allocator set."""
    owned = [a for a in args if a.split("=", 1)[0] in _POD_SERVE_OPTIONS]
    if owned:
        raise ConfigError(
            f"serve_args {', '.join(owned)}: set by k8s render or the allocator for each pod "
            "(model, name, ports, the management key's file from its Secret; the GPU cap from "
            "its vGPUs, the CPU limit from its quota)"
        )


class PodSpread(str, Enum):
    """How a Deployment's pods are kept apart, as a plan put them (``size``)."""

    NONE = "none"
    """Wherever the scheduler puts them."""
    NODES = "nodes"
    """Each on a node of its own (required pod anti-affinity over ``kubernetes.io/hostname``):
    the plan put each on a node of its own."""
    PREFERRED = "preferred"
    """Spread over nodes where the scheduler can (a topology spread it may break): the plan put
    them on different GPUs, some on one node."""


@dataclass(frozen=True)
class ModelDeployment:
    """What ``sharedserve k8s render`` needs to know about one model."""

    model: str
    """Model name: in URLs (``/v1/models/NAME``) and, unless ``model_dir``, its directory on the
    volume."""
    image: str
    """The sharedserve image reference (``REGISTRY/sharedserve:0.1.0``)."""
    name: str | None = None
    """Deployment and Service name [default: the model name lower-cased, ``_``/``.`` -> ``-``]."""
    vgpu: int = 1
    """vGPUs per pod (``sharedserve.io/vgpu``); not with ``gpu_memory``."""
    gpu_memory: str | None = None
    """DRA mode: GPU memory each pod's ResourceClaim asks of one GPU, a Kubernetes quantity
    (bytes, ``6Gi``), instead of vGPUs [default: none, the device plugin's vGPUs]."""
    gpu_compute: int | None = None
    """DRA mode: percent of the GPU's compute each pod's claim asks for beside its memory
    [default: none, which the driver counts as 0]."""
    cpu: str = "500m"
    """CPU request and limit, a Kubernetes quantity (cores)."""
    memory: str = "2Gi"
    """Memory request and limit, a Kubernetes quantity (bytes): TensorFlow and the CUDA context."""
    model_pvc: str = "sharedserve-models"
    """PersistentVolumeClaim holding models in TF Serving's layout (``NAME/1/saved_model.pb``)."""
    namespace: str = "sharedserve"
    """Namespace of both objects."""
    replicas: int = 1
    """Pods; each takes ``vgpu`` vGPUs."""
    runtime_class: str | None = None
    """RuntimeClass for nodes whose NVIDIA runtime is not the default (often ``nvidia``)."""
    model_dir: str | None = None
    """The model's directory on the claim, ``/models/DIR`` [default: the model name]; differs
    when a pack spec entry names a model other than its directory."""
    serve_args: tuple[str, ...] = ()
    """Extra ``sharedserve serve`` options (batching, body limit), after the ones set here."""
    admin_secret: str = ADMIN_SECRET
    """The Secret whose ``key`` is the pods' management key (``serve --admin-key-file``)."""
    spread: PodSpread = PodSpread.NONE
    """How its pods are kept apart."""

    @property
    def directory(self) -> str:
        return self.model if self.model_dir is None else self.model_dir

    @property
    def resource_name(self) -> str:
        if self.name is not None:
            return self.name
        return self.model.lower().replace("_", "-").replace(".", "-")

    def validate(self) -> None:
        """ConfigError naming the flag, for any value the API server or the server would refuse."""
        if not _MODEL_NAME.fullmatch(self.model):
            raise ConfigError(
                f"--model {self.model!r}: use 1-63 letters, digits, '.', '_' or '-', "
                "starting and ending with a letter or digit"
            )
        if self.model_dir is not None and not _MODEL_NAME.fullmatch(self.model_dir):
            raise ConfigError(
                f"model directory {self.model_dir!r}: use 1-63 letters, digits, '.', '_' or '-'"
            )
        if not _DNS_LABEL.fullmatch(self.resource_name):
            flag = "--name" if self.name is not None else "--model (pass --name)"
            raise ConfigError(
                f"{flag}: {self.resource_name!r} is not a valid Service name "
                "(lower-case letters, digits and '-', starting with a letter, at most 63)"
            )
        if not _IMAGE.fullmatch(self.image):
            raise ConfigError(f"--image {self.image!r} is not an image reference")
        if self.vgpu < 1:
            raise ConfigError(f"--vgpu must be at least 1, got {self.vgpu}")
        if self.gpu_memory is not None:
            parse_memory(self.gpu_memory, "--gpu-memory")
            if self.vgpu != 1:
                raise ConfigError(
                    "--vgpu with --dra: a pod asks the DRA driver for --gpu-memory, not vGPUs"
                )
        if self.gpu_compute is not None:
            if self.gpu_memory is None:
                raise ConfigError("a share of a GPU's compute is asked of the DRA driver: --dra")
            if not 1 <= self.gpu_compute <= contract.DRA_COMPUTE_UNITS:
                raise ConfigError(
                    f"GPU compute must be 1-{contract.DRA_COMPUTE_UNITS} percent, got "
                    f"{self.gpu_compute}"
                )
        if self.replicas < 1:
            raise ConfigError(f"--replicas must be at least 1, got {self.replicas}")
        parse_cpu(self.cpu)
        parse_memory(self.memory)
        if not _DNS_SUBDOMAIN.fullmatch(self.model_pvc):
            raise ConfigError(f"--model-pvc {self.model_pvc!r} is not a valid claim name")
        if not _DNS_1123_LABEL.fullmatch(self.namespace):
            raise ConfigError(f"--namespace {self.namespace!r} is not a valid namespace name")
        if self.runtime_class is not None and not _DNS_SUBDOMAIN.fullmatch(self.runtime_class):
            raise ConfigError(f"--runtime-class {self.runtime_class!r} is not a valid name")
        if not _DNS_SUBDOMAIN.fullmatch(self.admin_secret):
            raise ConfigError(f"--admin-secret {self.admin_secret!r} is not a valid Secret name")
        check_serve_args(self.serve_args)


def _labels(spec: ModelDeployment) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "sharedserve-model",
        "app.kubernetes.io/instance": spec.resource_name,
        "app.kubernetes.io/component": "model",
        "app.kubernetes.io/part-of": "sharedserve",
        "sharedserve.io/model": spec.model,
    }


def _selector(spec: ModelDeployment) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "sharedserve-model",
        "app.kubernetes.io/instance": spec.resource_name,
    }


# libyaml's loader and dumper where PyYAML was built with it (its wheels are): a fleet plan
# renders thousands of models, which the pure-Python emitter took two minutes over.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@functools.cache
def _source() -> tuple[str, str]:
    """The Deployment and Service templates, parsed once and kept as JSON: a JSON round trip
    copies plain data several times faster than deepcopy, and a plan renders thousands."""
    folder = resources.files("sharedserve.k8s") / "model"
    deployment, service = (
        json.dumps(yaml.safe_load((folder / name).read_text()))
        for name in ("deployment.yaml", "service.yaml")
    )
    return deployment, service


@functools.cache
def _dra_source() -> tuple[str, str]:
    """The DRA Component's claim template and Deployment patch, as ``_source`` keeps them."""
    folder = resources.files("sharedserve.k8s") / "model" / "dra"
    template, patch = (
        json.dumps(yaml.safe_load((folder / name).read_text()))
        for name in ("resourceclaimtemplate.yaml", "deployment.patch.yaml")
    )
    return template, patch


def _claim_template(spec: ModelDeployment, labels: dict[str, str]) -> dict[str, Any]:
    """The ResourceClaimTemplate each of ``spec``'s pods claims its GPU memory from."""
    assert spec.gpu_memory is not None
    template: dict[str, Any] = json.loads(_dra_source()[0])
    template["metadata"] = {
        "name": f"{spec.resource_name}-gpu",
        "namespace": spec.namespace,
        "labels": dict(labels),
    }
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    asked = request["exactly"]["capacity"]["requests"]
    asked[contract.DRA_MEMORY] = spec.gpu_memory
    if spec.gpu_compute is not None:
        asked[contract.DRA_COMPUTE] = str(spec.gpu_compute)
    return template


def _spread(spec: ModelDeployment) -> dict[str, Any]:
    """The pod spec's keys that keep ``spec``'s pods apart over nodes."""
    pods = {"labelSelector": {"matchLabels": _selector(spec)}}
    node = "kubernetes.io/hostname"
    if spec.spread is PodSpread.NODES:
        required = [{**pods, "topologyKey": node}]
        return {
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
            }
        }
    # Counted per ReplicaSet (pod-template-hash): a rolling update's old pods do not skew it.
    spread = {"maxSkew": 1, "topologyKey": node, "whenUnsatisfiable": "ScheduleAnyway", **pods,
              "matchLabelKeys": ["pod-template-hash"]}  # fmt: skip
    return {"topologySpreadConstraints": [spread]}


def dump_all(objects: list[dict[str, Any]]) -> str:
    """Kubernetes objects as YAML documents, in the order their keys were set."""
    return yaml.dump_all(objects, Dumper=_DUMPER, sort_keys=False)


def render_model(spec: ModelDeployment) -> list[dict[str, Any]]:
    """``[Deployment, Service]`` for ``spec``, as the API server takes them; in DRA mode
    ``[ResourceClaimTemplate, Deployment, Service]``, the template first so that it exists by
    the time ``kubectl apply -f`` creates the pods that claim from it."""
    spec.validate()
    deployment, service = (json.loads(text) for text in _source())
    if spec.gpu_memory is not None:
        # RFC 6902, as kustomize applies the same patch to the same template.
        jsonpatch.apply_patch(deployment, json.loads(_dra_source()[1]), in_place=True)
    labels = _labels(spec)
    for obj in (deployment, service):
        obj["metadata"] = {
            "name": spec.resource_name,
            "namespace": spec.namespace,
            "labels": labels,
        }
    service["spec"]["selector"] = _selector(spec)
    workload = deployment["spec"]
    workload["replicas"] = spec.replicas
    workload["selector"]["matchLabels"] = _selector(spec)
    workload["template"]["metadata"]["labels"] = dict(labels)
    pod = workload["template"]["spec"]
    if spec.runtime_class is not None:
        pod = workload["template"]["spec"] = {"runtimeClassName": spec.runtime_class, **pod}
    container = pod["containers"][0]
    container["image"] = spec.image
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "models")
    args = container["args"]
    args[args.index("--model") + 1] = f"{mount}/{spec.directory}"
    args[args.index("--name") + 1] = spec.model
    args.extend(spec.serve_args)
    quantities = {"cpu": spec.cpu, "memory": spec.memory}
    if spec.gpu_memory is None:
        quantities[VGPU_RESOURCE] = str(spec.vgpu)
    requirements = {"requests": dict(quantities), "limits": dict(quantities)}
    if "claims" in container["resources"]:  # the DRA patch's: the pod's claim, used here
        requirements["claims"] = container["resources"]["claims"]
    container["resources"] = requirements
    volume = next(v for v in pod["volumes"] if v["name"] == "models")
    volume["persistentVolumeClaim"]["claimName"] = spec.model_pvc
    key = next(v for v in pod["volumes"] if v["name"] == "admin-key")
    key["secret"]["secretName"] = spec.admin_secret
    if spec.spread is not PodSpread.NONE:
        pod.update(_spread(spec))
    if spec.gpu_memory is None:
        return [deployment, service]
    template = _claim_template(spec, labels)
    (claim,) = pod["resourceClaims"]
    claim["resourceClaimTemplateName"] = template["metadata"]["name"]
    return [template, deployment, service]


def render_model_yaml(spec: ModelDeployment, *, admin_secret: bool = True) -> str:
    """``render_model`` as YAML documents, with a header saying what they are; with
    ``admin_secret``, after the Secret ``spec.admin_secret`` holding a new management key
    (``k8s.admin``), else the pods read an existing one."""
    objects = render_model(spec)
    secret = "Secret, " if admin_secret else ""
    if spec.gpu_memory is None:
        header = (
            f"# Model {spec.model!r} for sharedserve: {secret}Deployment and Service "
            f"(sharedserve k8s render). Apply with: kubectl apply -f FILE\n"
        )
    else:
        compute = "" if spec.gpu_compute is None else f" and {spec.gpu_compute}% of its compute"
        header = (
            f"# Model {spec.model!r} for sharedserve's DRA driver {contract.DRA_DRIVER} "
            f"(sharedserve k8s render --dra):\n# {secret}ResourceClaimTemplate, Deployment and "
            f"Service; each pod claims {spec.gpu_memory} of one GPU's memory{compute}.\n# Apply "
            f"with: kubectl apply -f FILE (the driver: kubectl apply -k k8s/overlays/dra/driver)\n"
        )
    note = admin_secret_note(spec.admin_secret, spec.namespace, emitted=admin_secret)
    header += "".join(f"# {line}\n" for line in note)
    if admin_secret:
        objects = [*admin_secrets(objects), *objects]
    return header + dump_all(objects)

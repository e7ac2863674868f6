"""A model's Deployment and Service, built as plain data from one settings object.

``k8s/base/model/`` holds the same objects for the example model ``tiny`` as commented YAML; a test
keeps the two identical, so the comments there explain every field this module sets.
What a field is for, in short:

- ``sharedserve.io/vgpu`` in requests and limits: the allocator grants vGPUs and injects the env
  contract (GPU, memory cap); the scheduler places the pod only on a node advertising vGPUs.
- CPU and memory requests equal to limits: Guaranteed QoS, and a CFS quota the server reads to
  size its thread pools (``sharedserve serve`` looks at its own cgroup).
- Probes: liveness and start-up on ``GET /v1/models/NAME``, which answers 200 in every state once
  the listener is open; readiness on ``GET /v1/models/NAME/metadata``, which answers 503 until
  the model has loaded and warmed up (``ServedModel.metadata_json``), because the kubelet looks at
  status codes only and the status URL says LOADING with a 200.
- ``maxSurge: 0``: a surge pod would need one more vGPU, which a full node does not have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sharedserve import contract
from sharedserve.errors import ConfigError
from sharedserve.k8s.quantity import parse_cpu, parse_memory
from sharedserve.k8s.yamltext import dump_all

__all__ = [
    "GRPC_PORT",
    "MODELS_MOUNT",
    "REST_PORT",
    "RUN_AS_USER",
    "VGPU_RESOURCE",
    "ModelDeployment",
    "render_model",
    "render_model_yaml",
]

VGPU_RESOURCE = contract.VGPU_RESOURCE
REST_PORT = 8501
GRPC_PORT = 8500
MODELS_MOUNT = "/models"
RUN_AS_USER = 10001
"""The image's ``sharedserve`` user (see the Dockerfile)."""

# The server's URLs take the model name as one path segment; a label value must also hold it.
_MODEL_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
# Service names are RFC 1035 labels, the strictest of the names used here.
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")


@dataclass(frozen=True)
class ModelDeployment:
    """What ``sharedserve k8s render`` needs to know about one model."""

    model: str
    """Model name: in URLs (``/v1/models/NAME``) and as its directory on the volume."""
    image: str
    """The sharedserve image reference (``REGISTRY/sharedserve:0.1.0``)."""
    name: str | None = None
    """Deployment and Service name [default: the model name lower-cased, ``_``/``.`` -> ``-``]."""
    vgpu: int = 1
    """vGPUs per pod (``sharedserve.io/vgpu``)."""
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


def _http_probe(path: str, period: int, timeout: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def _container(spec: ModelDeployment) -> dict[str, Any]:
    resources = {"cpu": spec.cpu, "memory": spec.memory, VGPU_RESOURCE: str(spec.vgpu)}
    status = f"/v1/models/{spec.model}"
    return {
        "name": "server",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sharedserve"],
        "args": [
            "serve",
            "--model",
            f"{MODELS_MOUNT}/{spec.model}",
            "--name",
            spec.model,
            "--host",
            "0.0.0.0",
            "--rest-port",
            str(REST_PORT),
            "--grpc-port",
            str(GRPC_PORT),
        ],
        "ports": [
            {"name": "http", "containerPort": REST_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
        ],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        # TensorFlow's import and the GPU set-up come before the listener opens: up to 5 min.
        "startupProbe": _http_probe(status, 5, 3, 60),
        "readinessProbe": _http_probe(f"{status}/metadata", 5, 3, 2),
        # Generous: a server saturated by a benchmark answers slowly but is not dead.
        "livenessProbe": _http_probe(status, 10, 5, 6),
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "models", "mountPath": MODELS_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def render_model(spec: ModelDeployment) -> list[dict[str, Any]]:
    """``[Deployment, Service]`` for ``spec``, as the API server takes them."""
    spec.validate()
    name = spec.resource_name
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        # GPU nodes are often tainted; these are the taints the allocator's DaemonSet tolerates.
        "tolerations": [
            {"key": key, "operator": "Exists", "effect": "NoSchedule"}
            for key in ("nvidia.com/gpu", "sharedserve.io/gpu")
        ],
        "terminationGracePeriodSeconds": 30,
        "containers": [_container(spec)],
        "volumes": [
            {
                "name": "models",
                "persistentVolumeClaim": {"claimName": spec.model_pvc, "readOnly": True},
            },
            {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
        ],
    }
    if spec.runtime_class is not None:
        pod_spec = {"runtimeClassName": spec.runtime_class, **pod_spec}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": spec.namespace, "labels": _labels(spec)},
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": _selector(spec)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "template": {
                "metadata": {
                    "labels": _labels(spec),
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(REST_PORT),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": pod_spec,
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": spec.namespace, "labels": _labels(spec)},
        "spec": {
            "selector": _selector(spec),
            "ports": [
                {
                    "name": "http",
                    "port": REST_PORT,
                    "targetPort": "http",
                    "protocol": "TCP",
                    "appProtocol": "http",
                },
                {
                    "name": "grpc",
                    "port": GRPC_PORT,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "kubernetes.io/h2c",
                },
            ],
        },
    }
    return [deployment, service]


def render_model_yaml(spec: ModelDeployment) -> str:
    """``render_model`` as YAML documents, with a header saying what they are."""
    objects = render_model(spec)
    header = (
        f"# Model {spec.model!r} for sharedserve: Deployment and Service "
        f"(sharedserve k8s render). Apply with: kubectl apply -f FILE\n"
    )
    return header + dump_all(objects)

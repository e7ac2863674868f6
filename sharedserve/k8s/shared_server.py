"""A shared server's pods (``servers:`` in a pack spec) for ``k8s render --spec``. Pure.

One Deployment per shared server: each pod is one ``sharedserve serve --model-repository``
process holding the shared server's models, as each of its replicas is under ``pack``. The
repository is built in the pod, not on the model claim: an init container makes
``/repository/NAME`` in an ``emptyDir`` for each model, links the model's directory on the claim
into it (``/models/DIR``, where a one-model pod finds the same model), and copies in the model's
``sharedserve.yaml`` from a ConfigMap that holds every model file of the shared server. So the
claim stays read-only and shared by every Deployment, and a model's settings are the ConfigMap's
(change it, then restart the pods).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["REPOSITORY", "SharedServerModelFiles", "SharedServerPods", "shared_server_objects"]

REPOSITORY = "/repository"
"""Where each pod's model repository is built and read."""
_MODEL_FILES = "/etc/sharedserve/model-files"


@dataclass(frozen=True)
class SharedServerModelFiles:
    """One model of a shared server in a pod: its name, its directory on the claim, its model
    file."""

    name: str
    directory: str
    model_file: dict[str, Any]


@dataclass(frozen=True)
class SharedServerPods:
    """What makes a model's Deployment a shared server's."""

    models: tuple[SharedServerModelFiles, ...]
    paging: bool = False
    """``serve --paging lru``."""


def _script(models: Sequence[SharedServerModelFiles], mount: str) -> str:
    # Names and directories are checked as model names (letters, digits, '.', '_', '-'): safe
    # unquoted. The model's own sharedserve.yaml, linked in with its files, is replaced.
    lines = ["set -eu"]
    for m in models:
        target = f"{REPOSITORY}/{m.name}"
        lines.append(
            f"mkdir {target} && ln -s {mount}/{m.directory}/* {target}/ && "
            f"rm -f {target}/sharedserve.yaml && "
            f"cp {_MODEL_FILES}/{m.name}.yaml {target}/sharedserve.yaml"
        )
    return "\n".join(lines) + "\n"


def shared_server_objects(
    objects: list[dict[str, Any]], server: SharedServerPods
) -> list[dict[str, Any]]:
    """``render_model``'s objects of the shared server's Deployment made a shared server's: the
    ConfigMap of its model files first (it must exist when the pods start), then the objects
    with the pod serving the repository its init container builds."""
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    meta = deployment["metadata"]
    config_name = f"{meta['name']}-models"
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_name,
            "namespace": meta["namespace"],
            "labels": json.loads(json.dumps(meta["labels"])),
        },
        "data": {
            f"{m.name}.yaml": yaml.safe_dump(m.model_file, sort_keys=False) for m in server.models
        },
    }
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    for flag in ("--model", "--name"):
        at = args.index(flag)
        del args[at : at + 2]
    serve = args.index("serve") + 1
    paging = ["--paging", "lru"] if server.paging else []
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "models")
    # The repository's entries are links to the models' directories: those are where it may
    # load from (a load leading anywhere else is refused).
    roots = [a for m in server.models for a in ("--allowed-model-roots", f"{mount}/{m.directory}")]
    args[serve:serve] = ["--model-repository", REPOSITORY, *roots, *paging]
    container["volumeMounts"].append(
        {"name": "repository", "mountPath": REPOSITORY, "readOnly": True}
    )
    # Requests equal to limits, as the server's: the pod keeps Guaranteed QoS.
    small = {"cpu": "100m", "memory": "64Mi"}
    pod["initContainers"] = [
        {
            "name": "model-repository",
            "image": container["image"],
            "imagePullPolicy": container.get("imagePullPolicy", "IfNotPresent"),
            "command": ["sh", "-c", _script(server.models, mount)],
            "resources": {"requests": dict(small), "limits": dict(small)},
            "securityContext": json.loads(json.dumps(container["securityContext"])),
            "volumeMounts": [
                {"name": "models", "mountPath": mount, "readOnly": True},
                {"name": "model-files", "mountPath": _MODEL_FILES, "readOnly": True},
                {"name": "repository", "mountPath": REPOSITORY},
            ],
        }
    ]
    pod["volumes"] += [
        {"name": "repository", "emptyDir": {"sizeLimit": "16Mi"}},
        {"name": "model-files", "configMap": {"name": config_name}},
    ]
    return [config, *objects]

"""The model servers' management key on Kubernetes: the Secret that holds it. Pure but for the
key's randomness.

Every rendered pod mounts the Secret's ``key`` read-only and passes it to ``serve
--admin-key-file`` (the template, ``model/deployment.yaml``, says how), so the management APIs
(the model repository API, TF Serving's ``HandleReloadConfigRequest``, changes under
``/sharedserve/v1/``) answer only callers that send it; inference, health, status, metadata and
metrics stay open. ``k8s render`` emits the Secret with a key made for that output, one per
namespace, unless told to use an existing Secret (``--admin-secret``); the key is written
nowhere else.

A server reads its key once, at start: a new key in the Secret reaches running pods only when
they restart. So each Deployment rendered with a new key carries a digest of it in its pod
template (an annotation, not the key), and applying a re-rendered file rolls its pods onto the
key the Secret now holds, as kustomize's hash-suffixed Secret names do for ``k8s/base/model``.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import textwrap
from typing import Any

__all__ = [
    "ADMIN_KEY_DIGEST",
    "ADMIN_SECRET",
    "ADMIN_SECRET_KEY",
    "admin_secret_note",
    "admin_secrets",
]

ADMIN_SECRET = "sharedserve-admin"
"""The Secret the rendered pods read their management key from, by default."""
ADMIN_SECRET_KEY = "key"
"""The Secret's key that holds the management key (a file of that name in the pod)."""
ADMIN_KEY_DIGEST = "sharedserve.io/admin-key-sha256"
"""Pod template annotation: the first 16 hex digits of the key's SHA-256, which changes the
template (and so rolls the pods) when the key does. It does not reveal the key."""
_KEY_BYTES = 32  # 64 hex characters; serve takes 32 or more

Obj = dict[str, Any]


def _secret(name: str, namespace: str, key: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "sharedserve-model",
                "app.kubernetes.io/component": "admin-key",
                "app.kubernetes.io/part-of": "sharedserve",
            },
        },
        "type": "Opaque",
        "data": {ADMIN_SECRET_KEY: base64.b64encode(key.encode()).decode()},
    }


def _secret_of(deployment: Obj) -> str:
    """The Secret ``deployment``'s pods read their key from (``model/deployment.yaml``)."""
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    (volume,) = [v for v in volumes if v["name"] == "admin-key"]
    name: str = volume["secret"]["secretName"]
    return name


def admin_secrets(objects: list[Obj]) -> list[Obj]:
    """One Secret for each (namespace, Secret name) the Deployments among ``objects`` read, each
    holding a fresh key; each Deployment's pods are annotated with their key's digest."""
    keys: dict[tuple[str, str], str] = {}
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        where = (deployment["metadata"]["namespace"], _secret_of(deployment))
        key = keys.setdefault(where, secrets.token_hex(_KEY_BYTES))
        template = deployment["spec"]["template"]["metadata"]
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        template["annotations"] = {**template.get("annotations", {}), ADMIN_KEY_DIGEST: digest}
    return [_secret(name, namespace, key) for (namespace, name), key in keys.items()]


def admin_secret_note(name: str, namespace: str, *, emitted: bool) -> list[str]:
    """A header's lines (without ``# ``) on where the pods' management key is and how to read
    it back or make it: prose wrapped, the command on lines of its own, to copy."""
    if emitted:
        prose = (
            f"The Secret {name} holds the pods' management key, made for this file. Another "
            "render makes another key, which replaces this one when applied (its own pods "
            "restart onto it, the pods of other files keep the old one): render more models "
            f"for this namespace with --admin-secret {name}. Read the key with:"
        )
        command = (
            f"kubectl -n {namespace} get secret {name} -o jsonpath='{{.data.key}}' | base64 -d"
        )
    else:
        prose = f"The pods read their management key from the Secret {name}, which must exist:"
        command = (
            f"kubectl -n {namespace} create secret generic {name} \\\n"
            '    --from-literal=key="$(openssl rand -hex 32)"'
        )
    lines = textwrap.wrap(prose, 97, break_long_words=False, break_on_hyphens=False)
    return [*lines, *(f"  {line}" for line in command.splitlines())]

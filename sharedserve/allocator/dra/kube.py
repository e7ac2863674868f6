"""The API server, through the official ``kubernetes`` client: our ResourceSlice and the claims.

Blocking calls (the client is synchronous); the driver runs them in worker threads. Every
failure comes out as ``ApiError`` with the HTTP status and the API server's own message, so
the caller logs or answers one readable line instead of a client traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from sharedserve.errors import ConfigError, SharedServeError

__all__ = ["ApiError", "KubeApi"]

_CONFLICT = 409
_NOT_FOUND = 404


class ApiError(SharedServeError):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _message(e: ApiException) -> str:
    try:
        status = json.loads(e.body or "")
        return str(status.get("message") or e.reason)
    except (ValueError, AttributeError):
        return str(e.reason)


class KubeApi:
    """The few calls the driver makes; ``kubeconfig`` None means in-cluster credentials."""

    def __init__(self, kubeconfig: Path | None, timeout_s: float) -> None:
        configuration = client.Configuration()
        try:
            if kubeconfig is None:
                config.load_incluster_config(client_configuration=configuration)
            else:
                config.load_kube_config(str(kubeconfig), client_configuration=configuration)
        except (ConfigException, OSError) as e:
            where = "in-cluster (service account)" if kubeconfig is None else str(kubeconfig)
            raise ConfigError(
                f"cannot load Kubernetes credentials from {where}: {e} "
                "(outside a pod, give --kubeconfig FILE)"
            ) from e
        self._client = client.ApiClient(configuration)
        self._resource = client.ResourceV1Api(self._client)
        self._timeout = timeout_s
        self.server = configuration.host

    def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, _request_timeout=self._timeout, **kwargs)
        except ApiException as e:
            raise ApiError(f"{what}: {e.status} {_message(e)}", e.status) from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiError(f"{what}: API server {self.server} unreachable ({e})") from None

    def read_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The ResourceClaim as the API server sent it (JSON, not client models: the driver
        reads a few fields and must not lose fields a newer server adds)."""
        response = self._call(
            f"get ResourceClaim {namespace}/{name}",
            self._resource.read_namespaced_resource_claim,
            name,
            namespace,
            _preload_content=False,
        )
        data: dict[str, Any] = json.loads(response.data)
        return data

    def apply_slice(self, body: dict[str, Any]) -> None:
        """Create the slice, or replace ours if it exists (an unconditional update)."""
        name = body["metadata"]["name"]
        model = client.V1ResourceSlice.from_dict(body)
        try:
            self._call(f"create ResourceSlice {name}", self._resource.create_resource_slice, model)
        except ApiError as e:
            if e.status != _CONFLICT:
                raise
            self._call(
                f"replace ResourceSlice {name}", self._resource.replace_resource_slice, name, model
            )

    def delete_slice(self, name: str) -> bool:
        """Delete the slice; False if there was none."""
        try:
            self._call(f"delete ResourceSlice {name}", self._resource.delete_resource_slice, name)
        except ApiError as e:
            if e.status == _NOT_FOUND:
                return False
            raise
        return True

    def close(self) -> None:
        self._client.close()

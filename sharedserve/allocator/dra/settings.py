"""DraSettings: what ``sharedserve allocator --api dra`` is configured with. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sharedserve.allocator.dra.slices import SliceOptions, slice_name
from sharedserve.contract import DRA_DRIVER
from sharedserve.errors import ConfigError

__all__ = [
    "CHECKPOINT",
    "DEFAULT_CDI_DIR",
    "DEFAULT_PLUGIN_DIR",
    "DEFAULT_REGISTRY_DIR",
    "DRA_SOCKET",
    "REGISTRATION_SOCKET",
    "DraSettings",
]

#: Where the kubelet expects a DRA driver's own files (its gRPC socket, our checkpoint).
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/plugins") / DRA_DRIVER
#: The directory the kubelet's plugin watcher watches for registration sockets.
DEFAULT_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
#: Where container runtimes look for generated (as opposed to static, /etc/cdi) CDI specs.
DEFAULT_CDI_DIR = Path("/var/run/cdi")
DRA_SOCKET = "dra.sock"
CHECKPOINT = "checkpoint.json"
REGISTRATION_SOCKET = f"{DRA_DRIVER}-reg.sock"
# sockaddr_un.sun_path is 108 bytes on Linux, the terminating NUL included.
_MAX_SOCKET_PATH = 107
# A node name is a DNS subdomain (RFC 1123), as is the slice name made from it.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class DraSettings:
    node_name: str | None = None
    """This node's name (the downward API's ``spec.nodeName``): the slice's node and pool."""
    kubeconfig: Path | None = None
    """Credentials for the API server; None: the pod's service account (in-cluster)."""
    plugin_dir: Path = DEFAULT_PLUGIN_DIR
    """Holds our DRA socket and the checkpoint of prepared claims."""
    registry_dir: Path = DEFAULT_REGISTRY_DIR
    """The kubelet's plugin registry, where our registration socket goes."""
    cdi_dir: Path = DEFAULT_CDI_DIR
    """Where CDI specs of prepared claims are written for the container runtime."""
    slices: SliceOptions = field(default_factory=SliceOptions)
    """How GPUs are published: shared with consumable memory, or as --slots devices."""
    api_timeout_s: float = 10.0
    """Seconds one API server request may take."""
    publish_backoff_s: tuple[float, float] = (0.5, 30.0)
    """First and longest wait in seconds between failed slice publications (doubling)."""
    socket_poll_interval_s: float = 0.2
    """Seconds between checks that our sockets are still there."""

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / DRA_SOCKET

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / REGISTRATION_SOCKET

    @property
    def checkpoint(self) -> Path:
        return self.plugin_dir / CHECKPOINT

    def validate(self) -> None:
        """Raise ConfigError for the first setting that cannot work, naming its flag."""
        self.slices.validate()
        node = self.node_name
        if not node:
            raise ConfigError(
                "--api dra needs --node-name (or NODE_NAME, set from the pod's spec.nodeName)"
            )
        if not _DNS_SUBDOMAIN.fullmatch(node) or len(slice_name(node)) > 253:
            raise ConfigError(f"--node-name must be a node's name (a DNS subdomain), got {node!r}")
        for flag, path in (
            ("--dra-plugin-dir", self.dra_socket),
            ("--plugin-registry-dir", self.registration_socket),
        ):
            if len(str(path).encode()) > _MAX_SOCKET_PATH:
                raise ConfigError(
                    f"{flag} {path.parent} is too long: the unix socket path {path} would be "
                    f"{len(str(path).encode())} bytes, Linux allows {_MAX_SOCKET_PATH}"
                )
        if not self.api_timeout_s > 0:
            raise ConfigError(f"the API timeout must be positive, got {self.api_timeout_s}")

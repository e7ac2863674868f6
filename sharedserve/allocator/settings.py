"""AllocatorSettings: everything ``sharedserve allocator`` is configured with, units included."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from sharedserve.allocator.allocation import GrantOptions
from sharedserve.allocator.dra.settings import DraSettings
from sharedserve.allocator.health_state import DEFAULT_IGNORED_XIDS
from sharedserve.allocator.inventory import Sizing
from sharedserve.contract import VGPU_RESOURCE
from sharedserve.enums import PlacementPolicy
from sharedserve.errors import ConfigError

__all__ = [
    "API_VERSION",
    "CDI_KIND",
    "DEFAULT_DEVICE_PLUGIN_DIR",
    "DEFAULT_MPS_PIPE_DIR",
    "DEFAULT_RESOURCE_NAME",
    "KUBELET_SOCKET",
    "AllocatorSettings",
    "Api",
    "format_xids",
    "parse_xids",
]

#: The device plugin API version this plugin speaks.
API_VERSION = "v1beta1"
#: Where the kubelet's device manager listens and looks for plugin sockets.
DEFAULT_DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_RESOURCE_NAME = VGPU_RESOURCE
#: The MPS control daemon's default pipe directory (nvidia-cuda-mps-control).
DEFAULT_MPS_PIPE_DIR = Path("/tmp/nvidia-mps")
#: NVIDIA's container toolkit generates CDI specs of this kind, naming each GPU by its UUID too.
CDI_KIND = "nvidia.com/gpu"
# sockaddr_un.sun_path is 108 bytes on Linux, the terminating NUL included.
_MAX_SOCKET_PATH = 107
# An extended resource name as the kubelet accepts it: a DNS subdomain prefix, "/", and a name
# of at most 63 characters (kubernetes.io prefixes are reserved for Kubernetes itself).
_RESOURCE_NAME = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)


class Api(str, Enum):
    """How the kubelet learns of the GPUs."""

    DEVICE_PLUGIN = "device-plugin"
    """vGPUs as an extended resource (``sharedserve.io/vgpu``), through the device plugin API."""
    DRA = "dra"
    """GPU memory as consumable capacity of a ResourceSlice, through a DRA kubelet plugin."""


def parse_xids(text: str) -> frozenset[int]:
    """``--ignored-xids``: comma-separated XID numbers; empty: none."""
    xids = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if not part.isdigit():
            raise ConfigError(f"--ignored-xids must be comma-separated XID numbers, got {text!r}")
        xids.add(int(part))
    return frozenset(xids)


def format_xids(xids: frozenset[int]) -> str:
    """``xids`` as ``--ignored-xids`` takes them, in order."""
    return ",".join(str(x) for x in sorted(xids))


@dataclass(frozen=True)
class AllocatorSettings:
    api: Api = Api.DEVICE_PLUGIN
    """The transport: the device plugin, or the DRA driver."""
    dra: DraSettings = field(default_factory=DraSettings)
    """The DRA driver's settings (``--api dra`` only)."""
    sizing: Sizing = field(default_factory=Sizing)
    """How each GPU is cut into vGPUs (``--vgpus-per-gpu`` or ``--vgpu-memory-mib``)."""
    policy: PlacementPolicy = PlacementPolicy.BUNDLE
    """GetPreferredAllocation's placement policy."""
    grant: GrantOptions = field(default_factory=GrantOptions)
    """What Allocate may grant and add (multi-GPU, CDI names, MPS)."""
    device_plugin_dir: Path = DEFAULT_DEVICE_PLUGIN_DIR
    """Directory holding the kubelet's ``kubelet.sock`` and our socket."""
    socket_name: str = "sharedserve-vgpu.sock"
    """File name of our socket in ``device_plugin_dir`` (the registration's ``endpoint``)."""
    resource_name: str = DEFAULT_RESOURCE_NAME
    """Extended resource name pods request, e.g. ``sharedserve.io/vgpu: 1``."""
    health_interval_s: float = 10.0
    """Seconds between health probes of every GPU; a failure shows within one interval."""
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    """XID codes that leave a GPU healthy (application errors)."""
    xid_recovery_probes: int = 3
    """Consecutive passing probes a GPU needs after a critical XID to be Healthy again."""
    metrics_port: int = 0
    """TCP port for Prometheus ``/metrics``; 0 turns metrics off."""
    metrics_host: str = "0.0.0.0"
    """Address the metrics endpoint binds."""
    fake_gpus: Path | None = None
    """JSON GPU inventory used instead of NVML (tests and development; logged as simulated)."""
    socket_poll_interval_s: float = 0.2
    """Seconds between checks that kubelet.sock and our socket are still the ones we know."""
    register_timeout_s: float = 5.0
    """Seconds one Register call may take."""
    register_backoff_s: tuple[float, float] = (0.1, 5.0)
    """First and longest wait in seconds between failed registrations (doubling in between)."""

    @property
    def kubelet_socket(self) -> Path:
        return self.device_plugin_dir / KUBELET_SOCKET

    @property
    def plugin_socket(self) -> Path:
        return self.device_plugin_dir / self.socket_name

    def validate(self) -> None:
        """Raise ConfigError for the first setting that cannot work, naming its flag."""
        if self.api is Api.DRA:
            self.dra.validate()
        self.sizing.validate()
        name = self.resource_name
        if not _RESOURCE_NAME.fullmatch(name) or name.split("/")[0].endswith("kubernetes.io"):
            raise ConfigError(
                f"--resource-name must be an extended resource name like "
                f"{DEFAULT_RESOURCE_NAME} (domain/name, not kubernetes.io), got {name!r}"
            )
        if not self.health_interval_s > 0:
            raise ConfigError(f"--health-interval must be positive, got {self.health_interval_s}")
        if any(x < 0 for x in self.ignored_xids):
            raise ConfigError("--ignored-xids must be non-negative integers")
        if self.xid_recovery_probes < 1:
            raise ConfigError(
                f"--xid-recovery-probes must be at least 1, got {self.xid_recovery_probes}"
            )
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"--metrics-port must be in 0..65535, got {self.metrics_port}")
        if "/" in self.socket_name or not self.socket_name:
            raise ConfigError(f"socket name must be a file name, got {self.socket_name!r}")
        longest = max(len(str(self.plugin_socket).encode()), len(str(self.kubelet_socket).encode()))
        if longest > _MAX_SOCKET_PATH:
            raise ConfigError(
                f"--device-plugin-dir {self.device_plugin_dir} is too long: unix socket paths "
                f"in it would be {longest} bytes, Linux allows {_MAX_SOCKET_PATH}"
            )
        for flag, path in (
            ("--mps-pipe-dir", self.grant.mps_pipe_dir),
            ("--mps-shm-dir", self.grant.mps_shm_dir),
        ):
            if path is not None and not path.is_absolute():
                raise ConfigError(f"{flag} must be an absolute path, got {path}")
        if self.grant.mps_shm_dir is not None and self.grant.mps_pipe_dir is None:
            raise ConfigError("--mps-shm-dir needs --mps")

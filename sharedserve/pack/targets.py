"""The targets file: the endpoints a pack run serves, and what the bench measures.

Format (one object per replica; ``null`` where a field does not apply)::

    {"targets": [{"name": "tiny-0", "model": "tiny", "rest": "http://127.0.0.1:PORT",
                  "grpc": "127.0.0.1:PORT", "pid": 1234, "cgroup": "/sys/fs/cgroup/...",
                  "gpu": "GPU-uuid", "gpu_memory_fraction": 0.2, "cpu_limit": 0.5,
                  "weight": 1.0, "slo_p99_ms": null, "tls_ca_file": null,
                  "tls_cert_file": null, "tls_key_file": null}],
     "simulated_gpus": false}

It is written atomically (temporary file, then rename), so a reader never sees half a file even
while the packer rewrites it after a restart. A Kubernetes deployment can be described in the same
format by hand, with ``pid`` and ``cgroup`` null. ``weight`` (default 1) and ``slo_p99_ms``
(default null) come from the pack spec; files without them (older ones) read with the defaults.

A server that serves TLS (``serve --tls-cert-file``) has an ``https://`` ``rest`` URL, and its
``grpc`` address then speaks TLS too (one certificate serves both listeners). ``tls_ca_file``
is the CA bundle the server's certificate is verified with (null: the system's trust store);
``tls_cert_file`` and ``tls_key_file`` are the client certificate and key a server with mutual
TLS asks for. Relative paths are from the targets file's directory; pack's own replicas serve
plain http and leave them null. Load-generator workers on other machines need the files at the
same paths.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sharedserve.errors import ConfigError
from sharedserve.files import write_atomic

__all__ = ["Target", "read_targets", "write_targets"]


@dataclass(frozen=True)
class Target:
    """One model server endpoint."""

    name: str
    """Replica name, unique in the file (``tiny-0``)."""
    model: str
    """Model name in the server's URLs (``/v1/models/tiny``)."""
    rest: str
    """REST base URL, ``http://host:port``."""
    grpc: str | None = None
    """gRPC address, ``host:port``."""
    pid: int | None = None
    """Server process ID on this host; None for remote endpoints."""
    cgroup: str | None = None
    """The replica's CPU cgroup directory; None when no quota is enforced."""
    gpu: str | None = None
    """UUID of the GPU the replica is on; None without one."""
    gpu_memory_fraction: float | None = None
    """The replica's GPU memory cap as a share of the GPU."""
    cpu_limit: float | None = None
    """The replica's CPU limit in cores."""
    weight: float = 1.0
    """The model's relative share of traffic, as its pack spec entry gives it."""
    slo_p99_ms: float | None = None
    """The model's P99 latency objective in milliseconds; None when none was given."""
    tls_ca_file: str | None = None
    """CA certificates (PEM) that verify an ``https://`` server, REST and gRPC; None: the
    system's trust store (gRPC: its default roots)."""
    tls_cert_file: str | None = None
    """Client certificate (PEM) for a server with mutual TLS; with ``tls_key_file``."""
    tls_key_file: str | None = None
    """The client certificate's private key (PEM, unencrypted)."""

    @property
    def tls(self) -> bool:
        """The server speaks TLS, on REST and gRPC both."""
        return self.rest.startswith("https://")


def write_targets(path: Path, targets: list[Target], *, simulated_gpus: bool = False) -> None:
    """Replace ``path`` with the targets, atomically."""
    body = {"targets": [asdict(t) for t in targets], "simulated_gpus": simulated_gpus}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(body, indent=2) + "\n").encode())


_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "model": (str,),
    "rest": (str,),
    "grpc": (str, type(None)),
    "pid": (int, type(None)),
    "cgroup": (str, type(None)),
    "gpu": (str, type(None)),
    "gpu_memory_fraction": (float, int, type(None)),
    "cpu_limit": (float, int, type(None)),
    "weight": (float, int),
    "slo_p99_ms": (float, int, type(None)),
    "tls_ca_file": (str, type(None)),
    "tls_cert_file": (str, type(None)),
    "tls_key_file": (str, type(None)),
}
_TLS_FILES = ("tls_ca_file", "tls_cert_file", "tls_key_file")
_DEFAULTS: dict[str, Any] = {"weight": 1.0}


def _target(entry: Any, where: str, directory: Path) -> Target:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object")
    for key in ("name", "model", "rest"):
        if key not in entry:
            raise ConfigError(f"{where} has no {key!r}")
    values: dict[str, Any] = {}
    for key, kinds in _TYPES.items():
        value = entry.get(key, _DEFAULTS.get(key))
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise ConfigError(f"{where}.{key} has the wrong type: {value!r}")
        values[key] = value
    if not values["weight"] >= 0:
        raise ConfigError(f"{where}.weight must not be negative, got {values['weight']!r}")
    if not values["rest"].startswith(("http://", "https://")):
        raise ConfigError(
            f"{where}.rest must be an http:// or https:// URL, got {values['rest']!r}"
        )
    _check_tls(values, where)
    for key in _TLS_FILES:
        if values[key] is not None:
            values[key] = str(directory / values[key])  # an absolute path stays as it is
    return Target(**values)


def _check_tls(values: dict[str, Any], where: str) -> None:
    given = [key for key in _TLS_FILES if values[key] is not None]
    if given and not values["rest"].startswith("https://"):
        raise ConfigError(
            f"{where}.{given[0]} is for a server that serves TLS, whose rest URL is https://; "
            f"got {values['rest']!r}"
        )
    if (values["tls_cert_file"] is None) != (values["tls_key_file"] is None):
        raise ConfigError(
            f"{where}: tls_cert_file and tls_key_file go together (a client certificate and "
            "its key, for a server with mutual TLS)"
        )


def read_targets(path: Path) -> list[Target]:
    """Parse a targets file; ConfigError says what is wrong with it."""
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read targets file {path}: {e.strerror}") from e
    except ValueError as e:
        raise ConfigError(f"targets file {path} is not valid JSON: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("targets"), list):
        raise ConfigError(f'targets file {path}: expected an object with a "targets" list')
    targets = [
        _target(t, f"{path}: targets[{i}]", path.parent) for i, t in enumerate(data["targets"])
    ]
    if not targets:
        raise ConfigError(f"targets file {path} lists no targets")
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ConfigError(f"targets file {path} repeats a name: {names}")
    return targets

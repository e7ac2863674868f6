"""Pack spec files (``pack --spec pack.yaml``): a mix of models for one host. Pure (reads a file).

Format (YAML; JSON is YAML too)::

    replicas: 2              # any entry key at the top level is every entry's default
    cpu_limit: 0.5
    models:
      - model: models/resnet50            # relative to the spec file
        replicas: 3
        gpu_memory_mib: 6000
        serve_args: [--enable-batching, --max-batch-size, "8"]
        slo_p99_ms: 50
        weight: 3
      - model: models/tiny
        name: tiny-a

Entry keys: ``model`` (required), ``name``, ``replicas``, ``gpu``, ``gpu_memory_mib`` or
``gpu_memory_fraction``, ``cpu_limit``, ``serve_args``, ``slo_p99_ms``, ``weight``.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sharedserve.config import NO_CAP, CapSource, GpuCapRequest, PackEntry
from sharedserve.contract import parse_fraction, parse_mib
from sharedserve.errors import ConfigError

__all__ = [
    "ENTRY_KEYS",
    "PackSpec",
    "load_spec",
    "parse_spec",
    "read_document",
    "unknown_key",
]

ENTRY_KEYS = (
    "model",
    "name",
    "replicas",
    "gpu",
    "gpu_memory_mib",
    "gpu_memory_fraction",
    "cpu_limit",
    "serve_args",
    "slo_p99_ms",
    "weight",
)


@dataclass(frozen=True)
class PackSpec:
    """The models of a pack spec, defaults applied and model paths resolved."""

    entries: tuple[PackEntry, ...]
    source: Path | None = None
    """The file it was read from."""


# libyaml's safe loader where PyYAML was built with it (its wheels are): a fleet file of 10,000
# models took the pure-Python one six seconds.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_document(path: Path, what: str) -> Any:
    """A YAML file parsed (JSON by its ``.json`` suffix; JSON is YAML too, but its errors read
    better from a JSON parser); ConfigError says which ``what`` could not be read and why."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror}") from e
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except ValueError as e:
            raise ConfigError(f"{what} {path} is not valid JSON: {e}") from e
    try:
        return yaml.load(text, Loader=_LOADER)  # a safe loader, C or Python
    except yaml.YAMLError as e:
        raise ConfigError(f"{what} {path} is not valid YAML: {e}") from e


def load_spec(path: Path) -> PackSpec:
    """Read and check a spec file; ConfigError names the entry and key at fault."""
    data = read_document(path, "pack spec")
    return parse_spec(data, base_dir=path.parent, where=str(path))


def unknown_key(key: object, known: tuple[str, ...], where: str) -> ConfigError:
    """The error for a key not in ``known``, with the closest known one when there is one."""
    close = difflib.get_close_matches(str(key), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return ConfigError(f"{where}: unknown key {key!r}{hint}")


def parse_spec(data: Any, *, base_dir: Path, where: str = "pack spec") -> PackSpec:
    """Check parsed spec data; model paths are taken relative to ``base_dir``."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with a 'models' list")
    top_keys = ("models", *ENTRY_KEYS)
    for key in data:
        if key not in top_keys:
            raise unknown_key(key, top_keys, where)
    models = data.get("models")
    if not isinstance(models, list) or not models:
        raise ConfigError(f"{where}: 'models' must be a non-empty list of entries")
    defaults = {k: v for k, v in data.items() if k != "models"}
    if "name" in defaults and len(models) > 1:
        raise ConfigError(f"{where}: 'name' names one entry; give it in each entry, not at the top")
    entries = []
    for i, raw in enumerate(models):
        label = f"{where}: models[{i}]"
        if not isinstance(raw, dict):
            raise ConfigError(f"{label} must be a mapping, got {raw!r}")
        for key in raw:
            if key not in ENTRY_KEYS:
                raise unknown_key(key, ENTRY_KEYS, label)
        if isinstance(raw.get("name"), str):
            label = f"{label} ({raw['name']})"
        entries.append(_entry({**defaults, **raw}, base_dir, label))
    names = [e.name for e in entries if e.name is not None]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"{where}: entry names must be unique; repeated: {', '.join(repeated)}")
    return PackSpec(tuple(entries), None if where == "pack spec" else Path(where))


def _number(values: dict[str, Any], key: str, label: str, *, integer: bool = False) -> Any:
    value = values.get(key)
    if value is None:
        return None
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:  # type: ignore[operator]
        what = "a positive whole number" if integer else "a positive number"
        raise ConfigError(f"{label}: {key} must be {what}, got {value!r}")
    return value


def _entry(values: dict[str, Any], base_dir: Path, label: str) -> PackEntry:
    model = values.get("model")
    if not isinstance(model, str) or not model:
        raise ConfigError(f"{label}: 'model' (the model's base path) is required")
    name = values.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(f"{label}: name must be a non-empty string, got {name!r}")
    gpu = values.get("gpu")
    if gpu is not None:
        if isinstance(gpu, bool) or not isinstance(gpu, (int, str)):
            raise ConfigError(f"{label}: gpu must be an index or a UUID (prefix), got {gpu!r}")
        gpu = str(gpu)
    fraction, mib = values.get("gpu_memory_fraction"), values.get("gpu_memory_mib")
    if fraction is not None and mib is not None:
        raise ConfigError(f"{label}: give gpu_memory_fraction or gpu_memory_mib, not both")
    cap = NO_CAP
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise ConfigError(f"{label}: gpu_memory_fraction must be a number, got {fraction!r}")
        cap = GpuCapRequest.of(
            CapSource.FLAG, fraction=parse_fraction(fraction, f"{label}: gpu_memory_fraction")
        )
    elif mib is not None:
        if isinstance(mib, bool) or not isinstance(mib, int):
            raise ConfigError(f"{label}: gpu_memory_mib must be a whole number, got {mib!r}")
        cap = GpuCapRequest.of(CapSource.FLAG, mib=parse_mib(mib, f"{label}: gpu_memory_mib"))
    args = values.get("serve_args", [])
    plain = (str, int, float)  # YAML reads "8" as 8: numbers are fine, a yes/no is a mistake
    if not isinstance(args, list) or not all(
        isinstance(a, plain) and not isinstance(a, bool) for a in args
    ):
        raise ConfigError(f"{label}: serve_args must be a list of strings, got {args!r}")
    replicas = _number(values, "replicas", label, integer=True)
    weight = _number(values, "weight", label)
    cpu = _number(values, "cpu_limit", label)
    slo = _number(values, "slo_p99_ms", label)
    return PackEntry(
        model_dir=(base_dir / Path(model).expanduser()),
        replicas=1 if replicas is None else replicas,
        name=name,
        gpu=gpu,
        cap=cap,
        cpu_limit_cores=None if cpu is None else float(cpu),
        server_args=tuple(str(a) for a in args),
        slo_p99_ms=None if slo is None else float(slo),
        weight=1.0 if weight is None else float(weight),
    )

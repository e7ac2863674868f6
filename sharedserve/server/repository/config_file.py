"""Many models named in TF Serving's model config file (``--model-config-file``). Pure.

The file is TF Serving's ``ModelServerConfig`` in protobuf text format, read by protobuf's own
``text_format`` against TF Serving's ``.proto`` (copied in ``tfserving/api/``), so a file that
TF Serving reads is read here unchanged, and a syntax error, an unknown field or a field given
twice is refused with its line and column. What it means follows TF Serving's
``serving_config.md`` and ``server_core.cc``:

- ``base_path`` must be absolute, as TF Serving's model server requires (it joins relative
  paths only to a root directory its ``ServerCore`` API takes, which no flag sets); a URI
  (``gs://``, ``s3://``) is refused: sharedserve reads local directories only.
- ``model_platform``: ``tensorflow``, as TF Serving; also ``pytorch``, ``torch`` and Triton's
  ``pytorch_libtorch`` for TorchScript, ``onnx`` and Triton's ``onnxruntime_onnx`` for ONNX,
  ``pytorch_export`` (or ``torch_export``) for ``torch.export``'s ``model.pt2``, so one file can
  name every framework. The framework is
  found from the files in any case (``model_source``); a platform that disagrees with them is an
  error naming both. Left out (TF Serving refuses that), the files decide.
- ``model_version_policy``: ``latest {num_versions}`` (0 counts as 1, as upstream),
  ``all {}``, ``specific {versions}``; none: the latest version.
- ``version_labels``: a label must name a version the policy serves (TF Serving refuses a label
  for a version not available, unless a flag it has and sharedserve has not allows it).
- ``custom_model_config`` and ``logging_config`` are refused as not supported, not ignored.
- A model name given twice is refused, as TF Serving does.

``versions_to_serve`` resolves an entry to its version directories on disk with
``model_source``'s rules.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from google.protobuf import text_format

from sharedserve.enums import Framework
from sharedserve.errors import ConfigError
from sharedserve.server.protos.tfserving.model_server_config_pb2 import (
    ModelConfig,
    ModelServerConfig,
)
from sharedserve.server.version.settings import ModelSettings
from sharedserve.server.version.source import ModelSource, find_model, find_version_sources

__all__ = [
    "MAX_CONFIG_BYTES",
    "ModelEntry",
    "PolicyKind",
    "VersionPolicy",
    "check_labels",
    "check_model_name",
    "model_config_entries",
    "parse_model_config",
    "read_model_config_file",
    "versions_to_serve",
]

MAX_CONFIG_BYTES = 16 * 1024 * 1024
"""Largest model config file read: 16 MiB is some 100,000 models, far past any real one."""

_PLATFORMS = {
    "tensorflow": Framework.TENSORFLOW,
    "pytorch": Framework.TORCH,
    "torch": Framework.TORCH,
    "pytorch_libtorch": Framework.TORCH,
    "onnx": Framework.ONNX,
    "onnxruntime_onnx": Framework.ONNX,
    "pytorch_export": Framework.EXPORT,
    "torch_export": Framework.EXPORT,
}
_FRAMEWORK_NAMES = {
    Framework.TENSORFLOW: "TensorFlow SavedModel",
    Framework.TORCH: "TorchScript",
    Framework.ONNX: "ONNX",
    Framework.EXPORT: "torch.export",
}
_MODEL_TYPE_TENSORFLOW = 1  # the deprecated ModelType enum's TENSORFLOW


class PolicyKind(str, Enum):
    """Which versions of a model are served (TF Serving's ``ServableVersionPolicy``)."""

    LATEST = "latest"
    """The ``num_versions`` highest version numbers on disk."""
    ALL = "all"
    """Every version on disk."""
    SPECIFIC = "specific"
    """The listed versions, each of which must be on disk."""


@dataclass(frozen=True)
class VersionPolicy:
    kind: PolicyKind = PolicyKind.LATEST
    num_versions: int = 1
    """For LATEST: how many of the highest versions."""
    versions: tuple[int, ...] = ()
    """For SPECIFIC: the version numbers, ascending."""

    def select(self, on_disk: Sequence[int]) -> list[int]:
        """The versions to serve among ``on_disk``; SPECIFIC ones missing are left out."""
        ordered = sorted(set(on_disk))
        if self.kind is PolicyKind.ALL:
            return ordered
        if self.kind is PolicyKind.LATEST:
            return ordered[-self.num_versions :]
        return [v for v in ordered if v in self.versions]


@dataclass(frozen=True)
class ModelEntry:
    """One model to serve, as a model config file or a model repository names it."""

    name: str
    base_path: Path
    """The directory holding its numeric version subdirectories (or a bare model directory)."""
    framework: Framework | None = None
    """What the config's ``model_platform`` says; None: the files decide."""
    version_policy: VersionPolicy = VersionPolicy()
    version_labels: tuple[tuple[str, int], ...] = ()
    """(label, version) pairs, by label."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    """Its own settings (a repository's model file); its batching None: the server's."""

    def version_of(self, label: str) -> int | None:
        return dict(self.version_labels).get(label)


def check_model_name(name: str, where: str) -> None:
    """A name a REST path can carry: ``/v1/models/NAME:predict``, ``/v2/models/NAME/infer``."""
    if not name or "/" in name or ":" in name or name.strip() != name or not name.isprintable():
        raise ConfigError(
            f"{where}: model name {name!r} cannot be used in a URL path: give a non-empty name "
            "without '/', ':', control characters or surrounding spaces"
        )


def check_labels(
    name: str, policy: VersionPolicy, labels: dict[str, int], where: str
) -> tuple[tuple[str, int], ...]:
    """Labels as ModelEntry holds them; with a SPECIFIC policy, each must name a listed version
    (the other policies are checked against the disk by ``versions_to_serve``)."""
    for label, version in labels.items():
        if not label:
            raise ConfigError(f"{where}: model {name!r} has an empty version label")
        if policy.kind is PolicyKind.SPECIFIC and version not in policy.versions:
            raise ConfigError(
                f"{where}: model {name!r}: label {label!r} names version {version}, which its "
                f"version policy does not serve (specific versions {list(policy.versions)})"
            )
    return tuple(sorted(labels.items()))


def read_model_config_file(path: Path) -> list[ModelEntry]:
    """Read a TF Serving model config file; ConfigError names the file (and line) at fault."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read model config file {path}: {e.strerror or e}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"model config file {path} is larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB; "
            "is it the right file?"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path}:{line}: model config file is not UTF-8 text") from None
    return parse_model_config(text, str(path))


def parse_model_config(text: str, where: str = "model config") -> list[ModelEntry]:
    """``text`` (a ``ModelServerConfig`` in text format) as entries; [] for an empty config,
    which TF Serving also accepts (no models, until a reload names some)."""
    config = ModelServerConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as e:
        # Our copy's package, not TF Serving's, is in protobuf's words: a user knows the types.
        detail = re.sub(r"^\d+:\d+ : ", "", str(e)).replace("sharedserve.tfserving.", "")
        raise ConfigError(f"{where}:{e.GetLine() or 1}:{e.GetColumn() or 1}: {detail}") from None
    return model_config_entries(config, where, _config_lines(text))


def model_config_entries(
    config: ModelServerConfig, where: str = "model config", lines: Sequence[int] = ()
) -> list[ModelEntry]:
    """A ``ModelServerConfig`` message (a reload request's, or a file's parsed) as entries,
    by the same rules as a file; ``lines``: each model's line in the file, when read from one."""
    if config.WhichOneof("config") == "custom_model_config":
        raise ConfigError(
            f"{where}: custom_model_config is not supported; list the models in "
            "model_config_list { config { ... } }"
        )
    entries: list[ModelEntry] = []
    seen: set[str] = set()
    for i, model in enumerate(config.model_config_list.config):
        place = f"{where}:{lines[i]}" if i < len(lines) else f"{where}: config {i + 1}"
        if model.name in seen:
            # TF Serving's words: "Illegal to list model X multiple times in config list".
            raise ConfigError(f"{place}: model {model.name!r} is listed more than once")
        seen.add(model.name)
        entries.append(_entry(model, place))
    return entries


def _entry(model: ModelConfig, place: str) -> ModelEntry:
    check_model_name(model.name, place)
    if model.HasField("logging_config"):
        raise ConfigError(
            f"{place}: model {model.name!r}: logging_config (request logging) is not supported"
        )
    policy = _policy(model, place)
    return ModelEntry(
        name=model.name,
        base_path=_base_path(model, place),
        framework=_framework(model, place),
        version_policy=policy,
        version_labels=check_labels(model.name, policy, dict(model.version_labels), place),
    )


def _base_path(model: ModelConfig, place: str) -> Path:
    base = model.base_path
    if not base:
        raise ConfigError(f"{place}: model {model.name!r} has no base_path")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", base):
        raise ConfigError(
            f"{place}: model {model.name!r}: base_path {base!r} is a URI; sharedserve reads "
            "local directories only"
        )
    if not Path(base).is_absolute():
        raise ConfigError(
            f"{place}: model {model.name!r}: base_path {base!r} is relative; it must be "
            "absolute, as TF Serving requires"
        )
    return Path(base)


def _framework(model: ModelConfig, place: str) -> Framework | None:
    platform, model_type = model.model_platform, model.model_type
    if model_type and platform:  # TF Serving refuses both too
        raise ConfigError(
            f"{place}: model {model.name!r} sets both model_type (deprecated) and "
            "model_platform; keep model_platform"
        )
    if model_type:
        if model_type != _MODEL_TYPE_TENSORFLOW:
            raise ConfigError(f"{place}: model {model.name!r}: model_type OTHER is not supported")
        return Framework.TENSORFLOW
    if not platform:
        return None
    framework = _PLATFORMS.get(platform)
    if framework is None:
        raise ConfigError(
            f"{place}: model {model.name!r}: model_platform {platform!r} is not one sharedserve "
            f"serves; use one of {', '.join(_PLATFORMS)}"
        )
    return framework


def _policy(model: ModelConfig, place: str) -> VersionPolicy:
    if not model.HasField("model_version_policy"):
        return VersionPolicy()
    chosen = model.model_version_policy.WhichOneof("policy_choice")
    if chosen == "all":
        return VersionPolicy(PolicyKind.ALL)
    if chosen == "specific":
        versions = tuple(sorted(set(model.model_version_policy.specific.versions)))
        if not versions or versions[0] < 0:
            raise ConfigError(
                f"{place}: model {model.name!r}: a specific version policy needs one or more "
                f"version numbers >= 0, got {list(versions)}"
            )
        return VersionPolicy(PolicyKind.SPECIFIC, versions=versions)
    # latest {...}, or a model_version_policy {} with no choice, which upstream serves as latest.
    num = model.model_version_policy.latest.num_versions
    return VersionPolicy(PolicyKind.LATEST, num_versions=max(num, 1))


def _config_lines(text: str) -> list[int]:
    """The line each ``model_config_list { config ...`` starts on (text_format keeps no
    positions): protobuf's own tokenizer walks the text, so comments and strings are skipped as
    the parser skips them. ``_line`` is the tokenizer's (ParseError's line comes from it)."""
    tokenizer = text_format.Tokenizer(text.split("\n"))  # as Parse splits it
    lines: list[int] = []
    open_fields: list[str] = []
    last = ""
    while not tokenizer.AtEnd():
        token = tokenizer.token
        if token in ("{", "<"):
            open_fields.append(last)
        elif token in ("}", ">"):
            open_fields = open_fields[:-1]
        elif token == "config" and open_fields == ["model_config_list"]:
            lines.append(getattr(tokenizer, "_line", 0) + 1)
        if token != ":":
            last = token
        tokenizer.NextToken()
    return lines


def versions_to_serve(entry: ModelEntry) -> list[ModelSource]:
    """The version directories ``entry`` serves on disk, oldest first; ConfigError when the
    base path holds none the policy selects, a specific version is missing, a label names a
    version not served, or ``model_platform`` disagrees with the files."""
    base = entry.base_path
    sources = find_version_sources(base, entry.name)
    if not sources:  # a bare model directory, or nothing: find_model says which, as for --model
        try:
            sources = [find_model(base, entry.name)]
        except ConfigError as e:
            raise ConfigError(f"model {entry.name!r}: {e}") from None
    by_version = {s.version: s for s in sources}
    chosen = entry.version_policy.select(list(by_version))
    missing = [v for v in entry.version_policy.versions if v not in by_version]
    if missing:
        raise ConfigError(
            f"model {entry.name!r}: specific versions {missing} are not in {base} "
            f"(versions there: {sorted(by_version)})"
        )
    for label, version in entry.version_labels:
        if version not in chosen:
            raise ConfigError(
                f"model {entry.name!r}: label {label!r} names version {version}, which is not "
                f"served (serving {chosen} from {base})"
            )
    served = [by_version[v] for v in chosen]
    if entry.framework is not None:
        for source in served:
            if source.framework is not entry.framework:
                raise ConfigError(
                    f"model {entry.name!r}: its model_platform names "
                    f"{_FRAMEWORK_NAMES[entry.framework]} but {source.path} holds a "
                    f"{_FRAMEWORK_NAMES[source.framework]} model"
                )
    return served

"""A model repository (``--model-repository DIR``): every subdirectory a model. Pure.

Triton's layout: ``DIR/NAME/`` is the model ``NAME``, with numeric version subdirectories (or
a bare model directory, served as version 1, as ``--model`` takes one), and optionally a model
file ``DIR/NAME/sharedserve.yaml`` for what the directory cannot say::

    batching:                 # this model's own batching; the keys of --batching-parameters-file
      max_batch_size: 32
      batch_timeout_micros: 2000
    version_policy:           # one of latest {num_versions}, all {}, specific {versions}
      latest: {num_versions: 2}
    version_labels:           # label -> version; each must be a version the policy serves
      stable: 3
    weight: 2                 # its share of the model-call threads against busy models' (1)
    max_inflight: 64          # its requests queued or running; more get 503 at once
    gpu_memory_mib: 512       # its memory budget per version (default: its measured peak)
    pinned: true              # never paged out (serve --paging lru)

The first three keys mean what they mean in a TF Serving model config file (``model_config``);
``weight`` and ``max_inflight`` are the shared scheduler's (``scheduler.py``), ``gpu_memory_mib``
and ``pinned`` the process memory's (``paging.py``). A key the server
cannot honour yet is refused like a misspelt one, not read and ignored.

A subdirectory that holds no model is an error naming it: the server reports that model as
failed to load and serves the others (``serve --exit-on-error``: it refuses to start instead,
as Triton does by default). One that holds no version folder but a model one folder down
(``NAME/NAME2/1``: a copy made into a folder that already existed) says so, and one that holds
both its versions and such a copy is served with a warning that the copy is not. Hidden
directories (``.git``, ``.ipynb_checkpoints``) and plain files are passed over.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass

from sharedserve.config import BatchingSettings
from sharedserve.documents import (
    DOCUMENT,
    Must,
    Positive,
    PositiveWhole,
    json_schema,
    parse,
    read_document,
    refuse,
    whole,
)
from sharedserve.errors import ConfigError
from sharedserve.server.repository.config_file import (
    ModelEntry,
    PolicyKind,
    VersionPolicy,
    check_labels,
    check_model_name,
)
from sharedserve.server.version.settings import ModelSettings
from sharedserve.server.version.source import find_model, find_version_sources, find_versions

__all__ = [
    "MODEL_FILE",
    "BatchingFile",
    "ModelFile",
    "check_model_repository",
    "model_schema",
    "read_model_file",
    "read_model_repository",
    "read_repository_model",
    "repository_names",
]

log = logging.getLogger(__name__)

MODEL_FILE = "sharedserve.yaml"


def _version(value: Any) -> bool:
    return whole(value) and value >= 0


# Each list or mapping is checked whole by its Must, not item by item: documents' error
# messages look for a document type among a container's type arguments and would take an
# item's Annotated Must for one.
_AtLeastZero = Annotated[
    int, Field(ge=0), Must("a whole number >= 0", lambda v: whole(v) and v >= 0)
]


@dataclass(frozen=True, config=DOCUMENT)
class BatchingFile:
    """This model's dynamic batching (as ``serve --enable-batching``); a key left out keeps the
    server's default for it."""

    max_batch_size: PositiveWhole | None = None
    """Most rows (dim 0, summed over the merged requests) one batch may hold."""
    batch_timeout_micros: _AtLeastZero | None = None
    """Microseconds the first request of a batch waits for company."""
    max_enqueued_batches: PositiveWhole | None = None
    """Batches that may wait for a thread; a request needing one more is refused at once."""
    num_batch_threads: PositiveWhole | None = None
    """Batches of this model that run at the same time."""


@dataclass(frozen=True, config=DOCUMENT)
class Latest:
    num_versions: PositiveWhole = 1
    """How many of the highest version numbers are served."""


@dataclass(frozen=True, config=DOCUMENT)
class All:
    """Every version on disk (``all: {}``)."""


@dataclass(frozen=True, config=DOCUMENT)
class Specific:
    versions: Annotated[
        tuple[int, ...],
        Field(min_length=1),
        Must(
            "a non-empty list of version numbers >= 0",
            lambda v: isinstance(v, list) and v != [] and all(_version(x) for x in v),
        ),
    ]
    """The version numbers served; each must be on disk."""


@dataclass(frozen=True, config=DOCUMENT)
class VersionPolicyFile:
    """Which versions are served: give exactly one key. None: the latest version."""

    latest: Latest | None = None
    all: All | None = None
    specific: Specific | None = None

    @model_validator(mode="after")
    def _one(self) -> VersionPolicyFile:
        given = [k for k in ("latest", "all", "specific") if getattr(self, k) is not None]
        if len(given) != 1:
            raise refuse(
                "give exactly one of latest, all, specific, got " + (", ".join(given) or "none")
            )
        return self

    def policy(self) -> VersionPolicy:
        if self.all is not None:
            return VersionPolicy(PolicyKind.ALL)
        if self.specific is not None:
            return VersionPolicy(
                PolicyKind.SPECIFIC, versions=tuple(sorted(set(self.specific.versions)))
            )
        assert self.latest is not None  # _one
        return VersionPolicy(PolicyKind.LATEST, num_versions=self.latest.num_versions)


@dataclass(frozen=True, config=DOCUMENT)
class ModelFile:
    """A model's own settings in a model repository (``NAME/sharedserve.yaml``)."""

    batching: BatchingFile | None = None
    """Batch this model's requests, with these settings; none: as the server's flags say."""
    version_policy: VersionPolicyFile | None = None
    """Which versions are served; none: the latest."""
    version_labels: Annotated[
        dict[str, int] | None,
        Must(
            "a mapping of label to version number >= 0",
            lambda v: (
                isinstance(v, dict)
                and all(isinstance(k, str) and k != "" and _version(x) for k, x in v.items())
            ),
        ),
    ] = None
    """Names for versions (``/v1/models/NAME/labels/LABEL``), each a version served."""
    weight: Positive | None = None
    """Its share of the server's model-call threads against the other busy models' (each 1
    unless set): 2 runs twice the calls of a model of weight 1 while both have calls waiting."""
    max_inflight: PositiveWhole | None = None
    """Its requests queued or running at most; more are refused at once (503 /
    RESOURCE_EXHAUSTED). None: ``serve --max-inflight-per-model``."""
    gpu_memory_mib: PositiveWhole | None = None
    """Its memory budget per version, in MiB, counted against the server's GPU cap (on a
    host without a GPU, the recorded ``--gpu-memory-mib``): a load that does not fit, or whose
    measured peak is larger, is refused; a request that would outgrow it gets 503. None: its
    peak as measured at load."""
    pinned: bool = False
    """Never paged out to make room for another model (``serve --paging lru``)."""

    def model_settings(self, where: str) -> ModelSettings:
        """What the server runs the model with; ConfigError naming ``where`` for batching
        settings that cannot work together."""
        return ModelSettings(
            _batching(self.batching, where),
            self.weight,
            self.max_inflight,
            self.gpu_memory_mib,
            self.pinned,
        )

    @classmethod
    def of(cls, settings: ModelSettings) -> ModelFile:
        """The file that says ``settings`` (a shared server's, written by ``pack``)."""
        batching = None if settings.batching is None else BatchingFile(**asdict(settings.batching))
        return cls(
            batching=batching,
            weight=settings.weight,
            max_inflight=settings.max_inflight,
            gpu_memory_mib=settings.gpu_memory_mib,
            pinned=settings.pinned,
        )


def model_schema() -> dict[str, Any]:
    """The model file's JSON Schema (``sharedserve schema model``)."""
    return json_schema(ModelFile, "sharedserve model file (model repository)")


def read_model_file(path: Path) -> ModelFile:
    """Read and check one model file; ConfigError names the file and the key at fault."""
    data = read_document(path, "model file")
    if data is None:  # an empty file: nothing set
        return ModelFile()
    return parse(ModelFile, data, where=str(path))


def _batching(given: BatchingFile | None, where: str) -> BatchingSettings | None:
    if given is None:
        return None
    values = {k: v for k, v in asdict(given).items() if v is not None}
    settings = BatchingSettings(**values)
    try:
        settings.validate()  # the same rules as the flags and batching_parameters.txt
    except ConfigError as e:
        raise ConfigError(f"{where}: batching: {e.message}") from None
    return settings


def _numbered(name: str) -> bool:
    return name.isascii() and name.isdigit()


def _nested(model_dir: Path) -> list[str]:
    """The subdirectories of ``model_dir`` that are a model themselves (version folders, or a
    model's files): what ``cp -r MODEL DIR/NAME`` leaves when ``DIR/NAME`` already existed."""
    found = []
    for child in sorted(model_dir.iterdir()):
        if not child.is_dir() or child.name.startswith(".") or _numbered(child.name):
            continue
        try:
            find_model(child)
        except ConfigError:
            continue
        found.append(child.name)
    return found


def _no_model(model_dir: Path, why: ConfigError) -> ConfigError:
    name = model_dir.name
    nested = _nested(model_dir)
    if not nested:
        return ConfigError(f"model repository: {name!r} holds no model: {why.message}")
    inner = nested[0]
    return ConfigError(
        f"model repository: {name!r} holds no version folder (1/, 2/, ...) of its own but a "
        f"model one folder down, {name}/{inner}/ (a copy made into a folder that already "
        f"existed?): move the version folders of {model_dir / inner} up into {model_dir}"
    )


def _entry(model_dir: Path) -> ModelEntry:
    name = model_dir.name
    check_model_name(name, str(model_dir))
    if not find_version_sources(model_dir, name):
        try:
            find_model(model_dir, name)  # a bare model directory, as --model takes one
        except ConfigError as e:
            raise _no_model(model_dir, e) from None
    else:
        for inner in _nested(model_dir):
            log.warning(
                "model repository: %r also holds a model one folder down, %s/%s/ (versions "
                "%s), which is not served: a copy made into a folder that already existed?",
                name,
                name,
                inner,
                find_versions(model_dir / inner) or [1],
            )
    file = model_dir / MODEL_FILE
    settings = read_model_file(file) if file.is_file() else ModelFile()
    policy = (
        VersionPolicy() if settings.version_policy is None else settings.version_policy.policy()
    )
    return ModelEntry(
        name=name,
        base_path=model_dir,
        framework=None,  # the files say
        version_policy=policy,
        version_labels=check_labels(name, policy, dict(settings.version_labels or {}), str(file)),
        settings=settings.model_settings(str(file)),
    )


def check_model_repository(root: Path) -> Path:
    """``root`` resolved, as a repository of models, its models unread; ConfigError for a
    ``root`` that does not exist or is one model rather than a repository of them."""
    root = root.expanduser()
    if not root.is_dir():
        raise ConfigError(f"model repository {root} does not exist or is not a directory")
    root = root.resolve()
    try:
        find_model(root)
    except ConfigError:
        return root  # not one model: a repository of them
    raise ConfigError(
        f"{root} is one model (a model directory or its base path), not a model "
        "repository; serve it with --model, or pass the directory above it"
    )


def read_model_repository(root: Path) -> list[ModelEntry]:
    """Every model in ``root``, by name; ConfigError for a subdirectory with no model, a bad
    model file, or a ``root`` that is one model rather than a repository of them."""
    root = check_model_repository(root)
    return [_entry(root / name) for name in repository_names(root)]


def repository_names(root: Path) -> list[str]:
    """The names of ``root``'s models (its subdirectories), unchecked: what a load may name."""
    try:
        return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as e:
        raise ConfigError(f"cannot read model repository {root}: {e.strerror or e}") from None


def read_repository_model(root: Path, name: str) -> ModelEntry | None:
    """Model ``name`` of repository ``root`` as it is on disk now (None: no such model);
    ConfigError when its directory holds no model or a bad model file. Read alone, so that
    one broken model does not stop another's load while the server runs."""
    if name not in repository_names(root):
        return None
    return _entry(root / name)

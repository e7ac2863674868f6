"""What the process serves: the catalogs that find models on disk (a TF Serving model config
file, ``config_file.py``; a model repository directory, ``directory.py``; ``versions.py``),
the one load path (``manager.py``, the end of a version it no longer routes in ``retire.py``)
and where it may read from (``roots.py``), and the registry every request's version is looked up
in (``registry.py``)."""

from sharedserve.server.repository.config_file import (
    ModelEntry,
    model_config_entries,
    read_model_config_file,
)
from sharedserve.server.repository.directory import (
    MODEL_FILE,
    ModelFile,
    check_model_repository,
    model_schema,
    read_model_repository,
)
from sharedserve.server.repository.manager import IndexEntry, ModelEvents, ModelManager
from sharedserve.server.repository.polling import poll_config_file
from sharedserve.server.repository.registry import ModelRegistry
from sharedserve.server.repository.retire import DRAIN_S
from sharedserve.server.repository.roots import ModelRoots
from sharedserve.server.repository.versions import (
    Catalog,
    ConfigCatalog,
    FixedCatalog,
    RepositoryCatalog,
    VersionToServe,
    versions_of,
)

__all__ = [
    "DRAIN_S",
    "MODEL_FILE",
    "Catalog",
    "ConfigCatalog",
    "FixedCatalog",
    "IndexEntry",
    "ModelEntry",
    "ModelEvents",
    "ModelFile",
    "ModelManager",
    "ModelRegistry",
    "ModelRoots",
    "RepositoryCatalog",
    "VersionToServe",
    "check_model_repository",
    "model_config_entries",
    "model_schema",
    "poll_config_file",
    "read_model_config_file",
    "read_model_repository",
    "versions_of",
]

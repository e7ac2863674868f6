"""The example models and how to build them into TF Serving's directory layout.

One catalog for every framework: a model's name means the same architecture whichever framework
builds it, so densities measured on a TensorFlow build and a torch build can be compared. Not
every architecture exists for every framework; each entry says which it has.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sharedserve.enums import Framework
from sharedserve.errors import ConfigError
from sharedserve.framework_output import framework_startup

__all__ = ["CATALOG", "ExampleModelSpec", "build_models"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExampleModelSpec:
    """One example model of the catalog: its architecture, its tensors' names and the frameworks
    it builds for (the CLI's ``ExampleModelName`` is the choice of one by name)."""

    name: str
    description: str
    input_shape: tuple[int, ...]
    """Shape of one instance (no batch dimension)."""
    input_name: str
    output_name: str
    frameworks: tuple[Framework, ...] = (Framework.TENSORFLOW, Framework.TORCH)
    """The frameworks this architecture can be built for."""


CATALOG: dict[str, ExampleModelSpec] = {
    m.name: m
    for m in (
        ExampleModelSpec(
            "tiny",
            "dense 8 -> 16 -> 4 softmax; builds in seconds, for tests",
            (8,),
            "x",
            "probabilities",
        ),
        ExampleModelSpec(
            "mobilenet_v2",
            "MobileNetV2 (width 1.0), 224x224x3 -> 1000 classes",
            (224, 224, 3),
            "images",
            "probabilities",
        ),
        ExampleModelSpec(
            "resnet50",
            "ResNet-50, 224x224x3 -> 1000 classes",
            (224, 224, 3),
            "images",
            "probabilities",
        ),
        ExampleModelSpec(
            "inception_v3",
            "InceptionV3, 299x299x3 -> 1000 classes",
            (299, 299, 3),
            "images",
            "probabilities",
            (Framework.TENSORFLOW,),
        ),
    )
}


def _parse_framework(framework: str) -> Framework:
    try:
        return Framework(framework)
    except ValueError:
        choices = ", ".join(f.value for f in Framework)
        raise ConfigError(f"unknown framework {framework!r}; choose from {choices}") from None


def build_models(
    names: list[str],
    out: Path,
    *,
    overwrite: bool = False,
    seed: int = 0,
    framework: Framework | str = Framework.TENSORFLOW,
) -> list[Path]:
    """Build each model for ``framework`` into ``out/NAME/1``; returns the directories written.

    Each model is written to a temporary directory next to its destination and renamed into
    place, so an interrupted build never leaves a half-written model that ``serve`` would
    try to load. Everything is checked before anything is built.
    """
    chosen = _parse_framework(framework)
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise ConfigError(f"unknown model(s) {unknown}; choose from {sorted(CATALOG)}")
    if not names:
        raise ConfigError(f"name at least one model to build: {sorted(CATALOG)}")
    unsupported = [n for n in names if chosen not in CATALOG[n].frameworks]
    if unsupported:
        available = sorted(n for n, m in CATALOG.items() if chosen in m.frameworks)
        raise ConfigError(
            f"model(s) {unsupported} cannot be built for {chosen.value}; "
            f"{chosen.value} has {available}"
        )
    targets = [out / name / "1" for name in names]
    existing = [t for t in targets if t.exists()]
    if existing and not overwrite:
        raise ConfigError(
            f"{', '.join(map(str, existing))} already exist; pass --overwrite to replace"
        )

    save = _saver(chosen)
    written = []
    for name, target in zip(names, targets, strict=True):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
        try:
            save(CATALOG[name], tmp / "model", seed=seed)
            if target.exists():
                shutil.rmtree(target)
            (tmp / "model").rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log.info("built %s (%s) -> %s", name, chosen.value, target)
        written.append(target)
    return written


class _Saver(Protocol):
    def __call__(self, spec: ExampleModelSpec, path: Path, *, seed: int = 0) -> None: ...


def _saver(framework: Framework) -> _Saver:
    # Imported only now: each builder imports its framework, which takes seconds.
    if framework is Framework.TORCH:
        with framework_startup():
            from sharedserve.models.torch_models import save_torchscript

        return save_torchscript
    from sharedserve.models.tensorflow_models import save_saved_model

    return save_saved_model

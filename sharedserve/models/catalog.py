"""The example models and how to build them into TF Serving's directory layout."""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sharedserve.errors import ConfigError

__all__ = ["CATALOG", "ExampleModel", "build_models"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExampleModel:
    name: str
    description: str
    input_shape: tuple[int, ...]
    """Shape of one instance (no batch dimension)."""
    input_name: str
    output_name: str


CATALOG: dict[str, ExampleModel] = {
    m.name: m
    for m in (
        ExampleModel(
            "tiny",
            "dense 8 -> 16 -> 4 softmax; builds in seconds, for tests",
            (8,),
            "x",
            "probabilities",
        ),
        ExampleModel(
            "mobilenet_v2",
            "Keras MobileNetV2, 224x224x3 -> 1000 classes",
            (224, 224, 3),
            "images",
            "probabilities",
        ),
        ExampleModel(
            "resnet50",
            "Keras ResNet50, 224x224x3 -> 1000 classes",
            (224, 224, 3),
            "images",
            "probabilities",
        ),
        ExampleModel(
            "inception_v3",
            "Keras InceptionV3, 299x299x3 -> 1000 classes",
            (299, 299, 3),
            "images",
            "probabilities",
        ),
    )
}


def build_models(
    names: list[str], out: Path, *, overwrite: bool = False, seed: int = 0
) -> list[Path]:
    """Build each model into ``out/NAME/1``; returns the version directories written.

    Each model is written to a temporary directory next to its destination and renamed into
    place, so an interrupted build never leaves a half-written SavedModel that ``serve`` would
    try to load.
    """
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise ConfigError(f"unknown model(s) {unknown}; choose from {sorted(CATALOG)}")
    if not names:
        raise ConfigError(f"name at least one model to build: {sorted(CATALOG)}")
    targets = [out / name / "1" for name in names]
    existing = [t for t in targets if t.exists()]
    if existing and not overwrite:
        raise ConfigError(
            f"{', '.join(map(str, existing))} already exist; pass --overwrite to replace"
        )

    from sharedserve.models.tensorflow_models import save_saved_model

    written = []
    for name, target in zip(names, targets, strict=True):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
        try:
            save_saved_model(CATALOG[name], tmp / "model", seed=seed)
            if target.exists():
                shutil.rmtree(target)
            (tmp / "model").rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log.info("built %s -> %s", name, target)
        written.append(target)
    return written

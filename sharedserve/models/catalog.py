"""The example models and how to build them into TF Serving's directory layout.

One catalog for every framework: a model's name means the same architecture whichever framework
builds it, so densities measured on a TensorFlow build and a torch build can be compared. Not
every architecture exists for every framework; each entry says which it has.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sharedserve.enums import Framework
from sharedserve.errors import ConfigError
from sharedserve.framework_output import framework_needed, framework_startup
from sharedserve.models.spec import ExampleModelSpec

__all__ = ["CATALOG", "Built", "ExampleModelSpec", "build", "build_models"]

log = logging.getLogger(__name__)


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


_STAMP = ".sharedserve-build.json"
"""What built ``NAME/1``, kept in the base path beside it (not inside it: the version directory
holds the model's files only), so a second identical build can be recognised and skipped."""


@dataclass(frozen=True)
class Built:
    path: Path
    """The version directory, ``out/NAME/1``."""
    already: bool
    """It existed, built by the same model, framework and seed, and was left as it was."""


def _stamp(name: str, framework: Framework, seed: int) -> dict[str, object]:
    return {"model": name, "framework": framework.value, "seed": seed, "version": 1}


def _identical(target: Path, stamp: dict[str, object]) -> bool:
    # A model without a stamp (built before stamps, or by hand) cannot be told identical.
    try:
        return bool(json.loads((target.parent / _STAMP).read_text()) == stamp)
    except (OSError, ValueError):
        return False


def build_models(
    names: list[str],
    out: Path,
    *,
    overwrite: bool = False,
    seed: int = 0,
    framework: Framework | str = Framework.TENSORFLOW,
) -> list[Path]:
    """``build``'s version directories, one per name, whether built now or already there."""
    built = build(names, out, overwrite=overwrite, seed=seed, framework=framework)
    return [b.path for b in built]


def build(
    names: list[str],
    out: Path,
    *,
    overwrite: bool = False,
    seed: int = 0,
    framework: Framework | str = Framework.TENSORFLOW,
) -> list[Built]:
    """Build each model for ``framework`` into ``out/NAME/1``.

    Each model is written to a temporary directory next to its destination and renamed into
    place, so an interrupted build never leaves a half-written model that ``serve`` would
    try to load. Everything is checked before anything is built. A model already built with
    the same parameters is kept (a README block run twice goes on); one built otherwise, or
    by hand, is replaced only with ``overwrite``.
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
    stamps = [_stamp(name, chosen, seed) for name in names]
    same = {
        t for t, stamp in zip(targets, stamps, strict=True) if t.exists() and _identical(t, stamp)
    }
    existing = [t for t in targets if t.exists() and t not in same]
    if existing and not overwrite:
        raise ConfigError(
            f"{', '.join(map(str, existing))} already exist, built otherwise (another "
            f"framework or seed, or not by this command); pass --overwrite to replace"
        )

    save = _saver(chosen) if any(t not in same for t in targets) else None
    results = []
    for name, target, stamp in zip(names, targets, stamps, strict=True):
        if target in same:
            log.info("%s (%s) already built, identical: %s", name, chosen.value, target)
            results.append(Built(target, already=True))
            continue
        assert save is not None
        made = not target.parent.exists()  # OUT/NAME: removed again if nothing is built in it
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
        try:
            save(CATALOG[name], tmp / "model", seed=seed)
            # The old stamp goes first: an interrupted replacement must not pass as identical.
            (target.parent / _STAMP).unlink(missing_ok=True)
            if target.exists():
                shutil.rmtree(target)
            (tmp / "model").rename(target)
        except BaseException:
            if made:  # it held nothing before this build: no empty folder is left behind
                shutil.rmtree(target.parent, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        (target.parent / _STAMP).write_text(json.dumps(stamp) + "\n")
        log.info("built %s (%s) -> %s", name, chosen.value, target)
        results.append(Built(target, already=False))
    return results


class _Saver(Protocol):
    def __call__(self, spec: ExampleModelSpec, path: Path, *, seed: int = 0) -> None: ...


def _saver(framework: Framework) -> _Saver:
    # Imported only now: each builder imports its framework, which takes seconds.
    if framework is Framework.TORCH:
        with framework_needed("torch"), framework_startup():
            from sharedserve.models.torch_models import save_torchscript

        return save_torchscript
    if framework is Framework.ONNX:  # exported from the torch modules
        with framework_needed("torch"), framework_needed("onnx"), framework_startup():
            from sharedserve.models.onnx_models import save_onnx

        return save_onnx
    if framework is Framework.EXPORT:
        with framework_needed("export"), framework_startup():
            from sharedserve.models.export_models import save_export

        return save_export
    from sharedserve.models.tensorflow_models import save_saved_model

    return save_saved_model

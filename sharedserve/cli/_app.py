"""The typer application every ``sharedserve`` command registers on, and the root options."""

from __future__ import annotations

import logging
import os
import sys
from enum import Enum
from typing import Annotated

import typer

__all__ = ["MODEL_NAMES", "ExampleModel", "app", "models_app"]

app = typer.Typer(
    help="Pack many inference models onto one GPU, and measure how many is too many.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
models_app = typer.Typer(
    help="Example models with RANDOM weights (real compute and memory; meaningless predictions).",
    no_args_is_help=True,
)
app.add_typer(models_app, name="models")


class ExampleModel(str, Enum):
    """The example models, as ``models build`` takes them (its argument's choices); a test keeps
    them in step with ``sharedserve.models.CATALOG``, which this layer does not import at start-up
    (it would load the model builders for every command)."""

    tiny = "tiny"
    mobilenet_v2 = "mobilenet_v2"
    resnet50 = "resnet50"
    inception_v3 = "inception_v3"


MODEL_NAMES = ", ".join(m.value for m in ExampleModel)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # TensorFlow's C++ logging is noisy on CPU-only hosts; the user can still raise it.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@app.callback()
def _root(
    log_level: Annotated[
        str, typer.Option(help="debug, info, warning or error.", envvar="SHAREDSERVE_LOG_LEVEL")
    ] = "info",
) -> None:
    if log_level.lower() not in ("debug", "info", "warning", "error"):
        raise typer.BadParameter("choose debug, info, warning or error", param_hint="--log-level")
    _setup_logging(log_level)

"""``sharedserve models convert``: a model the server can read, written again as ONNX."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sharedserve.cli._app import models_app

__all__: list[str] = []


@models_app.command("convert")
def models_convert(
    model: Annotated[
        Path,
        typer.Argument(help="A model base path (DIR/NAME with version dirs) or model directory."),
    ],
    out: Annotated[Path, typer.Option(help="Output directory: OUT/NAME/VERSION/model.onnx.")],
) -> None:
    """Write a TorchScript model or a SavedModel (its latest version) again as ONNX.

    TorchScript through torch's exporter, with signature.json's names; a SavedModel through
    tf2onnx (pip install 'sharedserve[convert]'). A torch.export program has no converter here
    (torch's needs onnxscript): the command says so. Nothing is downloaded.
    """
    from sharedserve.models import convert_to_onnx
    from sharedserve.server import find_model

    source = find_model(model)
    target = out / source.name / str(source.version)
    convert_to_onnx(source.path, source.framework, target)
    typer.echo(target)

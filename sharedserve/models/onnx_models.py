"""The example architectures as ONNX: the torch modules of ``torch_models``, exported.

One architecture, one set of random weights: the same seed gives the TorchScript build and this
one the same weights, so an ONNX model answers as the TorchScript model it came from, to float
tolerance (what the tests check). The signature needs no side file: the export names the input
and output (``spec.input_name``, ``spec.output_name``) and leaves the batch dimension dynamic.

torch's TorchScript-based exporter (``dynamo=False``), not its default one: the default needs
``onnxscript``, one more dependency, for the same file. It warns that it is deprecated on every
export; that is torch's notice to its users, not this command's, so it is not shown.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import torch

from sharedserve.models.spec import ExampleModelSpec
from sharedserve.models.torch_models import build_module

__all__ = ["MODEL_FILE", "save_onnx"]

MODEL_FILE = "model.onnx"
_OPSET = 17


def save_onnx(spec: ExampleModelSpec, path: Path, *, seed: int = 0) -> None:
    """Export ``spec``'s torch architecture to ``path/model.onnx``, weights inside the file.

    ``path`` must not exist yet (it is created). Seeded on a forked RNG, as ``save_torchscript``.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_module(spec)
    example = torch.zeros(1, *spec.input_shape)
    path.mkdir(parents=True)
    target = path / MODEL_FILE
    batch = {0: "batch"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        torch.onnx.export(
            model,
            (example,),
            str(target),
            dynamo=False,
            input_names=[spec.input_name],
            output_names=[spec.output_name],
            dynamic_axes={spec.input_name: batch, spec.output_name: batch},
            opset_version=_OPSET,
        )
    onnx.checker.check_model(str(target))  # a file onnxruntime would refuse fails the build

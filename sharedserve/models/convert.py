"""``models convert``: a TorchScript model or a SavedModel written again as ONNX (``model.onnx``),
through the standard exporters, where there is one.

TorchScript goes through torch's TorchScript-based exporter (``torch.onnx.export``,
``dynamo=False``, as ``onnx_models``), its input and output names and dynamic dimensions from the
model's ``signature.json``. A SavedModel goes through tf2onnx (the ``[convert]`` extra), run as
a child process with its command line, its documented interface; tf2onnx keeps the
signature's names. Neither downloads anything. A ``torch.export`` program has no converter here:
torch's exporter for programs needs onnxscript, which sharedserve does not install.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from sharedserve.enums import Framework
from sharedserve.errors import ConfigError, SharedServeError
from sharedserve.framework_output import framework_needed, framework_startup

__all__ = ["convert_to_onnx"]

MODEL_FILE = "model.onnx"
_OPSET = 17
_TORCH_DTYPES = {
    "DT_FLOAT": "float32",
    "DT_DOUBLE": "float64",
    "DT_HALF": "float16",
    "DT_INT32": "int32",
    "DT_INT64": "int64",
    "DT_UINT8": "uint8",
    "DT_BOOL": "bool",
}
_NO_CONVERTER = {
    Framework.ONNX: "it is ONNX already",
    Framework.EXPORT: (
        "sharedserve has no converter from a torch.export program (model.pt2) to ONNX: torch's "
        "exporter for programs (torch.onnx.export(..., dynamo=True)) needs onnxscript, which "
        "it does not install; convert the TorchScript model the program came from, or build "
        "the example with `models build --framework onnx`"
    ),
}


def convert_to_onnx(source: Path, framework: Framework, target: Path) -> None:
    """Write the model version in ``source`` (of ``framework``) as ``target/model.onnx``.

    ``target`` must not exist; it appears whole or not at all. ConfigError where no converter
    exists (naming what would be needed), SharedServeError where the converter fails.
    """
    if framework in _NO_CONVERTER:
        raise ConfigError(f"cannot convert {source} to ONNX: {_NO_CONVERTER[framework]}")
    if target.exists():
        raise ConfigError(f"{target} exists already: remove it, or choose another --out")
    if framework is Framework.TENSORFLOW and importlib.util.find_spec("tf2onnx") is None:
        raise ConfigError(
            "converting a SavedModel to ONNX needs tf2onnx, which is not installed: "
            "pip install 'sharedserve[convert]'"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        if framework is Framework.TORCH:
            _from_torchscript(source, work / MODEL_FILE)
        else:
            _from_saved_model(source, work / MODEL_FILE)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _from_torchscript(source: Path, model_file: Path) -> None:
    with framework_needed("torch"), framework_needed("onnx"), framework_startup():
        import onnx
        import torch
    signature = _signature(source / "signature.json")
    inputs, outputs = signature["inputs"], signature["outputs"]
    examples = []
    for name, spec in inputs.items():
        if spec.get("shape") is None or spec["dtype"] not in _TORCH_DTYPES:
            raise ConfigError(
                f"{source}: input {name!r} needs a shape and one of {sorted(_TORCH_DTYPES)} "
                "to be exported (signature.json)"
            )
        shape = [1 if d < 0 else d for d in spec["shape"]]
        examples.append(torch.zeros(shape, dtype=getattr(torch, _TORCH_DTYPES[spec["dtype"]])))
    dynamic = {
        name: {i: f"{name}_{i}" for i, d in enumerate(spec.get("shape") or []) if d < 0}
        for name, spec in {**inputs, **outputs}.items()
    }
    with warnings.catch_warnings():  # torch's notices that TorchScript and its exporter are
        warnings.simplefilter("ignore")  # deprecated: its users', not this command's
        model = torch.jit.load(  # type: ignore[no-untyped-call]
            str(source / "model.pt"), map_location="cpu"
        )
        try:
            torch.onnx.export(
                model,
                tuple(examples),
                str(model_file),
                dynamo=False,
                input_names=list(inputs),
                output_names=list(outputs),
                dynamic_axes={k: v for k, v in dynamic.items() if v},
                opset_version=_OPSET,
            )
        except Exception as e:  # an op the exporter does not know, control flow it cannot trace
            raise SharedServeError(f"torch could not export {source} to ONNX: {e}") from e
    onnx.checker.check_model(str(model_file))


def _signature(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
        inputs, outputs = doc["inputs"], doc["outputs"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{path} cannot be read for the names to export: {e}") from e
    return {"inputs": inputs, "outputs": outputs}


def _from_saved_model(source: Path, model_file: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "tf2onnx.convert",
        "--saved-model",
        str(source),
        "--output",
        str(model_file),
        "--opset",
        str(_OPSET),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not model_file.is_file():
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {result.returncode}"
        raise SharedServeError(f"tf2onnx could not convert {source} to ONNX: {reason}")

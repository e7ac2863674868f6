"""``model.pt2``: a ``torch.export`` program, or an AOTInductor package, served as TorchScript is.

Both are PT2 archives (zip files) under one name; what is inside tells them apart
(``is_aoti_package``): a package holds compiled code under ``data/aotinductor/``, a program
(``torch.export.save``) a serialized graph and its weights. Each is a ``TorchBackend`` that
reads its file its own way; the threads, the ``torch.cuda`` cap, the error mapping and the
memory counters are torch's, set once for the process.

A program names its inputs (``forward``'s arguments) and types them, dynamic dimensions ``-1``;
its outputs are graph nodes (``softmax``), not names a client should see, so they are
``output_0``, ``output_1``... unless a ``signature.json`` beside the file (as TorchScript's)
names them; the sidecar then decides every name, checked against the program's inputs (count,
order, dtypes). Paging is a device copy, as TorchScript's: the program's module keeps its
tensors in host memory while paged out.

A package is compiled code with its weights inside, for one device; it has no names, so it needs
the ``signature.json``. Its weights are not tensors torch can move, so paging out drops the
package and a page-in loads it again from the file (``page_in_from``: ``file``); its footprint on
a host is the file's size.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import torch
from torch.export.passes import move_to_device_pass

from sharedserve.errors import ModelLoadError, ResourceExhausted, SharedServeError
from sharedserve.framework_output import keep_triton_out
from sharedserve.server.version.backends.torch import TorchBackend, _short
from sharedserve.server.version.backends.torch_sidecar import (
    SIGNATURE_FILE,
    check_input_order,
    read_signature_file,
)
from sharedserve.server.version.signature import Signature, TensorSpec, numeric_dtype_name

__all__ = ["EXPORT_FILE", "AotiBackend", "ExportBackend", "is_aoti_package"]

log = logging.getLogger(__name__)

# Written by sharedserve.models.export_models, which this layer may not import.
EXPORT_FILE = "model.pt2"
_SIGNATURE = "serving_default"
_PACKAGE_ENTRY = "/data/aotinductor/"


def is_aoti_package(model_file: Path) -> bool:
    """Whether ``model_file`` is an AOTInductor package (compiled code inside), not a program.
    A file that is no zip at all is neither: the program's load says what is wrong with it."""
    try:
        with zipfile.ZipFile(model_file) as archive:
            return any(_PACKAGE_ENTRY in name for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def _not_an_archive(model_file: Path) -> ModelLoadError | None:
    if zipfile.is_zipfile(model_file):
        return None
    return ModelLoadError(
        f"{model_file} is not a PT2 archive (the zip file torch.export.save or "
        "torch._inductor.aoti_compile_and_package writes): copied in part, or another file "
        "under its name?"
    )


def _dtype_name(dtype: torch.dtype, where: str) -> str:
    try:
        name = numeric_dtype_name(torch.empty(0, dtype=dtype).numpy().dtype)
    except TypeError:  # bfloat16 and others numpy has no type for
        name = None
    if name is None:
        raise ModelLoadError(f"{where} is {dtype}, which the serving APIs cannot carry")
    return name


def _spec(name: str, value: object, where: str) -> TensorSpec:
    if not isinstance(value, torch.Tensor):
        raise ModelLoadError(
            f"{where} is {type(value).__name__}, not a tensor: it cannot be served"
        )
    # A dynamic dimension is a symbol (s0), a fixed one an int.
    shape = tuple(d if isinstance(d, int) else -1 for d in value.shape)
    return TensorSpec(
        name=name, dtype=_dtype_name(value.dtype, where), shape=shape, tensor_name=name
    )


def program_signature(program: torch.export.ExportedProgram, model_file: Path) -> Signature:
    """The signature a program declares: its user inputs by name, its user outputs by order."""
    nodes = {node.name: node for node in program.graph.nodes}
    graph = program.graph_signature
    inputs = {
        name: _spec(name, nodes[name].meta.get("val"), f"{model_file}: input {name!r}")
        for name in graph.user_inputs
        if isinstance(name, str)
    }
    if len(inputs) != len(graph.user_inputs):
        raise ModelLoadError(f"{model_file}: an input of the program is a constant, not a tensor")
    outputs = {}
    for i, name in enumerate(graph.user_outputs):
        key = f"output_{i}"
        value = nodes[name].meta.get("val") if isinstance(name, str) else None
        outputs[key] = _spec(key, value, f"{model_file}: output {i}")
    return Signature(name=_SIGNATURE, inputs=inputs, outputs=outputs)


def _with_sidecar(program: Signature, path: Path) -> Signature:
    """``signature.json``'s signature where there is one, checked against the program's."""
    sidecar_file = path / SIGNATURE_FILE
    if not sidecar_file.is_file():
        return program
    sidecar = read_signature_file(sidecar_file)
    declared, takes = list(sidecar.inputs), list(program.inputs)
    if len(declared) != len(takes) or len(sidecar.outputs) != len(program.outputs):
        raise ModelLoadError(
            f"{sidecar_file} declares inputs {declared} and {len(sidecar.outputs)} output(s); "
            f"the program takes {takes} and returns {len(program.outputs)}"
        )
    check_input_order(sidecar_file, declared, takes, "the program")
    for mine, theirs in zip(sidecar.inputs.values(), program.inputs.values(), strict=True):
        if mine.dtype != theirs.dtype:
            raise ModelLoadError(
                f"{sidecar_file}: input {mine.name!r} is {mine.dtype} but the program's "
                f"{theirs.name!r} is {theirs.dtype}"
            )
    return sidecar


class _Program(TorchBackend):
    """A program run as exported or compiled, not by TorchScript's graph executor: no
    optimised execution to ask for, and nothing compiled on a later call to warm up for."""

    @property
    def warm_up_calls(self) -> int:
        return 1  # runs as exported or compiled: no executor profiles it and compiles later

    def _run(self, args: list[torch.Tensor]) -> object:
        assert self._model is not None
        with torch.inference_mode():
            return self._model(*args)


class ExportBackend(_Program):
    """Serves one ``torch.export`` program (``model.pt2``), paged by device copy."""

    framework = "export"
    model_file = EXPORT_FILE

    def _read(self, device: torch.device) -> tuple[torch.nn.Module, Signature]:
        model_file = self._path / EXPORT_FILE
        refused = _not_an_archive(model_file)
        if refused is not None:
            raise refused
        keep_triton_out()
        try:
            program = torch.export.load(str(model_file))
            if device.type != "cpu":
                # Rewrites the devices the graph names too, which moving the tensors would not.
                program = move_to_device_pass(program, device)
            module = program.module()
        except Exception as e:  # not a program (a package under the name, a newer format), OOM
            raise ModelLoadError(
                f"PyTorch could not load {model_file} as a torch.export program: {_short(e)}"
            ) from e
        signature = _with_sidecar(program_signature(program, model_file), self._path)
        return module, signature


class _Package(torch.nn.Module):
    """An AOTInductor package as the module ``TorchBackend`` calls: no tensors of its own to
    move or count (its weights live in the compiled model)."""

    def __init__(self, package: object) -> None:
        super().__init__()
        self.package = package

    def forward(self, *args: torch.Tensor) -> object:
        if self.package is None:
            raise SharedServeError("the model is paged out")
        return self.package(*args)  # type: ignore[operator]


class AotiBackend(_Program):
    """Serves one AOTInductor package (``model.pt2``), with its ``signature.json``; paged by
    loading it again from the file."""

    framework = "export"
    model_file = EXPORT_FILE
    pages_to_host = False
    page_in_from = "file"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._package_device = torch.device("cpu")
        """The device the package was compiled for, from its metadata once loaded."""

    def _read(self, device: torch.device) -> tuple[torch.nn.Module, Signature]:
        signature = read_signature_file(self._path / SIGNATURE_FILE)
        package = self._load_package()
        # Compiled for one device: the inputs go where its code runs, whatever the host has.
        metadata = package.get_metadata()  # type: ignore[attr-defined]
        self._package_device = torch.device(metadata.get("AOTI_DEVICE_KEY", "cpu"))
        return _Package(package), signature

    def _runs_on(self, device: torch.device) -> torch.device:
        return self._package_device

    def _load_package(self) -> object:
        model_file = self._path / EXPORT_FILE
        keep_triton_out()
        try:
            return torch._inductor.aoti_load_package(str(model_file))
        except torch.cuda.OutOfMemoryError as e:
            raise ResourceExhausted(f"no device memory to load {model_file}: {_short(e)}") from e
        except Exception as e:  # built for another platform, CUDA or torch version
            raise ModelLoadError(
                f"PyTorch could not load {model_file} as an AOTInductor package: {_short(e)}"
            ) from e

    def weight_bytes(self) -> int:
        if self._model is None:
            return 0
        return (self._path / EXPORT_FILE).stat().st_size  # the weights, and code beside them

    def page_out(self) -> None:
        if isinstance(self._model, _Package) and not self._paged_out:
            self._paged_out = True
            self._model.package = None  # the compiled model and its weights go with it
            if self._device.type == "cuda":
                torch.cuda.empty_cache()

    def page_in(self) -> None:
        if not isinstance(self._model, _Package):
            raise SharedServeError("the model is not loaded: page-in needs a paged-out model")
        if self._paged_out:
            try:
                self._model.package = self._load_package()
            except ModelLoadError as e:
                raise SharedServeError(f"the model could not be paged in: {e.message}") from e
            self._paged_out = False

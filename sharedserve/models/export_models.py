"""The example architectures as ``torch.export`` programs: the torch modules of ``torch_models``,
exported and saved with ``torch.export.save`` (``model.pt2``).

One architecture, one set of random weights: the same seed gives the TorchScript build and this
one the same weights, so a program answers as the TorchScript model it came from, to float
tolerance. The batch dimension is exported dynamic (``torch.export.Dim``); the rest are fixed by
the example input. A program names its inputs but not its outputs, so the same ``signature.json``
as TorchScript's goes beside it: clients see the same names whichever file serves.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from sharedserve.models.spec import ExampleModelSpec
from sharedserve.models.torch_models import SIGNATURE_FILE, build_module, signature_document

__all__ = ["MODEL_FILE", "export_program", "save_export"]

MODEL_FILE = "model.pt2"
_EXAMPLE_ROWS = 2  # not 1: torch.export specialises a dimension of size 0 or 1 to a constant


def export_program(spec: ExampleModelSpec, *, seed: int = 0) -> torch.export.ExportedProgram:
    """``spec``'s architecture, seeded on a forked RNG as ``save_torchscript``, exported with a
    dynamic batch dimension."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_module(spec)
    example = torch.zeros(_EXAMPLE_ROWS, *spec.input_shape)
    batch = torch.export.Dim("batch")
    return torch.export.export(model, (example,), dynamic_shapes=({0: batch},))


def save_export(spec: ExampleModelSpec, path: Path, *, seed: int = 0) -> None:
    """Write ``path/model.pt2`` and ``path/signature.json``; ``path`` must not exist yet."""
    program = export_program(spec, seed=seed)
    path.mkdir(parents=True)
    torch.export.save(program, str(path / MODEL_FILE))
    (path / SIGNATURE_FILE).write_text(json.dumps(signature_document(spec), indent=2) + "\n")

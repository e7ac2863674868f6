"""A ``torch.export`` program's signature, read from the program and from a ``signature.json``
beside it, and the load errors of files that are not programs: the real ``tiny`` that ``models
build --framework export`` writes, loaded in this process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sharedserve.errors import ModelLoadError
from sharedserve.server.version.backends.torch_export import ExportBackend, is_aoti_package
from tests.support.tiny_apis import ROWS, TOLERANCE

pytestmark = [
    pytest.mark.tensorflow,  # tiny_apis: TF Serving's client
    pytest.mark.torch,
    pytest.mark.filterwarnings("ignore:`torch.jit"),
]


@pytest.fixture
def version(export_models_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "tiny" / "1"
    shutil.copytree(export_models_dir / "tiny" / "1", copy)
    return copy


def _loaded(version: Path) -> ExportBackend:
    backend = ExportBackend(version)
    backend.load()
    return backend


def test_without_a_sidecar_inputs_are_the_programs_and_outputs_numbered(version: Path) -> None:
    named = _loaded(version)
    expected = named.predict(named.signatures()["serving_default"], {"x": ROWS})["probabilities"]
    (version / "signature.json").unlink()
    backend = _loaded(version)
    signature = backend.signatures()["serving_default"]
    assert [(s.name, s.dtype, s.shape) for s in signature.inputs.values()] == [
        ("x", "DT_FLOAT", (-1, 8))  # forward's argument, its batch exported dynamic
    ]
    assert [(s.name, s.dtype, s.shape) for s in signature.outputs.values()] == [
        ("output_0", "DT_FLOAT", (-1, 4))
    ]
    answer = backend.predict(signature, {"x": ROWS})["output_0"]
    np.testing.assert_allclose(answer, expected, **TOLERANCE)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda doc: doc["inputs"].update(y={"dtype": "DT_FLOAT"}),
            r"declares inputs \['x', 'y'\] and 1 output\(s\); the program takes \['x'\]",
        ),
        (
            lambda doc: doc["inputs"]["x"].update(dtype="DT_INT64"),
            r"input 'x' is DT_INT64 but the program's 'x' is DT_FLOAT",
        ),
    ],
    ids=["inputs", "dtype"],
)
def test_a_sidecar_that_disagrees_with_the_program_is_refused(
    version: Path, change: object, message: str
) -> None:
    doc = json.loads((version / "signature.json").read_text())
    change(doc)  # type: ignore[operator]
    (version / "signature.json").write_text(json.dumps(doc))
    with pytest.raises(ModelLoadError, match=message):
        _loaded(version)


def test_files_that_are_not_programs_are_refused_with_their_reason(
    version: Path, torch_models_dir: Path
) -> None:
    program = version / "model.pt2"
    assert not is_aoti_package(program)
    program.write_bytes(b"not a zip\n")
    with pytest.raises(ModelLoadError, match=r"model.pt2 is not a PT2 archive \(the zip file"):
        _loaded(version)
    assert not is_aoti_package(program)  # neither kind: the program's load says why
    # A zip, but TorchScript's: renamed, not converted.
    shutil.copy(torch_models_dir / "tiny" / "1" / "model.pt", program)
    with pytest.raises(ModelLoadError, match=r"could not load .*model.pt2 as a torch.export"):
        _loaded(version)

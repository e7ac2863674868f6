"""What the backends measure of their own memory, and paging out and back in, on the real
``tiny`` of each framework built once per session by ``models build``.

On a host without a GPU the budgets rest on these figures: the model's tensors' bytes
(``weight_bytes``) and a warm-up's inputs plus outputs (``warm_up``'s result); the GPU's
allocator counters (``device_memory``) are None. Each figure is checked against one computed
here another way: torch's ``state_dict`` of the file loaded by hand, Keras ``tiny``'s layer sizes.
"""

from __future__ import annotations

import shutil
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from sharedserve.errors import SharedServeError
from sharedserve.server.version.backends.base import Backend, warm_up
from sharedserve.server.version.backends.onnx import OnnxBackend
from sharedserve.server.version.backends.tensorflow import TensorFlowBackend
from sharedserve.server.version.backends.torch import TorchBackend
from sharedserve.server.version.backends.torch_export import ExportBackend

# TorchScript loads in this process, where pytest makes warnings errors; torch warns that its
# own torch.jit is deprecated (a served process only logs it).
pytestmark = [
    pytest.mark.tensorflow,
    pytest.mark.torch,
    pytest.mark.onnx,
    pytest.mark.filterwarnings("ignore:`torch.jit"),
]

# tiny: 8 features -> Dense/Linear 16 -> 4 classes (sharedserve/models/*_models.py), float32.
FEATURES, HIDDEN, CLASSES, FLOAT = 8, 16, 4, 4
TINY_WEIGHT_BYTES = ((FEATURES * HIDDEN + HIDDEN) + (HIDDEN * CLASSES + CLASSES)) * FLOAT
ROWS = np.array(
    [[0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]],
    dtype=np.float32,
)


@pytest.fixture(params=["tensorflow", "torch", "onnx", "export"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A freshly loaded ``tiny`` of each framework: paging changes its state."""
    if request.param == "tensorflow":
        loaded: Backend = TensorFlowBackend(request.getfixturevalue("models_dir") / "tiny" / "1")
    elif request.param == "onnx":
        loaded = OnnxBackend(request.getfixturevalue("onnx_models_dir") / "tiny" / "1")
    elif request.param == "export":
        loaded = ExportBackend(request.getfixturevalue("export_models_dir") / "tiny" / "1")
    else:
        loaded = TorchBackend(request.getfixturevalue("torch_models_dir") / "tiny" / "1")
    loaded.load()
    yield loaded
    loaded.unload()


def predict(backend: Backend) -> np.ndarray:
    signature = backend.signatures()["serving_default"]
    return backend.predict(signature, {"x": ROWS})["probabilities"]


def test_torch_weights_are_its_parameters_and_buffers(torch_models_dir: Path) -> None:
    version = torch_models_dir / "tiny" / "1"
    by_hand = torch.jit.load(str(version / "model.pt"))  # type: ignore[no-untyped-call]
    expected = sum(t.numel() * t.element_size() for t in by_hand.state_dict().values())
    backend = TorchBackend(version)
    assert backend.weight_bytes() == 0  # not loaded yet
    backend.load()
    assert backend.weight_bytes() == expected == TINY_WEIGHT_BYTES


def test_tensorflow_weights_are_its_variables(models_dir: Path) -> None:
    backend = TensorFlowBackend(models_dir / "tiny" / "1")
    assert backend.weight_bytes() == 0
    backend.load()
    assert backend.weight_bytes() == TINY_WEIGHT_BYTES
    backend.unload()
    assert backend.weight_bytes() == 0


def test_warm_up_returns_its_batch_bytes(backend: Backend) -> None:
    # One row in is 8 floats, one row out 4: a batch of `rows` moves rows * 12 floats.
    assert warm_up(backend) == 1 * (FEATURES + CLASSES) * FLOAT
    assert warm_up(backend, rows=4) == 4 * (FEATURES + CLASSES) * FLOAT


def test_paged_out_and_back_in_answers_the_same(backend: Backend) -> None:
    before = predict(backend)
    backend.page_out()
    backend.page_out()  # twice is harmless: the caller need not track it
    with pytest.raises(SharedServeError, match="paged out"):
        predict(backend)
    backend.page_in()
    np.testing.assert_array_equal(predict(backend), before)
    backend.page_in()  # resident already: nothing to do
    np.testing.assert_array_equal(predict(backend), before)


@pytest.mark.parametrize("kind", ["torch", "export"])
def test_torch_keeps_its_weights_while_paged_out(kind: str, request: pytest.FixtureRequest) -> None:
    built = request.getfixturevalue(f"{kind}_models_dir") / "tiny" / "1"
    backend = TorchBackend(built) if kind == "torch" else ExportBackend(built)
    backend.load()
    assert backend.weight_bytes() == TINY_WEIGHT_BYTES  # the program's parameters, as the module's
    assert backend.pages_to_host
    backend.page_out()
    # In host memory, not gone: what a page-in copies back.
    assert backend.weight_bytes() == TINY_WEIGHT_BYTES


def test_tensorflow_page_out_drops_the_model(models_dir: Path) -> None:
    backend = TensorFlowBackend(models_dir / "tiny" / "1")
    backend.load()
    assert not backend.pages_to_host
    # The loaded SavedModel itself must become garbage (and be collected): only then does
    # TensorFlow free its variables.
    loaded = weakref.ref(backend._loaded)
    backend.page_out()
    assert loaded() is None
    assert backend.weight_bytes() == 0
    backend.page_in()
    assert backend.weight_bytes() == TINY_WEIGHT_BYTES


def test_no_device_counters_off_the_gpu(backend: Backend) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: its counters are read, tested by the GPU kit")
    assert backend.device_memory() is None
    backend.reset_peak()  # a no-op, not an error
    assert backend.device_memory() is None


def test_onnx_pages_in_from_the_bytes_it_kept_not_the_file(
    onnx_models_dir: Path, tmp_path: Path
) -> None:
    version = tmp_path / "1"
    shutil.copytree(onnx_models_dir / "tiny" / "1", version)
    backend = OnnxBackend(version)
    assert backend.weight_bytes() == 0 and not backend.cap_memory(None)
    backend.load()
    # The file: its initializers (the weights) and a graph small beside them.
    assert TINY_WEIGHT_BYTES < backend.weight_bytes() == (version / "model.onnx").stat().st_size
    before = predict(backend)
    (version / "model.onnx").unlink()  # a page-in that read the file would fail now
    backend.page_out()
    assert backend._session is None  # what onnxruntime holds for it is let go of
    backend.page_in()
    np.testing.assert_array_equal(predict(backend), before)
    assert backend.page_in_from == "mapped_file"


def _mapping_rss_kib(path: Path) -> list[int]:
    """The resident kB of each of this process's mappings of ``path`` (/proc/self/smaps)."""
    found, inside = [], False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            inside = line.endswith(str(path)) or line.endswith(f"{path} (deleted)")
        elif inside and fields[0] == "Rss:":
            found.append(int(fields[1]))
    return found


def test_onnx_keeps_its_file_mapped_without_host_memory_of_its_own(
    onnx_models_dir: Path, tmp_path: Path
) -> None:
    version = tmp_path / "1"
    shutil.copytree(onnx_models_dir / "tiny" / "1", version)
    model_file = version / "model.onnx"
    backend = OnnxBackend(version)
    backend.load()
    before = predict(backend)
    # Mapped, but none of it resident in this process: the session holds the weights once.
    assert _mapping_rss_kib(model_file.resolve()) == [0]
    # A new file renamed over it, as a new version's files arrive: the page-in is the model
    # that was loaded, not the file now at the path.
    proto = onnx.load(str(model_file))
    weights = proto.graph.initializer[0]
    changed = onnx.numpy_helper.to_array(weights) + 1
    weights.CopyFrom(onnx.numpy_helper.from_array(changed, weights.name))
    onnx.save(proto, str(tmp_path / "other.onnx"))
    (tmp_path / "other.onnx").rename(model_file)
    backend.page_out()
    backend.page_in()
    np.testing.assert_array_equal(predict(backend), before)
    fresh = OnnxBackend(version)
    fresh.load()
    assert not np.array_equal(predict(fresh), before)  # the file at the path is another model
    fresh.unload()
    backend.unload()
    assert _mapping_rss_kib(model_file.resolve()) == []  # unmapped, the replaced file's too


def test_onnx_weights_in_external_data_are_paged_in_from_the_files(
    onnx_models_dir: Path, tmp_path: Path
) -> None:
    version = tmp_path / "1"
    version.mkdir()
    model = onnx.load(str(onnx_models_dir / "tiny" / "1" / "model.onnx"))
    onnx.save_model(
        model,
        str(version / "model.onnx"),
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    backend = OnnxBackend(version)
    backend.load()
    assert backend.page_in_from == "file"  # the bytes of model.onnx hold no weights
    assert backend.weight_bytes() > TINY_WEIGHT_BYTES > (version / "model.onnx").stat().st_size
    before = predict(backend)
    backend.page_out()
    backend.page_in()
    np.testing.assert_array_equal(predict(backend), before)


def test_page_in_of_an_unloaded_torch_model_is_refused(torch_models_dir: Path) -> None:
    # A device copy needs the model in host memory; reading the file is a load, which the
    # caller counts apart (a cold start).
    with pytest.raises(SharedServeError, match="not loaded"):
        TorchBackend(torch_models_dir / "tiny" / "1").page_in()

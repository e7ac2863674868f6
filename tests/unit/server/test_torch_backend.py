"""The torch backend against real TorchScript models, in process (torch needs no server process).

``tiny`` is built once per module with ``build_models(framework="torch")``; small purpose-built
modules cover what the example models cannot (several inputs and outputs, errors raised inside
the model). Only CUDA is out of reach here: the OOM path is driven by a model that raises
torch's out-of-memory message, and the GPU cap by a machine without a GPU.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from sharedserve.contract import GpuShare
from sharedserve.enums import Framework
from sharedserve.errors import (
    ConfigError,
    InvalidInput,
    ModelLoadError,
    ResourceExhausted,
    SharedServeError,
)
from sharedserve.limits.gpu import CapSource, GpuCap
from sharedserve.models.catalog import build_models
from sharedserve.server.inference.validate import check_inputs
from sharedserve.server.version.backends.base import RuntimeConfig, warm_up
from sharedserve.server.version.backends.torch import TorchBackend
from sharedserve.server.version.signature import Signature, TensorSpec
from sharedserve.server.version.source import find_model

# torch deprecates TorchScript in favour of torch.export and warns on script, save and load;
# sharedserve writes and serves it knowingly.
pytestmark = [
    pytest.mark.torch,
    pytest.mark.filterwarnings(r"ignore:`torch\.jit\.(script|save|load)` is deprecated"),
]

NO_CAP = GpuCap(GpuShare(None), CapSource.NONE, None)
TINY_SIGNATURE = {
    "signature_name": "serving_default",
    "inputs": {"x": {"dtype": "DT_FLOAT", "shape": [-1, 8]}},
    "outputs": {"probabilities": {"dtype": "DT_FLOAT", "shape": [-1, 4]}},
}


def spec(dtype: str = "DT_FLOAT", shape: object = None) -> dict[str, object]:
    return {"dtype": dtype, "shape": [-1] if shape is None else shape}


def with_inputs(**inputs: object) -> dict[str, object]:
    return {**TINY_SIGNATURE, "inputs": inputs}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("models")
    (version,) = build_models(["tiny"], out, framework="torch")
    assert version == out / "tiny" / "1"
    return version


@pytest.fixture(scope="module")
def tiny(tiny_dir: Path) -> TorchBackend:
    backend = TorchBackend(tiny_dir)
    backend.load()
    return backend


def save_model(module: nn.Module, path: Path, sidecar: dict[str, object]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(module), str(path / "model.pt"))
    (path / "signature.json").write_text(json.dumps(sidecar))
    return path


def test_build_writes_torchscript_and_sidecar(tiny_dir: Path) -> None:
    assert sorted(p.name for p in tiny_dir.iterdir()) == ["model.pt", "signature.json"]
    assert json.loads((tiny_dir / "signature.json").read_text()) == TINY_SIGNATURE
    assert not list(tiny_dir.parent.glob(".tiny-*")), "temporary build directory left behind"


def test_signatures_come_from_the_sidecar(tiny: TorchBackend) -> None:
    assert tiny.signatures() == {
        "serving_default": Signature(
            name="serving_default",
            inputs={"x": TensorSpec("x", "DT_FLOAT", (-1, 8), "x")},
            outputs={
                "probabilities": TensorSpec("probabilities", "DT_FLOAT", (-1, 4), "probabilities")
            },
        )
    }


def test_predict_matches_the_same_math_in_torch(tiny: TorchBackend, tiny_dir: Path) -> None:
    params = dict(torch.jit.load(str(tiny_dir / "model.pt")).named_parameters())
    x = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)
    hidden = torch.relu(torch.from_numpy(x) @ params["hidden.weight"].T + params["hidden.bias"])
    logits = hidden @ params["out.weight"].T + params["out.bias"]
    expected = torch.softmax(logits, dim=1).detach().numpy()

    outputs = tiny.predict(tiny.signatures()["serving_default"], {"x": x})

    assert list(outputs) == ["probabilities"]
    assert outputs["probabilities"].dtype == np.float32
    np.testing.assert_allclose(outputs["probabilities"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outputs["probabilities"].sum(axis=1), 1.0, rtol=1e-5)


def test_build_is_seeded(tmp_path: Path, tiny_dir: Path) -> None:
    (again,) = build_models(["tiny"], tmp_path / "a", framework="torch", seed=0)
    (other,) = build_models(["tiny"], tmp_path / "b", framework="torch", seed=1)
    weights = [
        torch.jit.load(str(d / "model.pt")).state_dict()["hidden.weight"]
        for d in (tiny_dir, again, other)
    ]
    assert torch.equal(weights[0], weights[1])
    assert not torch.equal(weights[0], weights[2])


def test_integer_input_is_cast_to_the_declared_float(tiny: TorchBackend) -> None:
    outputs = tiny.predict(
        tiny.signatures()["serving_default"], {"x": np.ones((2, 8), dtype=np.int64)}
    )
    assert outputs["probabilities"].shape == (2, 4)


@pytest.mark.parametrize(
    ("inputs", "fragment"),
    [
        pytest.param({"x": np.zeros((2, 7), np.float32)}, "expected shape [-1, 8], got [2, 7]"),
        pytest.param({"x": np.zeros(8, np.float32)}, "expected shape [-1, 8], got [8]"),
        pytest.param(
            {"x": np.full((1, 8), b"a", dtype=object)}, "expected DT_FLOAT, got DT_STRING"
        ),
        pytest.param({"x": np.zeros((1, 8), np.complex64)}, "expected DT_FLOAT"),
        pytest.param({}, "missing input 'x'"),
        pytest.param({"x": np.zeros((1, 8), np.float32), "y": np.zeros(1)}, "unknown input"),
    ],
)
def test_bad_inputs_are_invalid_input(
    tiny: TorchBackend, inputs: dict[str, np.ndarray], fragment: str
) -> None:
    # The server's one validator refuses them before they reach the backend.
    with pytest.raises(InvalidInput) as info:
        check_inputs(tiny.signatures()["serving_default"], inputs)
    assert fragment in info.value.message


def test_shape_error_inside_the_model_is_invalid_input(tmp_path: Path, tiny_dir: Path) -> None:
    # A sidecar looser than the model lets a wrong shape reach torch, which raises RuntimeError.
    shutil.copy(tiny_dir / "model.pt", tmp_path / "model.pt")
    loose = {**TINY_SIGNATURE, "inputs": {"x": {"dtype": "DT_FLOAT", "shape": [-1, -1]}}}
    (tmp_path / "signature.json").write_text(json.dumps(loose))
    backend = TorchBackend(tmp_path)
    backend.load()
    with pytest.raises(InvalidInput) as info:
        backend.predict(
            backend.signatures()["serving_default"], {"x": np.zeros((2, 7), np.float32)}
        )
    assert "shapes cannot be multiplied" in info.value.message
    assert "TorchScript" not in info.value.message  # the serialized traceback is dropped


def test_warmup_runs_every_signature(tiny: TorchBackend, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        warm_up(tiny)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("sidecar", "fragment"),
    [
        pytest.param(None, "has no signature.json", id="missing"),
        pytest.param("{not json", "not valid JSON", id="invalid-json"),
        pytest.param("[1, 2]", "must hold a JSON object", id="not-an-object"),
        pytest.param('{"inputs": {}, "inputs": {}}', "duplicate keys ['inputs']", id="duplicate"),
        pytest.param({**TINY_SIGNATURE, "extra": 1}, "unknown keys ['extra']", id="unknown-key"),
        pytest.param({**TINY_SIGNATURE, "signature_name": ""}, "'signature_name'", id="empty-name"),
        pytest.param({**TINY_SIGNATURE, "inputs": {}}, "'inputs' must be a non-empty", id="no-in"),
        pytest.param({"inputs": TINY_SIGNATURE["inputs"]}, "'outputs' must be", id="no-outputs"),
        pytest.param(
            with_inputs(x={"dtype": "DT_FLOAT", "rank": 2}),
            'inputs.x must be an object with "dtype"',
            id="unknown-spec-key",
        ),
        pytest.param(with_inputs(x=spec("float32")), "dtype 'float32' cannot", id="np-dtype"),
        pytest.param(with_inputs(x=spec("DT_STRING")), "dtype 'DT_STRING' cannot", id="string"),
        pytest.param(with_inputs(x=spec(shape=[-2, 8])), "shape must be a list", id="bad-dim"),
        pytest.param(with_inputs(x=spec(shape="[-1]")), "shape must be a list", id="shape-str"),
        pytest.param(
            with_inputs(x=spec(), y=spec()),
            "forward takes ['x'] but signature.json declares 2 input(s)",
            id="more-inputs-than-forward",
        ),
    ],
)
def test_bad_sidecar_is_model_load_error(
    tmp_path: Path, tiny_dir: Path, sidecar: object, fragment: str
) -> None:
    shutil.copy(tiny_dir / "model.pt", tmp_path / "model.pt")
    if sidecar is not None:
        text = sidecar if isinstance(sidecar, str) else json.dumps(sidecar)
        (tmp_path / "signature.json").write_text(text)
    with pytest.raises(ModelLoadError) as info:
        TorchBackend(tmp_path).load()
    assert fragment in info.value.message


def test_corrupt_model_file_is_model_load_error(tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_bytes(b"not a zip archive")
    (tmp_path / "signature.json").write_text(json.dumps(TINY_SIGNATURE))
    with pytest.raises(ModelLoadError, match="PyTorch could not load"):
        TorchBackend(tmp_path).load()


class TwoInTwoOut(nn.Module):
    def forward(self, a: Tensor, b: Tensor) -> dict[str, Tensor]:
        return {"difference": a - b, "sum": a + b}


class TwoOutTuple(nn.Module):
    def forward(self, a: Tensor) -> tuple[Tensor, Tensor]:
        return a * 2, a.to(torch.int32)


class Raises(nn.Module):
    def forward(self, a: Tensor) -> Tensor:
        if bool(a.sum() > 0):
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if bool(a.sum() < 0):
            raise RuntimeError("the model's own failure")
        return a


def test_inputs_go_positionally_and_dict_outputs_by_name(tmp_path: Path) -> None:
    sidecar = {
        "inputs": {"a": spec(), "b": spec()},
        "outputs": {"sum": spec(), "difference": spec()},
    }
    backend = TorchBackend(save_model(TwoInTwoOut(), tmp_path, sidecar))
    backend.load()
    a, b = np.array([5.0, 1.0], np.float32), np.array([2.0, 3.0], np.float32)
    outputs = backend.predict(backend.signatures()["serving_default"], {"b": b, "a": a})
    assert list(outputs) == ["sum", "difference"]
    np.testing.assert_array_equal(outputs["difference"], a - b)


def test_sidecar_listing_forward_arguments_out_of_order_is_refused(tmp_path: Path) -> None:
    sidecar = {"inputs": {"b": spec(), "a": spec()}, "outputs": {"sum": spec()}}
    with pytest.raises(ModelLoadError, match="forward's order"):
        TorchBackend(save_model(TwoInTwoOut(), tmp_path, sidecar)).load()


def test_tuple_outputs_by_order(tmp_path: Path) -> None:
    sidecar = {"inputs": {"a": spec()}, "outputs": {"double": spec(), "whole": spec("DT_INT32")}}
    backend = TorchBackend(save_model(TwoOutTuple(), tmp_path, sidecar))
    backend.load()
    outputs = backend.predict(
        backend.signatures()["serving_default"], {"a": np.array([1.5], np.float32)}
    )
    assert outputs["double"].tolist() == [3.0]
    assert outputs["whole"].dtype == np.int32


def test_output_count_mismatch_is_a_server_error(tmp_path: Path) -> None:
    sidecar = {"inputs": {"a": spec()}, "outputs": {"only": spec()}}
    backend = TorchBackend(save_model(TwoOutTuple(), tmp_path, sidecar))
    backend.load()
    with pytest.raises(SharedServeError, match="returned 2 outputs") as info:
        backend.predict(backend.signatures()["serving_default"], {"a": np.zeros(1, np.float32)})
    assert info.value.http_status == 500


def test_out_of_memory_is_resource_exhausted_and_serving_goes_on(tmp_path: Path) -> None:
    sidecar = {"inputs": {"a": spec()}, "outputs": {"a": spec()}}
    backend = TorchBackend(save_model(Raises(), tmp_path, sidecar))
    backend.load()
    with pytest.raises(ResourceExhausted) as info:
        backend.predict(backend.signatures()["serving_default"], {"a": np.ones(1, np.float32)})
    assert info.value.message.endswith("CUDA out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(SharedServeError, match="model execution failed") as other:
        backend.predict(backend.signatures()["serving_default"], {"a": -np.ones(1, np.float32)})
    assert type(other.value) is SharedServeError
    assert backend.predict(backend.signatures()["serving_default"], {"a": np.zeros(1, np.float32)})[
        "a"
    ].tolist() == [0]


@pytest.fixture
def restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("restore_threads")
def test_configure_sets_threads_and_reports_them(tiny_dir: Path) -> None:
    applied = TorchBackend(tiny_dir).configure(RuntimeConfig(NO_CAP, 1, 1))
    assert applied.intra_op_threads == torch.get_num_threads() == 1
    # This process may have run parallel work already, which fixes the inter-op pool: the
    # figure reported must be torch's, whatever it is.
    assert applied.inter_op_threads == torch.get_num_interop_threads()
    assert applied.gpu_cap == NO_CAP


def test_configure_in_a_fresh_process_sets_both_pools(tiny_dir: Path) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from sharedserve.contract import GpuShare\n"
        "from sharedserve.limits.gpu import CapSource, GpuCap\n"
        "from sharedserve.server.version.backends.base import RuntimeConfig\n"
        "from sharedserve.server.version.backends.torch import TorchBackend\n"
        "cap = GpuCap(GpuShare(None), CapSource.NONE, None)\n"
        "a = TorchBackend(Path(sys.argv[1])).configure(RuntimeConfig(cap, 1, 3))\n"
        "print(a.intra_op_threads, a.inter_op_threads)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tiny_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["1", "3"]


@pytest.mark.usefixtures("restore_threads")
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cap_without_a_gpu_is_recorded_not_enforced(
    tiny_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cap = GpuCap(GpuShare("GPU-fake", 0.25, 4096), CapSource.FLAG, 16384)
    applied = TorchBackend(tiny_dir).configure(RuntimeConfig(cap, 1, 1))
    assert applied.gpu_cap == cap  # enforced stays False
    assert "NOT enforced" in caplog.text


def test_mobilenet_v2_predicts_a_distribution(tmp_path: Path) -> None:
    (version,) = build_models(["mobilenet_v2"], tmp_path, framework="torch")
    backend = TorchBackend(version)
    backend.load()
    assert backend.signatures()["serving_default"].inputs["images"].shape == (-1, 224, 224, 3)
    images = np.random.default_rng(0).random((1, 224, 224, 3), dtype=np.float32)
    probabilities = backend.predict(backend.signatures()["serving_default"], {"images": images})[
        "probabilities"
    ]
    assert probabilities.shape == (1, 1000)
    assert probabilities.sum() == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize(
    ("names", "framework", "fragment"),
    [
        pytest.param(["tiny"], "jax", "unknown framework 'jax'", id="unknown-framework"),
        pytest.param(
            ["tiny", "inception_v3"],
            "torch",
            "['inception_v3'] cannot be built for torch",
            id="not-for-torch",
        ),
    ],
)
def test_build_refuses_before_building(
    tmp_path: Path, names: list[str], framework: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        build_models(names, tmp_path, framework=framework)
    assert fragment in info.value.message
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("files", "arg", "expected"),
    [
        pytest.param(["m/1/model.pt", "m/1/signature.json"], "m", ("m", 1, "m/1"), id="versioned"),
        pytest.param(["m/1/model.pt", "m/3/model.pt"], "m", ("m", 3, "m/3"), id="latest"),
        pytest.param(["bare/model.pt"], "bare", ("bare", 1, "bare"), id="bare"),
    ],
)
def test_find_model_recognises_torchscript(
    tmp_path: Path, files: list[str], arg: str, expected: tuple[str, int, str]
) -> None:
    for file in files:
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file).touch()
    source = find_model(tmp_path / arg)
    assert (source.name, source.version, source.path) == (
        expected[0],
        expected[1],
        (tmp_path / expected[2]).resolve(),
    )
    assert source.framework is Framework.TORCH


def test_find_model_refuses_a_directory_with_both_frameworks(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    for file in ("saved_model.pb", "model.pt"):
        (tmp_path / "m" / "1" / file).touch()
    with pytest.raises(ConfigError, match=r"SavedModel \(saved_model.pb\) and a TorchScript"):
        find_model(tmp_path / "m")


def test_no_allocator_figure_off_the_gpu(tiny: TorchBackend) -> None:
    # On the CPU there is no GPU pool to report: None, never a made-up zero.
    assert tiny.allocator_reserved_bytes() is None


def test_allocator_figure_is_the_processs_before_any_model_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /metrics reads the pool through the process's first backend, which never loads a model:
    # on a GPU it must still report the pool of the device models load onto.
    from sharedserve.server.version.backends import torch as backend_module

    monkeypatch.setattr(backend_module, "_serving_device", lambda: torch.device("cuda:0"))
    asked: list[torch.device] = []

    def reserved(device: torch.device) -> int:
        asked.append(device)
        return 3 << 20

    monkeypatch.setattr(torch.cuda, "memory_reserved", reserved)
    unloaded = TorchBackend(tmp_path / "never-loaded")
    assert unloaded.allocator_reserved_bytes() == 3 << 20
    assert asked == [torch.device("cuda:0")]


def test_warm_up_runs_past_the_executors_profiled_calls(
    tiny: TorchBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The profiling executor optimises (and on a GPU compiles) on the call after its profiled
    # ones: the warm-up makes that call, so that no request does.
    from sharedserve.server.version.backends import torch as backend_module

    monkeypatch.setattr(backend_module, "_optimize", True)
    previous = torch._C._jit_set_num_profiled_runs(2)
    try:
        assert tiny.warm_up_calls == 3
        calls: list[int] = []
        real = tiny.predict
        monkeypatch.setattr(tiny, "predict", lambda s, i: calls.append(1) or real(s, i))
        warm_up(tiny)
        assert len(calls) == 3 * len(tiny.signatures())
    finally:
        torch._C._jit_set_num_profiled_runs(previous)
    monkeypatch.setattr(backend_module, "_optimize", False)
    assert tiny.warm_up_calls == 1  # the simple executor runs the graph as it is

"""`sharedserve serve` given many models: TF Serving's model config file, as a TF Serving user
writes it, naming a TensorFlow and a TorchScript model served by one process; and what `serve`
refuses before it starts when the models are named wrongly (models that cannot load at start:
tests/integration/server/test_start_failures.py).

Routing by name, version and label on every wire format is
tests/integration/server/test_multimodel.py's (in process); this is the command a user runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sharedserve.server import SPARE_THREADS
from tests.support.cli import invoke
from tests.support.servers import Server

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow, pytest.mark.torch]

ROW = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]


@pytest.fixture(scope="module")
def server(
    models_dir: Path, torch_models_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("serve-many")
    config = work / "models.config"
    config.write_text(
        "model_config_list {\n"
        f"  config {{ name: 'tf-tiny' base_path: '{models_dir / 'tiny'}' "
        "model_platform: 'tensorflow' }\n"
        f"  config {{ name: 'torch-tiny' base_path: '{torch_models_dir / 'tiny'}' "
        "model_platform: 'pytorch' }\n"
        "}\n"
    )
    served = Server(
        None,
        work / "serve.log",
        ["--model-config-file", str(config), "--max-inflight-per-model", "64"],
    )
    try:
        served.wait_available("tf-tiny")
        served.wait_available("torch-tiny")
        yield served
    finally:
        served.stop()


def test_one_process_serves_both_frameworks_by_name(server: Server) -> None:
    answers = {}
    for name in ("tf-tiny", "torch-tiny"):
        response = server.client.post(f"/v1/models/{name}:predict", json={"instances": [ROW]})
        assert response.status_code == 200, response.text
        answers[name] = np.asarray(response.json()["predictions"])
        assert server.client.get(f"/v2/models/{name}/ready").status_code == 200
    # Same architecture, separately built random weights: same shape, both real answers.
    assert answers["tf-tiny"].shape == answers["torch-tiny"].shape
    assert server.client.get("/v2/health/ready").status_code == 200
    missing = server.client.post("/v1/models/tiny:predict", json={"instances": [ROW]})
    assert missing.status_code == 404, missing.text


def test_limits_show_each_models_share_and_memory(server: Server) -> None:
    limits = server.client.get("/sharedserve/v1/limits").json()
    models = limits["models"]
    assert {name: (m["weight"], m["max_inflight"]) for name, m in models.items()} == {
        "tf-tiny": (1.0, 64),
        "torch-tiny": (1.0, 64),
    }
    # A thread of the first framework's inter-op pool per model call that may run.
    assert limits["inter_op_threads"] == limits["model_call_slots"] + SPARE_THREADS
    tf, torch = models["tf-tiny"]["versions"]["1"], models["torch-tiny"]["versions"]["1"]
    for version in (tf, torch):
        assert version["state"] == "resident"
        assert version["measured_on"] == "host"  # no GPU here: the tensors' bytes
        assert version["budget_mib"] is None
        assert version["peak_mib"] >= version["weights_mib"] > 0
        assert version["held_mib"] == version["peak_mib"]  # no budget: its measured peak
    # The same architecture in float32, counted by each framework: the same weights.
    assert tf["weights_mib"] == torch["weights_mib"]
    assert limits["memory"]["paging"] == "off"
    assert limits["memory"]["held_mib"] == pytest.approx(
        tf["held_mib"] + torch["held_mib"], abs=1e-5
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param([], "give one of --model", id="none"),
        pytest.param(["--model", "m", "--model-repository", "r"], "got --model and", id="two"),
        pytest.param(["--model-config-file", "c", "--name", "x"], "--name names", id="name"),
    ],
)
def test_models_named_once_and_only_once(args: list[str], fragment: str) -> None:
    result = invoke("serve", *args)
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr


def test_a_repository_with_no_model_that_can_be_read_is_refused_naming_each(
    tmp_path: Path,
) -> None:
    # One broken model among others is reported while they serve (test_start_failures.py).
    (tmp_path / "empty-model").mkdir()
    result = invoke("serve", "--model-repository", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert "none of the 1 models named can be read" in result.stderr
    assert "'empty-model' holds no model" in result.stderr


def test_an_empty_repository_serves_nothing_and_says_so(tmp_path: Path) -> None:
    result = invoke("serve", "--model-repository", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert "no model to serve" in result.stderr


def test_a_config_file_error_names_its_line(tmp_path: Path) -> None:
    config = tmp_path / "models.config"
    config.write_text("model_config_list {\n  config { name: 'a' base_pth: '/x' }\n}\n")
    result = invoke("serve", "--model-config-file", str(config))
    assert result.exit_code == 2, result.output
    assert "models.config" in result.stderr and ":2:" in result.stderr, result.stderr

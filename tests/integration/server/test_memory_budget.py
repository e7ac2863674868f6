"""Per-model memory budgets in one `sharedserve serve --model-repository` process, as a user sets
them: ``gpu_memory_mib`` in each model's ``sharedserve.yaml``, counted against
``--gpu-memory-mib`` (recorded, not enforced, without a GPU: the same accounting runs).

- A model whose measured peak (a warm-up at its largest batch) is past its budget is refused.
- A model that does not fit what the others hold is refused at start and by the repository
  API (507, with the figures), and loads once another is unloaded.
- A request that would outgrow its model's budget gets 503; the model and its neighbours
  serve on.
- ``/sharedserve/v1/limits`` lists each model's budget, footprint, state and last use.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import invoke
from tests.support.servers import Server

pytestmark = [pytest.mark.torch]

ROW = [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0]
BUDGET = "gpu_memory_mib: 1\n"
# Tiny's warm-up at 50,000 rows holds 48 bytes a row beside its weights: 2.3 MiB at its peak.
WIDE = BUDGET + "batching: {max_batch_size: 50000, batch_timeout_micros: 0}\n"


@pytest.fixture(scope="module")
def repository(torch_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("budgets") / "models"
    for name, model_file in (("big", WIDE), ("m1", BUDGET), ("m2", BUDGET), ("m3", BUDGET)):
        shutil.copytree(torch_models_dir / "tiny", root / name)
        (root / name / "sharedserve.yaml").write_text(model_file)
    return root


@pytest.fixture(scope="module")
def server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("budgets-log") / "serve.log"
    served = Server(None, log, ["--model-repository", str(repository), "--gpu-memory-mib", "2"])
    try:
        served.wait_available("m2")  # loaded in name order: big, m1, m2, then m3
        served.wait_listening()
        _wait_index(served)
        yield served
    finally:
        served.stop()


def _index(server: Server) -> dict[str, dict[str, str]]:
    rows = server.client.post("/v2/repository/index", json={}).json()
    return {row["name"]: row for row in rows}


def _wait_index(server: Server) -> None:
    """Until the last model named at start (m3) has loaded or failed."""
    deadline = time.monotonic() + 60
    while _index(server)["m3"]["state"] == "LOADING":
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.1)


def test_what_does_not_fit_is_refused_at_start_with_the_figures(server: Server) -> None:
    index = _index(server)
    assert (index["m1"]["state"], index["m2"]["state"]) == ("READY", "READY")
    assert index["big"]["state"] == "UNAVAILABLE"
    assert "past its budget of 1 MiB" in index["big"]["reason"], index["big"]
    assert index["m3"]["state"] == "UNAVAILABLE"
    reason = index["m3"]["reason"]
    assert "cap is 2 MiB" in reason and "held by m1, m2" in reason, reason
    assert "paging is off" in reason


def test_limits_list_each_models_budget_footprint_state_and_last_use(server: Server) -> None:
    assert server.client.post("/v1/models/m1:predict", json={"instances": [ROW]}).is_success
    limits = server.client.get("/sharedserve/v1/limits").json()
    assert limits["memory"]["capacity_mib"] == 2 and limits["memory"]["held_mib"] == 2
    m1 = limits["models"]["m1"]["versions"]["1"]
    assert (m1["state"], m1["budget_mib"], m1["held_mib"]) == ("resident", 1, 1)
    assert m1["peak_mib"] >= m1["weights_mib"] > 0 and m1["measured_on"] == "host"
    assert m1["last_use"] is not None
    m3 = limits["models"]["m3"]["versions"]["1"]
    assert (m3["state"], m3["held_mib"]) == ("failed", 0) and "held by m1, m2" in m3["error"]
    big = limits["models"]["big"]["versions"]["1"]
    assert big["state"] == "failed" and big["peak_mib"] > big["budget_mib"]  # measured, refused


def test_a_request_past_its_budget_gets_503_and_the_model_serves_on(server: Server) -> None:
    # 25,000 rows x 48 bytes: past 1 MiB with the weights.
    wide = server.client.post("/v1/models/m1:predict", json={"instances": [ROW] * 25_000})
    assert wide.status_code == 503, wide.text
    assert "past its budget of 1 MiB" in wide.json()["error"]
    for name in ("m1", "m2"):
        answer = server.client.post(f"/v1/models/{name}:predict", json={"instances": [ROW]})
        assert answer.status_code == 200, answer.text


def test_a_load_past_the_cap_is_507_until_another_model_is_unloaded(server: Server) -> None:
    refused = server.client.post("/v2/repository/models/m3/load", json={})
    assert refused.status_code == 507, refused.text
    assert "held by m1, m2" in refused.json()["error"]
    assert server.client.post("/v1/models/m1:predict", json={"instances": [ROW]}).is_success
    assert server.client.post("/v2/repository/models/m2/unload", json={}).status_code == 200
    assert server.client.post("/v2/repository/models/m3/load", json={}).status_code == 200
    answer = server.client.post("/v1/models/m3:predict", json={"instances": [ROW]})
    assert answer.status_code == 200, answer.text


def test_paging_without_a_cap_is_a_usage_error(repository: Path) -> None:
    # Refused before a framework is imported: nothing loads in this test's process.
    result = invoke(
        "serve", "--model-repository", str(repository), "--paging", "lru", "--rest-port", "0"
    )
    assert result.exit_code == 2, result.output
    assert "--paging lru pages models by the GPU memory cap" in result.stderr

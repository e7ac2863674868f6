"""Who burns the CPU in a shared process: ``sharedserve_model_cpu_seconds_total{model, phase}``
and each model's ``cpu_seconds`` on ``/sharedserve/v1/limits``.

One server in this process serves ``tiny`` (TensorFlow) twice: ``light``, unbatched (its JSON
decoded, run and encoded in one scheduler thread), and ``heavy``, batched (decoded and encoded
in worker threads, its batches run in the scheduler's). Each gets the same number of REST
requests, one after another; ``heavy``'s carry 20,000 rows (a 700 KB body) where ``light``'s
carry one, so its decoding and encoding do thousands of times the work (measured: some 20 times
the decoding CPU and 90 times the encoding CPU, a request's fixed costs included). The test
asserts only that the heavy model's figures are the larger ones, by a factor of 3, never a
duration.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sharedserve.config import BatchingSettings
from sharedserve.server.repository import VersionToServe
from sharedserve.server.settings import RestSettings
from sharedserve.server.version import ModelSettings, find_model
from tests.support.in_process import loopback_settings, serving_in_process

pytestmark = [pytest.mark.tensorflow]

PHASES = {"decode", "call", "encode", "paging"}
REQUESTS = 10
HEAVY_ROWS = 20_000
ROW = [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0]


@pytest.fixture(scope="module")
def client(models_dir: Path) -> Iterator[httpx.Client]:
    tiny = models_dir / "tiny" / "1"
    batching = BatchingSettings(max_batch_size=HEAVY_ROWS, num_batch_threads=1)
    entries = [
        VersionToServe(find_model(tiny, "light")),
        VersionToServe(find_model(tiny, "heavy"), ModelSettings(batching=batching)),
    ]
    rest = RestSettings(host="127.0.0.1", port=0, max_body_bytes=4 << 20)
    settings = loopback_settings(rest=rest, max_request_elements=1 << 20)
    with (
        serving_in_process(entries, settings) as served,
        httpx.Client(base_url=served.base, timeout=60) as client,
    ):
        yield client


def _cpu_scraped(client: httpx.Client) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "sharedserve_model_cpu_seconds_total":
                found.setdefault(sample.labels["model"], {})[sample.labels["phase"]] = sample.value
    return found


def _cpu_reported(client: httpx.Client) -> dict[str, dict[str, float]]:
    models = client.get("/sharedserve/v1/limits").json()["models"]
    return {name: model["cpu_seconds"] for name, model in models.items()}


def test_the_heavier_model_is_charged_more_cpu_in_every_request_phase(
    client: httpx.Client,
) -> None:
    before = _cpu_reported(client)
    assert set(before) == {"light", "heavy"}
    for name, phases in before.items():
        assert set(phases) == PHASES, name
        assert phases["paging"] > 0, f"{name}: its load (read, warm-up) is its paging"

    for _ in range(REQUESTS):
        light = client.post("/v1/models/light:predict", json={"instances": [ROW]})
        assert light.status_code == 200, light.text
        heavy = client.post("/v1/models/heavy:predict", json={"instances": [ROW] * HEAVY_ROWS})
        assert heavy.status_code == 200, heavy.text
        assert len(heavy.json()["predictions"]) == HEAVY_ROWS

    reported, scraped = _cpu_reported(client), _cpu_scraped(client)
    assert scraped == reported  # nothing runs between the two readings: the same figures
    spent = {
        name: {phase: reported[name][phase] - before[name][phase] for phase in PHASES}
        for name in reported
    }
    for name, phases in spent.items():
        assert set(phases) == PHASES, name
        assert all(seconds >= 0 for seconds in phases.values()), (name, phases)
        assert phases["paging"] == 0, f"{name} was not paged: {phases}"
        assert phases["decode"] > 0 and phases["call"] > 0 and phases["encode"] > 0, name
    light, heavy = spent["light"], spent["heavy"]
    # 20,000 rows against one: a factor of 3 leaves the measurement ample room.
    assert heavy["decode"] > 3 * light["decode"], spent
    assert heavy["encode"] > 3 * light["encode"], spent
    assert sum(heavy.values()) > 3 * sum(light.values()), spent


def test_a_refused_request_is_charged_to_its_model(client: httpx.Client) -> None:
    """Decoding a request that fails validation cost its model the CPU all the same."""
    before = _cpu_reported(client)["light"]["decode"]
    bad = client.post("/v1/models/light:predict", json={"instances": [ROW[:3]] * 2000})
    assert bad.status_code == 400, bad.text
    assert _cpu_reported(client)["light"]["decode"] > before

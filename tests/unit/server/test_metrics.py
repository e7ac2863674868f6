"""The server's GPU memory families: each present only when its figure is known."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sharedserve.server.metrics.prometheus import GpuMemoryReading, Metrics


@pytest.mark.parametrize(
    ("reading", "present", "absent"),
    [
        (
            (3.0 * 2**30, 4.0 * 2**30, 2.5 * 2**30),
            ["used_bytes", "cap_bytes", "allocator_bytes"],
            [],
        ),
        ((None, 4.0 * 2**30, None), ["cap_bytes"], ["used_bytes", "allocator_bytes"]),
        ((None, None, None), [], ["used_bytes", "cap_bytes", "allocator_bytes"]),
    ],
)
def test_gpu_memory_families(
    reading: GpuMemoryReading, present: list[str], absent: list[str]
) -> None:
    metrics = Metrics("resnet50")
    metrics.track_gpu_memory(lambda: reading)
    samples = {
        sample.name.removeprefix("sharedserve_gpu_memory_"): (sample.labels, sample.value)
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
        if sample.name.startswith("sharedserve_gpu_memory_")
    }
    names = ["used_bytes", "cap_bytes", "allocator_bytes"]
    assert samples == {
        name: ({"model": "resnet50"}, reading[names.index(name)]) for name in present
    }
    assert not set(absent) & set(samples)

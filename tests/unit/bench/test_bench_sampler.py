"""The sampler's window figures: per GPU, and over every GPU the replicas are on."""

from __future__ import annotations

from sharedserve.bench.sampler import Sample, gpu_figures, process_gpu_peak, summarize


def sample(at: float, gpus: dict[str, tuple[float | None, float | None]], **kw: object) -> Sample:
    return Sample(at, gpus, **kw)  # type: ignore[arg-type]


SAMPLES = [
    sample(0.0, {"GPU-a": (99.0, 9000.0)}),  # before the window: left out
    sample(1.0, {"GPU-a": (40.0, 1000.0), "GPU-b": (10.0, 500.0)}, process_gpu_mib={7: 300}),
    sample(2.0, {"GPU-a": (60.0, 1200.0), "GPU-b": (None, 700.0)}, process_gpu_mib={7: 350}),
    sample(3.0, {"GPU-a": (50.0, 1100.0), "GPU-b": (30.0, None)}, process_gpu_mib={7: None}),
]


def test_each_gpu_is_summarised_over_the_window_alone() -> None:
    figures = gpu_figures(SAMPLES, 1.0, 3.0, {"GPU-a": "NVIDIA H100"})
    assert figures == [
        {"uuid": "GPU-a", "name": "NVIDIA H100", "util_mean": 50.0, "util_max": 60.0,
         "mem_used_mib": 1200.0},
        {"uuid": "GPU-b", "name": None, "util_mean": 20.0, "util_max": 30.0,
         "mem_used_mib": 700.0},
    ]  # fmt: skip
    assert process_gpu_peak(SAMPLES, 1.0, 3.0) == {7: 350}


def test_row_figures_over_several_gpus() -> None:
    s = summarize(SAMPLES, 1.0, 3.0)
    assert s.gpu_util_mean == 35.0  # the mean of each GPU's mean
    assert s.gpu_util_max == 60.0
    assert s.gpu_mem_used_mib == 1900.0  # each GPU's highest, summed


def test_no_gpu_sampled_is_none_never_zero() -> None:
    bare = [sample(1.0, {}), sample(2.0, {})]
    assert gpu_figures(bare, 0.0, 3.0) is None
    s = summarize(bare, 0.0, 3.0)
    assert (s.gpu_util_mean, s.gpu_util_max, s.gpu_mem_used_mib) == (None, None, None)

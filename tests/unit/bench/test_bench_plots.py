"""The plots' density axis says what was packed, and onto what; a mix of models is plotted
against its scale, each model against its own SLO."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import imread
from numpy.typing import ArrayLike

from sharedserve.bench.report import plots
from tests.support.bench_mix import SPEC, mix_rows


def rows(gpu_names: list[str | None]) -> list[dict[str, Any]]:
    return [
        {"density": 2**i, "pattern": "sequential", "p99_ms": 5.0, "gpu_name": name}
        for i, name in enumerate(gpu_names)
    ]


def xlabel(rows: list[dict[str, Any]]) -> str:
    ax = Figure().add_subplot()
    plots._density_axis(ax, rows)
    return str(ax.get_xlabel())


def test_a_cpu_only_run_says_replicas_not_gpu() -> None:
    label = xlabel(rows([None, None]))
    assert label == "replicas"
    assert "GPU" not in label


def test_a_gpu_run_names_its_gpu() -> None:
    assert xlabel(rows(["NVIDIA A10G", "NVIDIA A10G"])) == "replicas on GPU NVIDIA A10G"


def test_rows_from_different_gpus_name_none() -> None:
    assert xlabel(rows(["NVIDIA A10G", "Tesla T4"])) == "replicas"


def test_every_plot_is_drawn_with_the_label() -> None:
    # The label is set on the axes every plot shares; drawing must still work end to end.
    images = plots.draw_plots(rows([None, None, None]), slo_p99_ms=10.0)
    assert set(images) == {"p99_vs_density.png"}
    assert all(png.startswith(b"\x89PNG") for png in images.values())


# A mix of models: tests/support/bench_mix.py's hand-built rows.
def test_a_mix_is_plotted_against_its_scale() -> None:
    mix = mix_rows()
    assert xlabel(mix) == "scale"
    ax = Figure().add_subplot()
    plots._density_axis(ax, mix)
    assert list(ax.get_xticks()) == [1, 2]  # its scales, not its 7 and 14 replicas


def data(values: ArrayLike) -> list[float]:
    return [float(v) for v in np.asarray(values)]


def models_axes(rows: list[dict[str, Any]]) -> Axes:
    ax = Figure(layout="constrained").add_subplot()
    plots._models_p99(ax, rows)
    return ax


def test_each_model_against_its_own_slo() -> None:
    lines = models_axes(mix_rows()).get_lines()
    assert len(lines) == 2 * len(SPEC)  # a P99 line and an SLO line per model
    by_label = {str(line.get_label()): line for line in lines}
    for name, _, _, slo in SPEC:
        p99, objective = by_label[name], by_label[f"{name} SLO {slo:g} ms"]
        assert data(p99.get_xdata()) == [1, 2]
        assert objective.get_linestyle() == "--" and objective.get_color() == p99.get_color()
        assert set(data(objective.get_ydata())) == {slo}
    assert data(by_label["resnet50"].get_ydata()) == [688.9, 1530.5]
    assert len({line.get_color() for line in lines}) == len(SPEC)


def test_a_model_without_an_slo_gets_no_slo_line() -> None:
    rows = mix_rows()
    for row in rows:
        row["models"]["resnet50"]["slo_p99_ms"] = None
    labels = [str(line.get_label()) for line in models_axes(rows).get_lines()]
    assert len(labels) == 2 * len(SPEC) - 1
    assert "resnet50" in labels and not [lab for lab in labels if lab.startswith("resnet50 SLO")]


def test_the_mix_plot_is_drawn_for_a_mix_only() -> None:
    images = plots.draw_plots(mix_rows(), slo_p99_ms=None)
    assert list(images) == list(plots.PLOT_NAMES)
    png = images["p99_by_model_vs_scale.png"]
    pixels = imread(io.BytesIO(png), format="png")
    assert pixels.shape[:2] == (450, 750)
    single = plots.draw_plots(rows([None, None]), slo_p99_ms=10.0)
    assert "p99_by_model_vs_scale.png" not in single

"""The plots' density axis says what was packed, and onto what (issue 16 item 6)."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from sharedserve.bench import plots


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

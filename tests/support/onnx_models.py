"""ONNX files the tests make themselves: a model wide enough inside that a batch's activations,
not its inputs or outputs, are what it needs memory for (the arena cap's test), and a file that
is not ONNX at all."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

WIDE_IN, WIDE_HIDDEN, WIDE_OUT = 64, 8192, 8
"""A batch of n rows holds n * 8192 floats (32 KiB a row) between its two layers, and only
n * 72 floats in its input and output, which is all a footprint on a host counts per row."""


def export_wide(version_dir: Path) -> None:
    """``version_dir/model.onnx``: Linear 64 -> 8192, ReLU, Linear 8192 -> 8, batch dynamic."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(WIDE_IN, WIDE_HIDDEN), nn.ReLU(), nn.Linear(WIDE_HIDDEN, WIDE_OUT)
    ).eval()
    version_dir.mkdir(parents=True)
    batch = {0: "batch"}
    with warnings.catch_warnings():  # torch's notice that this exporter is deprecated
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.zeros(1, WIDE_IN),),
            str(version_dir / "model.onnx"),
            dynamo=False,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": batch, "y": batch},
        )


def write_malformed(version_dir: Path) -> None:
    """``version_dir/model.onnx`` that is not a protobuf at all: a copy cut short, or the wrong
    file under the right name."""
    version_dir.mkdir(parents=True)
    (version_dir / "model.onnx").write_bytes(b"this is not an ONNX model\n" * 4)

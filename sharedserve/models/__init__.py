"""Example models with random weights, built locally (no weights are ever downloaded).

Their accuracy is meaningless; their compute and memory are those of the real architectures,
which is what packing decisions depend on.
"""

from sharedserve.models.catalog import CATALOG, Built, ExampleModelSpec, build, build_models
from sharedserve.models.convert import convert_to_onnx

__all__ = ["CATALOG", "Built", "ExampleModelSpec", "build", "build_models", "convert_to_onnx"]

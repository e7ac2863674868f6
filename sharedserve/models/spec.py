"""What an example model is, apart from the catalog that lists them and the builders that make
them (each framework's imports its own), so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass

from sharedserve.enums import Framework

__all__ = ["ExampleModelSpec"]


@dataclass(frozen=True)
class ExampleModelSpec:
    """One example model of the catalog: its architecture, its tensors' names and the frameworks
    it builds for (the CLI's ``ExampleModelName`` is the choice of one by name)."""

    name: str
    description: str
    input_shape: tuple[int, ...]
    """Shape of one instance (no batch dimension)."""
    input_name: str
    output_name: str
    frameworks: tuple[Framework, ...] = (
        Framework.TENSORFLOW,
        Framework.TORCH,
        Framework.ONNX,
        Framework.EXPORT,
    )
    """The frameworks this architecture can be built for."""

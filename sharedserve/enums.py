"""The choices a user names on several commands, each defined once. Pure; the bottom layer.

Values are what the CLI and the files take (``--policy spread``, ``framework: torch``,
``--protocol oip-grpc``), so an enum member and the text a user writes are the same thing.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Framework", "Paging", "PlacementPolicy", "Protocol"]


class Framework(str, Enum):
    """A model's format and the framework that serves it; values are the CLI's ``--framework``."""

    TENSORFLOW = "tf"
    """A TF Serving SavedModel (``saved_model.pb``)."""
    TORCH = "torch"
    """TorchScript (``model.pt``) plus a ``signature.json`` sidecar."""
    ONNX = "onnx"
    """ONNX (``model.onnx``), served by onnxruntime; its signature is read from the model."""
    EXPORT = "export"
    """A ``torch.export`` program or an AOTInductor package (``model.pt2``), served by torch;
    a ``signature.json`` beside it names what the program does not."""


class Paging(str, Enum):
    """Whether a multi-model server moves idle models out of memory to make room (``serve
    --paging``)."""

    OFF = "off"
    """A model that does not fit is refused; nothing moves."""
    LRU = "lru"
    """The least recently used idle models move out (torch to host memory, TensorFlow
    unloaded) and come back in on their next request."""


class PlacementPolicy(str, Enum):
    """Which GPU a replica (or a kubelet's vGPU request) goes on when several would hold it."""

    BUNDLE = "bundle"
    """Best fit: the fullest GPU that still holds it, so whole GPUs stay free for big ones."""
    SPREAD = "spread"
    """Least used first: more of a GPU's compute each, at the cost of fragmenting free room."""


class Protocol(str, Enum):
    """A wire format the server answers and the bench speaks."""

    REST = "rest"
    """TF Serving's REST API (JSON)."""
    GRPC = "grpc"
    """TF Serving's gRPC ``PredictionService``."""
    OIP_REST = "oip-rest"
    """The Open Inference Protocol over REST (binary tensor extension)."""
    OIP_GRPC = "oip-grpc"
    """The Open Inference Protocol's ``GRPCInferenceService``."""

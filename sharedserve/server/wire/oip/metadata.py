"""The server's and a model's metadata as the Open Inference Protocol shows them, for REST and
gRPC alike.

The OIP has no signatures: it describes the model's default one (``serving_default``), which is
the one an infer request runs unless it names another (sharedserve's ``signature_name``
parameter). ``platform`` uses Triton's names, which KServe's tooling and clients know.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sharedserve import __version__
from sharedserve.enums import Framework
from sharedserve.server.version.model import ServedModel
from sharedserve.server.wire.oip.tensors import tensor_metadata

__all__ = ["PLATFORM", "model_metadata", "server_metadata"]

PLATFORM = {Framework.TENSORFLOW: "tensorflow_savedmodel", Framework.TORCH: "pytorch_libtorch"}


def model_metadata(model: ServedModel, versions: Sequence[int] = ()) -> dict[str, Any]:
    """NotReady until the model is AVAILABLE (its signatures are known only once loaded);
    ``versions``: every version served under its name (else its own)."""
    signature = model.signature(None)
    return {
        "name": model.name,
        "versions": [str(v) for v in versions or (model.version,)],
        "platform": PLATFORM[model.source.framework],
        "inputs": [tensor_metadata(spec) for spec in signature.inputs.values()],
        "outputs": [tensor_metadata(spec) for spec in signature.outputs.values()],
    }


def server_metadata() -> dict[str, Any]:
    return {"name": "sharedserve", "version": __version__, "extensions": ["binary_tensor_data"]}

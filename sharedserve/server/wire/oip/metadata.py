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
from sharedserve.server.repository import IndexEntry
from sharedserve.server.version import SERVING, ModelVersion, VersionState
from sharedserve.server.wire.oip.tensors import tensor_metadata

__all__ = ["PLATFORM", "index_rows", "model_metadata", "server_metadata"]

PLATFORM = {
    Framework.TENSORFLOW: "tensorflow_savedmodel",
    Framework.TORCH: "pytorch_libtorch",
    Framework.ONNX: "onnxruntime_onnx",
    Framework.EXPORT: "pytorch_export",
}


def model_metadata(model: ModelVersion, versions: Sequence[int] = ()) -> dict[str, Any]:
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


def index_rows(
    entries: list[IndexEntry], stopping: bool, *, ready_only: bool = False
) -> list[dict[str, str]]:
    """Triton's repository index: a row per version, READY, LOADING or UNAVAILABLE with the
    reason (``ready_only``: the READY ones)."""
    rows = [{"name": e.name, "version": _number(e), **_state(e, stopping)} for e in entries]
    return [r for r in rows if r["state"] == "READY"] if ready_only else rows


def _number(entry: IndexEntry) -> str:
    return "" if entry.version is None else str(entry.version)


def _state(entry: IndexEntry, stopping: bool) -> dict[str, str]:
    state = entry.state
    if state is None:
        return {"state": "LOADING" if entry.loading else "UNAVAILABLE", "reason": entry.reason}
    if state in SERVING:
        if stopping:
            return {"state": "UNAVAILABLE", "reason": "unloading"}
        return {"state": "READY", "reason": ""}
    if state in (VersionState.START, VersionState.LOADING):
        return {"state": "LOADING", "reason": ""}
    if state is VersionState.FAILED:
        return {"state": "UNAVAILABLE", "reason": entry.reason}
    return {
        "state": "UNAVAILABLE",
        "reason": "unloading" if state is VersionState.RETIRING else "end",
    }

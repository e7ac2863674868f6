"""A model version's status and metadata in TF Serving's words: ``ModelVersionStatus.State``
(START -> LOADING -> AVAILABLE -> UNLOADING -> END) and the ``signature_def`` map, as JSON for
the REST API; the gRPC API fills its protos from the same ``state_of``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sharedserve.server.version import SERVING, ModelVersion, TensorSpec, VersionState

__all__ = ["STATES", "metadata_json", "state_of", "status_json"]

STATES = ("START", "LOADING", "AVAILABLE", "UNLOADING", "END")
"""TF Serving's ``ModelVersionStatus.State`` names, in order."""

_STATE = {
    VersionState.START: "START",
    VersionState.LOADING: "LOADING",
    VersionState.RETIRING: "UNLOADING",
    VersionState.GONE: "END",
    VersionState.FAILED: "END",
}


def state_of(version: ModelVersion, stopping: bool) -> str:
    """TF Serving's state of ``version``: a paged-out version is AVAILABLE (it serves), and
    every serving version is UNLOADING once the server is stopping (not ready, still
    answering until the listeners close)."""
    if version.state in SERVING:
        return "UNLOADING" if stopping else "AVAILABLE"
    return _STATE[version.state]


def status_json(versions: Sequence[ModelVersion], stopping: bool) -> dict[str, Any]:
    """TF Serving's GetModelStatus as JSON: the versions given, each with its state and, for
    one that failed to load, the reason."""
    entries = []
    for version in versions:
        failed = version.state is VersionState.FAILED
        entries.append(
            {
                "version": str(version.version),
                "state": state_of(version, stopping),
                "status": {
                    "error_code": "UNKNOWN" if failed else "OK",
                    "error_message": (version.error or "") if failed else "",
                },
            }
        )
    return {"model_version_status": entries}


def metadata_json(version: ModelVersion) -> dict[str, Any]:
    """TF Serving's GetModelMetadata as JSON; NotReady until the version serves."""
    signature_defs = {
        name: {
            "inputs": {k: _tensor_info(v) for k, v in sig.inputs.items()},
            "outputs": {k: _tensor_info(v) for k, v in sig.outputs.items()},
            "method_name": sig.method_name,
            "defaults": {},
        }
        for name, sig in version.signatures().items()
    }
    return {
        "model_spec": {"name": version.name, "signature_name": "", "version": str(version.version)},
        "metadata": {"signature_def": {"signature_def": signature_defs}},
    }


def _tensor_info(spec: TensorSpec) -> dict[str, Any]:
    # int64 fields are strings in proto3 JSON, which is what TF Serving's REST API prints.
    dims = [] if spec.shape is None else [{"size": str(d), "name": ""} for d in spec.shape]
    return {
        "dtype": spec.dtype,
        "tensor_shape": {"dim": dims, "unknown_rank": spec.shape is None},
        "name": spec.tensor_name,
    }

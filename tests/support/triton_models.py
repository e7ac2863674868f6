"""NVIDIA's Triton client against a server of several models: run by the client's venv
(``triton_client.py``), never imported by the tests. Reads {"http", "grpc", "input", "rows",
"targets": [[model, version], ...]} as JSON on stdin (version "" for the latest); prints, per
target "model/version", what each protocol's infer answered (model name, version, values) and
the model's metadata versions, plus each protocol's server readiness.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException


def attempt(call: Any) -> Any:
    try:
        return call()
    except InferenceServerException as e:
        return {"error": {"status": e.status(), "message": e.message()}}


def main() -> None:
    args = json.load(sys.stdin)
    rows = np.asarray(args["rows"], dtype=np.float32)
    http = thttp.InferenceServerClient(url=args["http"], network_timeout=30)
    grpc = tgrpc.InferenceServerClient(url=args["grpc"])
    answers: dict[str, Any] = {"http_ready": http.is_server_ready()}
    answers["grpc_ready"] = grpc.is_server_ready()
    for model, version in args["targets"]:

        def http_infer(model: str = model, version: str = version) -> dict[str, Any]:
            given = thttp.InferInput(args["input"], list(rows.shape), "FP32")
            given.set_data_from_numpy(rows, binary_data=True)
            result = http.infer(model, [given], model_version=version)
            response = result.get_response()
            return {
                "model_name": response["model_name"],
                "model_version": response["model_version"],
                "values": result.as_numpy(response["outputs"][0]["name"]).tolist(),
            }

        def grpc_infer(model: str = model, version: str = version) -> dict[str, Any]:
            given = tgrpc.InferInput(args["input"], list(rows.shape), "FP32")
            given.set_data_from_numpy(rows)
            result = grpc.infer(model, [given], model_version=version)
            response = result.get_response()
            return {
                "model_name": response.model_name,
                "model_version": response.model_version,
                "values": result.as_numpy(response.outputs[0].name).tolist(),
            }

        answers[f"{model}/{version}"] = {
            "http": attempt(http_infer),
            "grpc": attempt(grpc_infer),
            "http_metadata": attempt(lambda m=model, v=version: http.get_model_metadata(m, v)),
            "grpc_metadata": attempt(
                lambda m=model, v=version: grpc.get_model_metadata(m, v, as_json=True)
            ),
            "http_model_ready": attempt(lambda m=model, v=version: http.is_model_ready(m, v)),
            "grpc_model_ready": attempt(lambda m=model, v=version: grpc.is_model_ready(m, v)),
        }
    http.close()
    grpc.close()
    json.dump(answers, sys.stdout)


if __name__ == "__main__":
    main()

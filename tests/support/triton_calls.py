"""Every Open Inference Protocol call the tests make with NVIDIA's own client, in one process.

Run by the Triton client's venv (``triton_client.py``), never imported by the tests: it cannot
share a process with sharedserve. Reads {"http", "grpc", "model", "input", "output", "rows"}
as JSON on stdin; prints {"http": {...}, "grpc": {...}}, each call's result under its name, an
array as a list and a failed call as {"error": {"status", "message"}}.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

UNKNOWN = "no-such-model"


def datatype_of(x: np.ndarray) -> str:
    return {np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64"}[x.dtype]


def attempt(call: Callable[[], Any]) -> Any:
    try:
        return {"value": call()}
    except InferenceServerException as e:
        return {"error": {"status": e.status(), "message": e.message()}}


def http_output(result: Any, name: str) -> dict[str, Any]:
    """An output as the client read it, and how it travelled (binary or JSON)."""
    response = result.get_response()
    (entry,) = [o for o in response["outputs"] if o["name"] == name]
    array = result.as_numpy(name)
    return {
        "id": response.get("id"),
        "model_name": response["model_name"],
        "outputs": [o["name"] for o in response["outputs"]],
        "datatype": entry["datatype"],
        "shape": entry["shape"],
        "binary": "binary_data_size" in entry.get("parameters", {}),
        "dtype": str(array.dtype),
        "values": array.tolist(),
    }


def http_calls(args: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    model, output = args["model"], args["output"]
    client = thttp.InferenceServerClient(url=args["http"], network_timeout=30)

    def infer(
        binary_in: bool,
        binary_out: bool | None,
        request_id: str = "",
        x: np.ndarray = rows,
        name: str = model,
    ) -> Any:
        given = thttp.InferInput(args["input"], list(x.shape), datatype_of(x))
        given.set_data_from_numpy(x, binary_data=binary_in)
        wanted = None
        if binary_out is not None:
            wanted = [thttp.InferRequestedOutput(output, binary_data=binary_out)]
        return client.infer(name, [given], outputs=wanted, request_id=request_id)

    results = {
        "live": attempt(client.is_server_live),
        "ready": attempt(client.is_server_ready),
        "model_ready": attempt(lambda: client.is_model_ready(model)),
        "unknown_model_ready": attempt(lambda: client.is_model_ready(UNKNOWN)),
        "server_metadata": attempt(client.get_server_metadata),
        "model_metadata": attempt(lambda: client.get_model_metadata(model)),
        "unknown_model_metadata": attempt(lambda: client.get_model_metadata(UNKNOWN)),
        "json_in_json_out": attempt(lambda: http_output(infer(False, False, "rest-1"), output)),
        "binary_in_binary_out": attempt(lambda: http_output(infer(True, True, "rest-2"), output)),
        "binary_in_json_out": attempt(lambda: http_output(infer(True, False), output)),
        "json_in_binary_out": attempt(lambda: http_output(infer(False, True), output)),
        # No outputs named: the client asks for all of them, binary (binary_data_output).
        "no_outputs": attempt(lambda: http_output(infer(True, None), output)),
        "wrong_datatype": attempt(lambda: infer(True, False, x=rows.astype(np.float64))),
        "unknown_model_infer": attempt(lambda: infer(True, False, name=UNKNOWN)),
    }
    client.close()
    return results


def grpc_output(result: Any, name: str) -> dict[str, Any]:
    response = result.get_response()
    (entry,) = [o for o in response.outputs if o.name == name]
    array = result.as_numpy(name)
    return {
        "id": response.id,
        "model_name": response.model_name,
        "outputs": [o.name for o in response.outputs],
        "datatype": entry.datatype,
        "shape": list(entry.shape),
        "dtype": str(array.dtype),
        "values": array.tolist(),
    }


def grpc_calls(args: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    model, output = args["model"], args["output"]
    client = tgrpc.InferenceServerClient(url=args["grpc"])

    def infer(x: np.ndarray = rows, name: str = model, request_id: str = "", out: bool = True):
        given = tgrpc.InferInput(args["input"], list(x.shape), datatype_of(x))
        given.set_data_from_numpy(x)  # raw_input_contents: how this client always sends
        wanted = [tgrpc.InferRequestedOutput(output)] if out else None
        return client.infer(name, [given], outputs=wanted, request_id=request_id)

    results = {
        "live": attempt(client.is_server_live),
        "ready": attempt(client.is_server_ready),
        "model_ready": attempt(lambda: client.is_model_ready(model)),
        "unknown_model_ready": attempt(lambda: client.is_model_ready(UNKNOWN)),
        "server_metadata": attempt(lambda: client.get_server_metadata(as_json=True)),
        "model_metadata": attempt(lambda: client.get_model_metadata(model, as_json=True)),
        "unknown_model_metadata": attempt(lambda: client.get_model_metadata(UNKNOWN)),
        "output_requested": attempt(lambda: grpc_output(infer(request_id="grpc-1"), output)),
        "no_outputs": attempt(lambda: grpc_output(infer(out=False), output)),
        "wrong_datatype": attempt(lambda: infer(x=rows.astype(np.float64))),
        "wrong_shape": attempt(lambda: infer(x=rows[:, :-1].copy())),
        "unknown_model_infer": attempt(lambda: infer(name=UNKNOWN)),
        "typed_contents": typed_contents(args, rows),
    }
    client.close()
    return results


def typed_contents(args: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    """ModelInfer with typed ``fp32_contents``, which the client's InferInput never sends: built
    from the client's own generated messages and stub."""
    request = service_pb2.ModelInferRequest(model_name=args["model"], id="typed")
    tensor = request.inputs.add(name=args["input"], datatype="FP32", shape=list(rows.shape))
    tensor.contents.fp32_contents.extend(rows.reshape(-1).tolist())
    with grpc.insecure_channel(args["grpc"]) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(request, timeout=30)
    (entry,) = response.outputs
    values = np.frombuffer(response.raw_output_contents[0], dtype="<f4")
    return {
        "id": response.id,
        "shape": list(entry.shape),
        "values": values.reshape(list(entry.shape)).tolist(),
    }


def main() -> None:
    args = json.load(sys.stdin)
    rows = np.asarray(args["rows"], dtype=np.float32)
    json.dump({"http": http_calls(args, rows), "grpc": grpc_calls(args, rows)}, sys.stdout)


if __name__ == "__main__":
    main()

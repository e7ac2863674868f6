"""NVIDIA's own client (``tritonclient``) against a TLS server: readiness and one inference on
HTTPS and on gRPC with TLS, verifying the server by the test's CA, with the client certificate
when given (mutual TLS).

Run by the Triton client's venv (``triton_client.py``), never imported by the tests. Reads
{"http", "grpc", "ca", "cert", "key", "model", "input", "output", "rows"} as JSON on stdin
(``cert`` and ``key`` null without mutual TLS); prints {"http": {...}, "grpc": {...}}, each with
"ready" and "values", or {"error": ...} for a call that failed.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp


def http_calls(args: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    options = {"ca_certs": args["ca"]}
    if args["cert"] is not None:
        options |= {"certfile": args["cert"], "keyfile": args["key"]}
    client = thttp.InferenceServerClient(
        url=args["http"], ssl=True, ssl_options=options, network_timeout=30
    )
    try:
        given = thttp.InferInput(args["input"], list(rows.shape), "FP32")
        given.set_data_from_numpy(rows)
        result = client.infer(args["model"], [given])
        return {
            "ready": client.is_model_ready(args["model"]),
            "values": result.as_numpy(args["output"]).tolist(),
        }
    finally:
        client.close()


def grpc_calls(args: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    client = tgrpc.InferenceServerClient(
        url=args["grpc"],
        ssl=True,
        root_certificates=args["ca"],
        private_key=args["key"],
        certificate_chain=args["cert"],
    )
    try:
        given = tgrpc.InferInput(args["input"], list(rows.shape), "FP32")
        given.set_data_from_numpy(rows)
        result = client.infer(args["model"], [given], client_timeout=30)
        return {
            "ready": client.is_model_ready(args["model"]),
            "values": result.as_numpy(args["output"]).tolist(),
        }
    finally:
        client.close()


def main() -> None:
    args = json.load(sys.stdin)
    rows = np.asarray(args["rows"], dtype=np.float32)
    answers: dict[str, Any] = {}
    for name, calls in (("http", http_calls), ("grpc", grpc_calls)):
        try:
            answers[name] = calls(args, rows)
        except Exception as e:  # said in the answer: the test shows what failed, and how
            answers[name] = {"error": f"{type(e).__name__}: {e}"}
    json.dump(answers, sys.stdout)


if __name__ == "__main__":
    main()

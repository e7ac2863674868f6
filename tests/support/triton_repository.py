"""Triton's model repository calls (index, load, unload) made with NVIDIA's own client.

Run by the Triton client's venv (``triton_client.py``), never imported by the tests. Reads
{"http", "grpc", "calls": [[protocol, "index" | "load" | "unload", name], ...], "headers"?} as
JSON on stdin and makes the calls in order, each with the headers (gRPC: metadata) given;
prints one result per call: {"value": ...} (an index as a list of {name, version, state,
reason}), or {"error": {"status", "message"}} for a failed one.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException


def _index_rows(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    keys = ("name", "version", "state", "reason")
    return [{key: str(row.get(key, "")) for key in keys} for row in rows]


def main() -> None:
    args = json.load(sys.stdin)
    http = thttp.InferenceServerClient(url=args["http"], network_timeout=60)
    grpc = tgrpc.InferenceServerClient(url=args["grpc"])
    headers = args.get("headers")
    results = []
    for protocol, operation, name in args["calls"]:
        client: Any = http if protocol == "http" else grpc
        try:
            if operation == "index":
                if protocol == "http":
                    value: Any = _index_rows(client.get_model_repository_index(headers=headers))
                else:
                    index = client.get_model_repository_index(headers=headers, as_json=True)
                    value = _index_rows(index.get("models", []))
            elif operation == "load":
                client.load_model(name, headers=headers)
                value = None
            else:
                client.unload_model(name, headers=headers)
                value = None
            results.append({"value": value})
        except InferenceServerException as e:
            results.append({"error": {"status": e.status(), "message": e.message()}})
    http.close()
    grpc.close()
    print(json.dumps(results))


if __name__ == "__main__":
    main()

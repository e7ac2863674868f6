"""A corpus of requests no client library would send: REST bodies with a field of the wrong JSON
type, and raw bytes the HTTP parser or a route must refuse. Each is the client's fault, so none
may get a 5xx (tests/integration/server/test_bad_input.py, and the fuzzing's checks in
test_openapi.py)."""

from __future__ import annotations

import socket
from typing import Any

ROW = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
OIP = "/v2/models/tiny/infer"
TFS = "/v1/models/tiny:predict"


def deep(value: Any, levels: int) -> Any:
    """``value`` inside ``levels`` one-element lists (JSON parsers stop at some depth)."""
    for _ in range(levels):
        value = [value]
    return value


X = {"name": "x", "datatype": "FP32", "shape": [1, 8], "data": ROW}

# (path, JSON body or raw bytes): every typed field given a value of the wrong JSON type.
REST_CASES = [
    # Was 500 (TypeError: unhashable type: 'list').
    (OIP, {"inputs": [X], "outputs": [{"name": [1]}]}),
    (OIP, {"inputs": [X], "outputs": [{"name": {"a": 1}}]}),
    (OIP, {"inputs": [X], "outputs": [{}]}),
    (OIP, {"inputs": [X], "outputs": [{"name": "y", "parameters": []}]}),
    (OIP, {"inputs": [X], "outputs": [{"name": "y", "parameters": {"binary_data": "yes"}}]}),
    (OIP, {"inputs": [X], "outputs": [1]}),
    (OIP, {"inputs": [X], "outputs": {"name": "y"}}),
    (OIP, {"inputs": [X], "parameters": [1]}),
    (OIP, {"inputs": [X], "parameters": None}),
    (OIP, {"inputs": [X], "parameters": {"signature_name": 5}}),
    (OIP, {"inputs": [X], "parameters": {"binary_data_output": 1}}),
    (OIP, {"inputs": [X], "id": [1]}),
    (OIP, {"inputs": [X], "id": {"a": 1}}),
    (OIP, {"inputs": [X | {"datatype": ["FP32"]}]}),
    (OIP, {"inputs": [X | {"datatype": {"FP32": 1}}]}),
    (OIP, {"inputs": [X | {"datatype": None}]}),
    (OIP, {"inputs": [X | {"name": ["x"]}]}),
    (OIP, {"inputs": [X | {"shape": [[1], 8]}]}),
    (OIP, {"inputs": [X | {"shape": [1, "8"]}]}),
    (OIP, {"inputs": [X | {"shape": [1, None]}]}),
    (OIP, {"inputs": [X | {"shape": [1, 8.0]}]}),
    (OIP, {"inputs": [X | {"shape": 8}]}),
    (OIP, {"inputs": [X | {"shape": [1] * 65}]}),
    (OIP, {"inputs": [X | {"shape": [2**70, 8]}]}),
    (OIP, {"inputs": [X | {"shape": [-1, 8]}]}),
    (OIP, {"inputs": [X | {"parameters": {"binary_data_size": "32"}}]}),
    (OIP, {"inputs": [X | {"parameters": 1}]}),
    (OIP, {"inputs": [X | {"data": {"a": 1}}]}),
    (OIP, {"inputs": [X | {"data": [[1.0], [[2.0]]]}]}),
    (OIP, {"inputs": [X | {"data": ["a"] * 8}]}),
    (OIP, {"inputs": [X | {"data": [1e400] * 8}]}),
    (OIP, {"inputs": [X | {"data": [None] * 8}]}),
    (OIP, {"inputs": [X, X]}),
    (OIP, {"inputs": 1}),
    (OIP, []),
    (OIP, b"\xff\xfe"),
    (OIP, b"[" * 100_000),
    (OIP, {"inputs": [X | {"data": deep(ROW, 600)}]}),
    (OIP, {"inputs": [X | {"datatype": "BYTES", "data": deep(["a"], 600)}]}),
    (OIP, {"inputs": [X | {"datatype": "BYTES", "data": ["a"] * 8}]}),
    (OIP, {"inputs": [X | {"shape": [8], "data": ROW}]}),
    (OIP, {"inputs": [X | {"shape": [], "data": 1.0}]}),
    ("/v2/models/tiny/versions/abc/infer", {"inputs": [X]}),
    ("/v2/models/tiny/versions/-1/infer", {"inputs": [X]}),
    ("/v2/models/tiny/versions/99999999999999999999999999/infer", {"inputs": [X]}),
    ("/v2/models/tiny/versions/1e3/infer", {"inputs": [X]}),
    ("/v1/models/tiny/versions/99999999999999999999999999:predict", {"instances": [ROW]}),
    ("/v1/models/tiny/versions/-1:predict", {"instances": [ROW]}),
    ("/v1/models/tiny/labels/x:predict", {"instances": [ROW]}),
    (TFS, {"instances": [[]]}),
    (TFS, {"inputs": {"x": []}}),
    (TFS, {"inputs": {"x": [[]]}}),
    (TFS, {"inputs": deep(ROW, 600)}),
    (TFS, {"instances": deep(ROW, 600)}),
    (TFS, {"inputs": {"x": [ROW, ROW[:4]]}}),
    (TFS, {"instances": [ROW], "signature_name": 5}),
    (TFS, {"instances": [ROW], "signature_name": ["serving_default"]}),
    (TFS, {"instances": [ROW], "signature_name": "nope"}),
    (TFS, {"inputs": 1}),
    (TFS, {"inputs": "x"}),
    (TFS, {"inputs": None}),
    (TFS, {"inputs": {"x": 1, "y": 2}}),
    (TFS, {"inputs": {"x": {"a": 1}}}),
    (TFS, {"inputs": {"x": [[{"b64": 5}] * 8]}}),
    (TFS, {"instances": 1}),
    (TFS, {"instances": []}),
    (TFS, {"instances": [{"x": ROW}, ROW]}),
    (TFS, {"instances": [[ROW]]}),
    (TFS, {"instances": [ROW], "inputs": {"x": [ROW]}}),
    (TFS, {"instances": [["a"] * 8]}),
    (TFS, {"instances": [[True] * 8]}),
    (TFS, {"instances": [[1e400] * 8]}),
    (TFS, []),
    (TFS, b"\xff\xfe"),
    (TFS, b"[" * 100_000),
]


def shown(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)[:60]


# Requests the HTTP parser itself refuses (before any route sees them).
UNPARSEABLE = [
    b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n",
    b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
    b"Content-Length: 3\r\n\r\n{}",
    b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
    b"\r\nzz\r\n{}\r\n0\r\n\r\n",
]
RAW_REQUESTS = [
    *UNPARSEABLE,
    b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: "
    b"99999999999999999999999\r\nContent-Length: 2\r\n\r\n{}",
    b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: "
    b"\xd9\xa3\r\nContent-Length: 2\r\n\r\n{}",  # an Arabic-Indic digit: isdigit() is True
    b"GET /v1/models/%ff%fe HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /v2/models/tiny/versions/%00/ready HTTP/1.1\r\nHost: x\r\n\r\n",
    b"BREW /v2 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(32),  # a TLS hello
]


def exchange(port: int, raw: bytes) -> bytes:
    """``raw`` sent on a fresh connection, and all the server sent back before it closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer

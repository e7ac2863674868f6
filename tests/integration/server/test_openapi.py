"""The REST API's OpenAPI document (``/openapi.json``) against a real ``sharedserve serve``:
TF Serving's ``/v1`` paths, the Open Inference Protocol's ``/v2`` ones and sharedserve's own.

It must be valid OpenAPI 3.1, every operation in it must answer as documented, and a bounded,
seeded schemathesis run over all of them must get only documented statuses, content types and
bodies: no 500 anywhere, and no 5xx but a documented 501 (``:classify``) or 503. Every check
schemathesis has is on: a method a path does not take is 405 with ``Allow``, a schema-valid
request is accepted and a broken one refused.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

import jsonschema_rs
import pytest
import requests
import schemathesis

# The OpenAPI 3.1 meta-schema, as schemathesis ships it for its own checks: no extra dependency.
from schemathesis.specs.openapi.definitions import OPENAPI_31

from sharedserve.server.wire.tfserving.openapi import build_openapi
from tests.support import bad_requests as bad_input
from tests.support.servers import Server

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

ROW = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
MAX_BODY_BYTES = 65536  # tiny_server's --max-body-bytes
PATH_PARAMETERS = {"name": "tiny", "version": 1, "label": "stable"}
OIP_BODY = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": ROW}]}

# Deterministic: a fixed seed, derandomized generation and no example database, so every run
# sends the same requests. Bounded: at most 100 examples an operation.
FUZZ = {
    "seed": 15011,
    "suppress-health-check": ["all"],  # they time generation: a busy machine would fail them
    "request-timeout": 30,
    "generation": {
        "mode": "all",  # schema-valid requests, and ones broken on purpose
        "max-examples": 100,
        "deterministic": True,
        "database": "none",
    },
    "phases": {"stateful": {"enabled": False}},  # one model: nothing to create, nothing to chain
    # Every check schemathesis has, with its defaults, so that a new mismatch between the
    # document and the server (an undocumented status, a 405 without Allow) fails this file.
    "checks": {
        # 501 and 503 are the documented 5xx, and status_code_conformance holds each to the
        # operations that document it. Anything else, 500 above all, is a bug.
        "not_a_server_error": {"expected-statuses": ["2XX", "4XX", 501, 503]},
    },
    # A schema-valid request must get a 2XX, but where the document cannot say more: the
    # predict and infer bodies are the protocols' generic shapes, not tiny's tensors (400, or
    # 404 for a signature or output it lacks), a label is never assigned, and :classify and
    # :regress are not offered.
    "operations": [
        {
            "include-path-regex": regex,
            "checks": {"positive_data_acceptance": {"expected-statuses": statuses}},
        }
        for regex, statuses in [
            (r"(:predict|/infer)$", ["2XX", 400, 404]),
            (r"/labels/", [404]),
            (r"(:classify|:regress)$", [501]),
            # tiny_server serves one --model, loaded at start: loads and unloads are refused.
            (r"^/v2/repository/models/", [400]),
        ]
    ],
}

# Built at collection, as schemathesis makes one test per operation from a schema it has then
# (its fixture-based loader fails on pytest 9.2). The first test checks that the server serves
# exactly this document.
schema = schemathesis.openapi.from_dict(
    build_openapi("tiny", 1, MAX_BODY_BYTES), config=schemathesis.Config.from_dict(FUZZ)
)


def test_document_is_valid_openapi_3_1(tiny_server: Server) -> None:
    response = tiny_server.client.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    document = response.json()
    assert document == schema.raw_schema == build_openapi("tiny", 1, MAX_BODY_BYTES)
    jsonschema_rs.validator_for(OPENAPI_31).validate(document)
    for definition in document["components"]["schemas"].values():
        jsonschema_rs.meta.validate(definition)  # OpenAPI 3.1's dialect: JSON Schema 2020-12
    # FastAPI's own pages stay off: they would describe the catch-all routes, wrongly.
    for path in ("/docs", "/redoc"):
        assert tiny_server.client.get(path).status_code == 404


# Every documented operation, and what a well-formed request to it gets.
EXPECTED = {
    ("get", "/v1/models/{name}"): 200,
    ("get", "/v1/models/{name}/metadata"): 200,
    ("post", "/v1/models/{name}:predict"): 200,
    ("post", "/v1/models/{name}:classify"): 501,
    ("post", "/v1/models/{name}:regress"): 501,
    ("get", "/v1/models/{name}/versions/{version}"): 200,
    ("get", "/v1/models/{name}/versions/{version}/metadata"): 200,
    ("post", "/v1/models/{name}/versions/{version}:predict"): 200,
    ("post", "/v1/models/{name}/versions/{version}:classify"): 501,
    ("post", "/v1/models/{name}/versions/{version}:regress"): 501,
    ("get", "/v1/models/{name}/labels/{label}"): 404,
    ("get", "/v1/models/{name}/labels/{label}/metadata"): 404,
    ("post", "/v1/models/{name}/labels/{label}:predict"): 404,
    ("post", "/v1/models/{name}/labels/{label}:classify"): 404,
    ("post", "/v1/models/{name}/labels/{label}:regress"): 404,
    ("get", "/metrics"): 200,
    ("get", "/sharedserve/v1/limits"): 200,
    ("get", "/openapi.json"): 200,
    ("get", "/v2"): 200,
    ("get", "/v2/health/live"): 200,
    ("get", "/v2/health/ready"): 200,
    ("get", "/v2/models/{name}"): 200,
    ("get", "/v2/models/{name}/ready"): 200,
    ("post", "/v2/models/{name}/infer"): 200,
    ("get", "/v2/models/{name}/versions/{version}"): 200,
    ("get", "/v2/models/{name}/versions/{version}/ready"): 200,
    ("post", "/v2/models/{name}/versions/{version}/infer"): 200,
    ("post", "/v2/repository/index"): 200,
    ("post", "/v2/repository/models/{name}/load"): 400,
    ("post", "/v2/repository/models/{name}/unload"): 400,
}


def call(server: Server, method: str, path: str, body: Any = None, **params: Any) -> int:
    """One request through schemathesis, with the fuzz run's checks; returns the status."""
    in_path = {k: v for k, v in (PATH_PARAMETERS | params).items() if "{" + k + "}" in path}
    body_args = {} if body is None else {"body": body, "media_type": "application/json"}
    case = schema[path][method.upper()].Case(path_parameters=in_path, **body_args)
    return int(case.call_and_validate(base_url=server.base).status_code)


def test_every_documented_operation_answers_as_documented(tiny_server: Server) -> None:
    paths = schema.raw_schema["paths"]
    documented = {(method, path) for path, item in paths.items() for method in item}
    assert documented - {("parameters", path) for path in paths} == set(EXPECTED)
    for (method, path), status in EXPECTED.items():
        body = {"instances": [ROW]} if path.endswith(":predict") else None
        body = OIP_BODY if path.endswith("/infer") else body
        assert call(tiny_server, method, path, body) == status, (method, path)


PREDICT = "/v1/models/{name}:predict"
PREDICT_VERSION = "/v1/models/{name}/versions/{version}:predict"
INFER = "/v2/models/{name}/infer"
INFER_VERSION = "/v2/models/{name}/versions/{version}/infer"
SHORT = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3], "data": ROW[:3]}]}


@pytest.mark.parametrize(
    ("path", "params", "body", "status"),
    [
        (PREDICT, {}, {"inputs": {"x": [ROW, ROW]}}, 200),
        (PREDICT, {}, {"instances": [ROW[:3]]}, 400),
        (PREDICT_VERSION, {"version": "x"}, {"inputs": [ROW]}, 400),
        (PREDICT_VERSION, {"version": "9" * 4301}, {"inputs": [ROW]}, 400),  # was a 500
        (PREDICT, {"name": "other"}, {"inputs": [ROW]}, 404),
        (PREDICT_VERSION, {"version": 2}, {"inputs": [ROW]}, 404),
        (PREDICT, {}, {"instances": [ROW] * 2000}, 413),  # over MAX_BODY_BYTES
        (INFER, {}, SHORT, 400),
        (INFER_VERSION, {"version": "x"}, OIP_BODY, 400),
        (INFER, {"name": "other"}, OIP_BODY, 404),
        (INFER_VERSION, {"version": "2"}, OIP_BODY, 404),
        (INFER, {}, {"inputs": [OIP_BODY["inputs"][0] | {"data": ROW * 2000}]}, 413),
    ],
    ids=[
        "columnar",
        "shape",
        "version",
        "4301-digits",
        "other-model",
        "other-version",
        "large",
        "oip-shape",
        "oip-version",
        "oip-other-model",
        "oip-other-version",
        "oip-large",
    ],
)
def test_answers_conform(
    tiny_server: Server, path: str, params: dict[str, Any], body: Any, status: int
) -> None:
    assert call(tiny_server, "post", path, body, **params) == status


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        # TF Serving's catch-all routes: the path's verb, not the route, decides what it takes.
        ("PUT", "/v1/models/tiny:predict", "POST"),
        ("POST", "/v1/models/tiny/labels/stable/metadata", "GET"),  # not the label's 404
        ("DELETE", "/v2/models/tiny/versions/1/infer", "POST"),
        ("POST", "/v2/health/live", "GET"),
        ("PATCH", "/openapi.json", "GET"),
    ],
)
def test_a_method_not_taken_is_405_with_allow(
    tiny_server: Server, method: str, path: str, allow: str
) -> None:
    response = tiny_server.client.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allow
    assert list(response.json()) == ["error"]


@schema.parametrize()
def test_fuzzed_requests_get_documented_answers(
    case: schemathesis.Case, tiny_server: Server
) -> None:
    case.call_and_validate(base_url=tiny_server.base)


# The hand-written bad-request corpus (tests/support/bad_requests.py), held to the same checks as
# the generated requests above: a documented status, content type and body for each, no 5xx.
def operation_of(path: str) -> tuple[str, dict[str, str]]:
    """The documented path a concrete one is an instance of, and its path parameters."""
    for template in schema.raw_schema["paths"]:
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/:]+)", re.escape(template))
        if match := re.fullmatch(pattern, path):
            return template, {k: unquote(v) for k, v in match.groupdict().items()}
    raise AssertionError(f"no documented path for {path}")


@pytest.mark.parametrize(("path", "body"), bad_input.REST_CASES, ids=bad_input.shown)
def test_the_bad_input_corpus_gets_documented_answers(
    tiny_server: Server, path: str, body: Any
) -> None:
    template, params = operation_of(path)
    # The very bytes test_bad_input sends (json.dumps writes 1e400 as Infinity).
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    case = schema[template]["POST"].Case(
        path_parameters=params, body=content, media_type="application/json"
    )
    response = case.call_and_validate(base_url=tiny_server.base)
    assert 400 <= response.status_code < 500


def parsed(answer: bytes, method: str, url: str) -> schemathesis.Response:
    """A raw HTTP answer to ``method url`` as the response schemathesis' checks read."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, list[str]] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    length = int(headers.get("content-length", [len(body)])[0])
    return schemathesis.Response(
        status_code=int(status_line.split()[1]),
        headers=headers,
        content=body[:length],
        request=requests.Request(method, url).prepare(),
        elapsed=0.0,
        verify=True,
    )


@pytest.mark.parametrize("raw", bad_input.RAW_REQUESTS, ids=lambda r: repr(r)[:50])
def test_the_raw_socket_corpus_gets_documented_answers(tiny_server: Server, raw: bytes) -> None:
    # Sent on a raw socket (no HTTP client sends these); the answer, if any, goes through the
    # same checks as a response schemathesis got itself, for the operation it was sent to.
    answer = bad_input.exchange(tiny_server.port, raw)
    assert not answer.startswith((b"HTTP/1.1 5", b"HTTP/1.0 5")), answer[:300]
    line = re.match(rb"([A-Z]+) (/[^ ?]*)\S* HTTP/1\.1\r\n", raw)
    if not answer or line is None:
        return  # closed without an answer, or not HTTP (a TLS hello): nothing to hold to
    method, path = (part.decode("latin-1") for part in line.groups())
    template, params = operation_of(path)
    try:
        operation = schema[template][method]
    except LookupError:
        return  # BREW /v2: a method no operation has
    case = operation.Case(path_parameters=params, media_type="application/json")
    case.validate_response(parsed(answer, method, tiny_server.base + path))

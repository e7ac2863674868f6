"""The management key: with ``--admin-key-file``, every management route and RPC answers 401 /
UNAUTHENTICATED without the key and works with it; inference, health, status, metadata and
metrics stay open. The routes are listed from the app and the RPCs from the services'
descriptors, so a route or RPC added later fails here until it is classified.

Clients: httpx (REST), TF Serving's own gRPC client (metadata), NVIDIA's tritonclient (headers).
One server in this process on a repository of ``tiny``.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from fastapi.routing import APIRoute
from google.protobuf import text_format
from grpc_health.v1 import health_pb2
from tensorflow_serving.apis import (
    model_management_pb2,
    model_service_pb2,
    model_service_pb2_grpc,
    prediction_service_pb2,
)

from sharedserve.server import ADMIN_HEADER, MODEL_INFER_METHOD, AdminSettings, oip_pb2
from sharedserve.server.process.admin import MANAGEMENT_RPCS, is_management_route
from sharedserve.server.repository import RepositoryCatalog
from tests.support.in_process import InProcess, loopback_settings, serving_in_process
from tests.support.servers import clean_env, run_cli
from tests.support.triton_client import TritonClient

pytestmark = [pytest.mark.tensorflow]

KEY = "k3y-" + "0123456789abcdef" * 3
WRONG = "wr0ng-" + "fedcba9876543210" * 3
BODY = {"instances": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]}
SCRIPT = Path(__file__).parents[2] / "support" / "triton_repository.py"

# Every route and RPC that is NOT management, by name: one added later must be put here (open)
# or be management by admin.py's rule; otherwise the test that lists them fails.
OPEN_ROUTES = {
    # TF Serving's API: one route parses every /v1/models path (status, metadata, predict);
    # the methods it does not serve answer 405 there.
    *(
        (method, "/v1/models/{path:path}")
        for method in ("GET", "POST", "DELETE", "OPTIONS", "PATCH", "PUT", "TRACE")
    ),
    ("GET", "/v2"),
    ("GET", "/v2/health/live"),
    ("GET", "/v2/health/ready"),
    ("GET", "/v2/models/{name}"),
    ("GET", "/v2/models/{name}/ready"),
    ("GET", "/v2/models/{name}/versions/{version}"),
    ("GET", "/v2/models/{name}/versions/{version}/ready"),
    ("POST", "/v2/models/{name}/infer"),
    ("POST", "/v2/models/{name}/versions/{version}/infer"),
    ("GET", "/metrics"),
    ("GET", "/sharedserve/v1/limits"),
    ("GET", "/openapi.json"),
}
OPEN_RPCS = {
    "/tensorflow.serving.PredictionService/Classify",
    "/tensorflow.serving.PredictionService/Regress",
    "/tensorflow.serving.PredictionService/Predict",
    "/tensorflow.serving.PredictionService/MultiInference",
    "/tensorflow.serving.PredictionService/GetModelMetadata",
    "/tensorflow.serving.ModelService/GetModelStatus",
    "/inference.GRPCInferenceService/ServerLive",
    "/inference.GRPCInferenceService/ServerReady",
    "/inference.GRPCInferenceService/ModelReady",
    "/inference.GRPCInferenceService/ServerMetadata",
    "/inference.GRPCInferenceService/ModelMetadata",
    "/inference.GRPCInferenceService/ModelInfer",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/List",
    "/grpc.health.v1.Health/Watch",
}
SERVICES = [
    prediction_service_pb2.DESCRIPTOR.services_by_name["PredictionService"],
    model_service_pb2.DESCRIPTOR.services_by_name["ModelService"],
    oip_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"],
    health_pb2.DESCRIPTOR.services_by_name["Health"],
]


@pytest.fixture(scope="module")
def triton(request: pytest.FixtureRequest) -> TritonClient:
    return TritonClient(request.config.cache.mkdir("tritonclient-env"))


@pytest.fixture(scope="module")
def root(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("admin") / "repo"
    shutil.copytree(models_dir / "tiny", root / "tiny")
    shutil.copytree(models_dir / "tiny", root / "spare")
    return root


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[InProcess]:
    settings = loopback_settings(model_repository=root, admin=AdminSettings(KEY))
    with serving_in_process(RepositoryCatalog(root, None), settings) as served:
        yield served


def _routes(server: InProcess) -> list[tuple[str, str]]:
    return sorted(
        (method, route.path)
        for route in server.server.app.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    )


def _filled(path: str) -> str:
    # A model that exists, so that an open route answers as it would to a client.
    filled = {"{version}": "1", "{path:path}": "tiny"}
    return re.sub(r"\{[a-z:]+\}", lambda m: filled.get(m.group(0), "tiny"), path)


def test_every_route_is_management_or_known_open(server: InProcess) -> None:
    routes = _routes(server)
    assert routes, "the app lists no routes"
    unclassified = [r for r in routes if not is_management_route(*r) and r not in OPEN_ROUTES]
    assert not unclassified, f"routes neither management nor known open: {unclassified}"
    assert any(is_management_route(*r) for r in routes)


def test_every_management_route_needs_the_key(server: InProcess) -> None:
    with httpx.Client(base_url=server.base, timeout=60) as client:
        for method, path in _routes(server):
            if not is_management_route(method, path):
                continue
            for headers in ({}, {ADMIN_HEADER: WRONG}, {ADMIN_HEADER: ""}):
                answer = client.request(method, _filled(path), headers=headers, json={})
                assert answer.status_code == 401, (method, path, headers, answer.text)
                assert ADMIN_HEADER in answer.json()["error"]
                assert ADMIN_HEADER in answer.headers["www-authenticate"]
                assert KEY not in answer.text and WRONG not in answer.text
        with_key = client.post("/v2/repository/index", headers={ADMIN_HEADER: KEY})
        assert with_key.status_code == 200, with_key.text
        assert {row["name"] for row in with_key.json()} >= {"tiny", "spare"}


def test_open_routes_answer_without_the_key(server: InProcess) -> None:
    with httpx.Client(base_url=server.base, timeout=60) as client:
        for method, path in _routes(server):
            if is_management_route(method, path):
                continue
            body = BODY if method == "POST" else None
            answer = client.request(method, _filled(path), json=body)
            assert answer.status_code != 401, (method, path, answer.text)
        assert client.post("/v1/models/tiny:predict", json=BODY).status_code == 200
        assert client.get("/v2/health/ready").status_code == 200


# The OIP messages' package is sharedserve's own (tritonclient's may share a process); the
# service is served under the protocol's name.
SERVED_AS = {"sharedserve.oip.GRPCInferenceService": MODEL_INFER_METHOD.split("/")[1]}


def _all_rpcs() -> list[tuple[str, bool]]:
    """(full method name, server streaming) of every service the server offers."""
    return [
        (f"/{SERVED_AS.get(service.full_name, service.full_name)}/{method.name}", streams)
        for service in SERVICES
        for method in service.methods
        for streams in [method.server_streaming]
    ]


def _call(
    target: str, method: str, streaming: bool, metadata: list[tuple[str, str]]
) -> grpc.StatusCode:
    with grpc.insecure_channel(target) as channel:
        try:
            if streaming:
                call = channel.unary_stream(method)(b"", metadata=metadata, timeout=10)
                next(iter(call))
                call.cancel()
            else:
                channel.unary_unary(method)(b"", metadata=metadata, timeout=30)
        except grpc.RpcError as e:
            return e.code()
    return grpc.StatusCode.OK


def test_every_rpc_is_management_or_known_open(server: InProcess) -> None:
    names = {name for name, _ in _all_rpcs()}
    assert names >= MANAGEMENT_RPCS, MANAGEMENT_RPCS - names
    assert names - MANAGEMENT_RPCS == OPEN_RPCS


def test_every_management_rpc_needs_the_key_and_the_others_do_not(server: InProcess) -> None:
    for method, streaming in _all_rpcs():
        for metadata in ([], [(ADMIN_HEADER, WRONG)]):
            code = _call(server.grpc_target, method, streaming, metadata)
            if method in MANAGEMENT_RPCS:
                assert code is grpc.StatusCode.UNAUTHENTICATED, (method, metadata)
            else:
                assert code is not grpc.StatusCode.UNAUTHENTICATED, method


def _reload(server: InProcess, root: Path, metadata: list[tuple[str, str]]) -> object:
    request = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(
        f"model_config_list {{ config {{ name: 'tiny' base_path: '{root}/tiny' }} }}",
        request.config,
    )
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        return stub.HandleReloadConfigRequest(request, metadata=metadata, timeout=120)


def test_tf_serving_client_reloads_with_the_key_in_metadata(server: InProcess, root: Path) -> None:
    served = server.server.registry.served()
    with pytest.raises(grpc.RpcError) as refused:
        _reload(server, root, [(ADMIN_HEADER, WRONG)])
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert server.server.registry.served() == served  # nothing unloaded
    # With the key: served as the config says (spare unloaded, tiny kept).
    response = _reload(server, root, [(ADMIN_HEADER, KEY)])
    assert response.status.error_message == ""  # type: ignore[attr-defined]
    assert set(server.server.registry.served()) == {"tiny"}


def test_a_refusal_is_logged_with_its_reason_never_the_value(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A server of its own: the log is throttled, and its first refusal is always logged.
    settings = loopback_settings(model_repository=root, admin=AdminSettings(KEY))
    with (
        serving_in_process(RepositoryCatalog(root, None), settings) as served,
        caplog.at_level(logging.WARNING, logger="sharedserve.server.process.admin"),
        pytest.raises(grpc.RpcError),
    ):
        _reload(served, root, [(ADMIN_HEADER, WRONG)])
    logged = caplog.text
    assert "HandleReloadConfigRequest" in logged and "not the server's management key" in logged
    assert WRONG not in logged and KEY not in logged


def test_tritonclient_sends_the_key_as_a_header(
    server: InProcess, triton: TritonClient, root: Path
) -> None:
    arguments = {
        "http": server.base.removeprefix("http://"),
        "grpc": server.grpc_target,
        "calls": [
            ["http", "load", "tiny"],
            ["grpc", "load", "tiny"],
        ],
    }
    refused = triton.run(SCRIPT, arguments)
    assert len(refused) == 2
    assert all(ADMIN_HEADER in r["error"]["message"] for r in refused), refused
    allowed = triton.run(SCRIPT, {**arguments, "headers": {ADMIN_HEADER: KEY}})
    assert allowed == [{"value": None}, {"value": None}]


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--admin-key-file", "KEYFILE"], {"SHAREDSERVE_ADMIN_KEY": KEY}, "not both"),
        (["--admin-key-file", "SHORT"], {}, "at least 32"),
        (["--admin-key-file", "MISSING"], {}, "cannot read"),
        (["--admin-header", "Bad Header"], {}, "--admin-header"),
    ],
)
def test_bad_management_settings_are_refused_at_start(
    args: list[str], env: dict[str, str], expected: str, root: Path, tmp_path: Path
) -> None:
    (tmp_path / "KEYFILE").write_text(KEY + "\n")
    (tmp_path / "SHORT").write_text("short\n")
    named = [str(tmp_path / a) if a in ("KEYFILE", "SHORT", "MISSING") else a for a in args]
    done = run_cli(
        "serve", "--model-repository", str(root), *named, env=clean_env(**env), timeout=60
    )
    assert done.returncode != 0
    assert expected in done.stderr + done.stdout, done.stderr
    assert KEY not in done.stderr + done.stdout

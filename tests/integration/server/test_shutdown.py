"""SIGTERM under load, as Kubernetes sends it in a rolling update: readiness turns not-ready at
once (REST and gRPC, the standard gRPC health service included) while liveness stays up and
requests are still served for the drain delay; then the listeners close, idle keep-alive
connections are closed, requests in flight finish, and a client trickling a body does not hold
the process past the shutdown grace. Exit code 0.

One server, stopped once (the module's fixture); each test reads what that stop showed.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sharedserve.server.protos.oip import MODEL_INFER_METHOD, SERVICE
from sharedserve.server.protos.oip import grpc_predict_v2_pb2 as oip
from tests.support.servers import Server

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

DRAIN_S, GRACE_S = 4.0, 10.0
ROW = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
PREDICT = "/v1/models/tiny:predict"
BODY = json.dumps({"instances": [ROW]}).encode()
DEADLINE_S = 30.0  # generous, and well below the 75 s keep-alive timeout idle connections had


@dataclass
class Stop:
    """What clients saw around one SIGTERM."""

    before: dict[str, Any] = field(default_factory=dict)
    draining: dict[str, Any] = field(default_factory=dict)
    rest_load: Counter[str] = field(default_factory=Counter)
    grpc_load: Counter[str] = field(default_factory=Counter)
    in_flight: tuple[int, str] | None = None
    idle_rest_eof: bool = False
    idle_grpc_left_ready: bool = False
    trickle_cut: bool = False
    exit_code: int | None = None
    log: str = ""


def _get(port: int, path: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def _unary(channel: grpc.Channel, method: str, request: Any, reply: type) -> Any:
    call = channel.unary_unary(
        method,
        request_serializer=type(request).SerializeToString,
        response_deserializer=reply.FromString,
    )
    return call(request, timeout=DEADLINE_S)


def _infer_request() -> Any:
    request = oip.ModelInferRequest(model_name="tiny")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, len(ROW)])
    tensor.contents.fp32_contents.extend(ROW)
    return request


def _readiness(port: int, channel: grpc.Channel) -> dict[str, Any]:
    """Every readiness and liveness answer, REST and gRPC, and whether predictions work."""
    health = health_pb2_grpc.HealthStub(channel)
    status = _get(port, "/v1/models/tiny")[1]["model_version_status"][0]["state"]
    predicted = _unary(channel, MODEL_INFER_METHOD, _infer_request(), oip.ModelInferResponse)
    return {
        "rest_ready": _get(port, "/v2/health/ready")[0],
        "rest_model_ready": _get(port, "/v2/models/tiny/ready")[0],
        "rest_live": _get(port, "/v2/health/live")[0],
        "tfs_status": status,
        "grpc_health": health.Check(health_pb2.HealthCheckRequest(), timeout=DEADLINE_S).status,
        "grpc_health_model": health.Check(
            health_pb2.HealthCheckRequest(service="tiny"), timeout=DEADLINE_S
        ).status,
        "grpc_ready": _unary(
            channel, f"/{SERVICE}/ServerReady", oip.ServerReadyRequest(), oip.ServerReadyResponse
        ).ready,
        "grpc_live": _unary(
            channel, f"/{SERVICE}/ServerLive", oip.ServerLiveRequest(), oip.ServerLiveResponse
        ).live,
        "rest_predict": _post(port),
        "grpc_predict": len(predicted.outputs),
    }


def _post(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
    try:
        conn.request("POST", PREDICT, BODY, {"content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _rest_load(port: int, tally: Counter[str], stopped: threading.Event) -> None:
    """A keep-alive client predicting in a loop; it leaves when told the connection closes (a
    pooled client then goes to another endpoint) or when refused. Anything else is lost."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
    try:
        while True:
            conn.request("POST", PREDICT, BODY, {"content-type": "application/json"})
            response = conn.getresponse()
            response.read()
            tally["ok" if response.status == 200 else f"status {response.status}"] += 1
            if response.getheader("connection", "").lower() == "close":
                tally["told to close" if stopped.is_set() else "closed before SIGTERM"] += 1
                return
    except ConnectionRefusedError:
        tally["refused"] += 1
    except Exception as e:
        tally[f"lost: {e!r}"] += 1
    finally:
        conn.close()


# A gRPC client that watches the standard health service (client-side health checking) and
# stops sending to a backend that is NOT_SERVING, as it should in front of several replicas: a
# call merely sent when gRPC core stops the server can be cancelled by it unanswered.
HEALTH_CHECKED = json.dumps(
    {"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}}
)


def _grpc_load(target: str, tally: Counter[str]) -> None:
    """Predictions on one health-checked channel until it has no healthy backend left; any other
    error is a lost call."""
    options = [("grpc.service_config", HEALTH_CHECKED)]
    with grpc.insecure_channel(target, options=options) as channel:
        while True:
            try:
                _unary(channel, MODEL_INFER_METHOD, _infer_request(), oip.ModelInferResponse)
                tally["ok"] += 1
            except grpc.RpcError as e:
                code, details = e.code(), e.details()  # type: ignore[attr-defined]
                unhealthy = code is grpc.StatusCode.UNAVAILABLE and "unhealthy" in details
                tally["left: unhealthy" if unhealthy else f"lost: {code} {details}"] += 1
                return


def _trickle(port: int, stop: Stop) -> None:
    """A body declared large and sent a byte at a time, faster than the body timeout."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: 1000000\r\n\r\n{{".encode()
        )
        try:
            while True:
                time.sleep(0.5)
                sock.sendall(b" ")
        except OSError:
            stop.trickle_cut = True


def _wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {what}"
        time.sleep(0.05)


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def _held_in_flight(port: int) -> socket.socket:
    """A prediction whose headers and first half of body are sent; the rest comes later."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
    head = f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(BODY)}\r\n\r\n"
    sock.sendall(head.encode() + BODY[: len(BODY) // 2])
    return sock


def _finish_in_flight(sock: socket.socket) -> tuple[int, str]:
    with sock:
        sock.sendall(BODY[len(BODY) // 2 :])
        response = http.client.HTTPResponse(sock)
        response.begin()
        response.read()
        return response.status, (response.getheader("connection") or "")


@pytest.fixture(scope="module")
def stop(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stop]:
    log = tmp_path_factory.mktemp("shutdown") / "serve.log"
    flags = ["--drain-delay", str(DRAIN_S), "--shutdown-grace", str(GRACE_S)]
    server = Server(models_dir / "tiny", log, flags)
    seen = Stop()
    threads: list[threading.Thread] = []
    try:
        server.wait_available("tiny")
        channel = grpc.insecure_channel(server.grpc_target)
        seen.before = _readiness(server.port, channel)
        # Held idle: a REST keep-alive connection and a gRPC channel, each after one call.
        idle_rest = http.client.HTTPConnection("127.0.0.1", server.port, timeout=DEADLINE_S)
        idle_rest.request("GET", "/v2/health/live")
        idle_rest.getresponse().read()
        idle_grpc = grpc.insecure_channel(server.grpc_target)
        _unary(idle_grpc, f"/{SERVICE}/ServerLive", oip.ServerLiveRequest(), oip.ServerLiveResponse)
        states: list[grpc.ChannelConnectivity] = []
        idle_grpc.subscribe(states.append)

        signalled = threading.Event()
        for _ in range(2):
            threads.append(
                threading.Thread(target=_rest_load, args=(server.port, seen.rest_load, signalled))
            )
            threads.append(
                threading.Thread(target=_grpc_load, args=(server.grpc_target, seen.grpc_load))
            )
        threads.append(threading.Thread(target=_trickle, args=(server.port, seen)))
        for thread in threads:
            thread.start()
        _wait_until(lambda: seen.rest_load["ok"] > 20 and seen.grpc_load["ok"] > 20, "load")

        signalled.set()
        server.process.send_signal(signal.SIGTERM)
        # Not ready at once; polled rather than assumed, so a slow signal delivery is no flake.
        _wait_until(lambda: _get(server.port, "/v2/health/ready")[0] == 503, "not ready")
        held = _held_in_flight(server.port)
        seen.draining = _readiness(server.port, channel)
        channel.close()

        # The drain delay ends: the listener closes, and idle connections with it.
        _wait_until(lambda: _refused(server.port), "REST listener closed")
        seen.in_flight = _finish_in_flight(held)
        idle_rest.sock.settimeout(DEADLINE_S)  # type: ignore[union-attr]
        # EOF while the process still runs (the trickled body holds it until the cut).
        eof = idle_rest.sock.recv(1) == b""  # type: ignore[union-attr]
        seen.idle_rest_eof = eof and server.process.poll() is None
        idle_rest.close()
        _wait_until(
            lambda: (
                states[-1] is not grpc.ChannelConnectivity.READY
                or server.process.poll() is not None
            ),
            "gRPC idle channel closed",
        )
        seen.idle_grpc_left_ready = server.process.poll() is None
        idle_grpc.close()

        with contextlib.suppress(Exception):
            seen.exit_code = server.process.wait(DEADLINE_S)
        for thread in threads:
            thread.join(DEADLINE_S)
        seen.log = server.log()
        yield seen
    finally:
        server.stop()


def test_readiness_turns_not_ready_while_requests_are_still_served(stop: Stop) -> None:
    serving, not_serving = (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    )
    assert stop.before == {
        "rest_ready": 200,
        "rest_model_ready": 200,
        "rest_live": 200,
        "tfs_status": "AVAILABLE",
        "grpc_health": serving,
        "grpc_health_model": serving,
        "grpc_ready": True,
        "grpc_live": True,
        "rest_predict": 200,
        "grpc_predict": 1,
    }
    assert stop.draining == {
        "rest_ready": 503,
        "rest_model_ready": 503,
        "rest_live": 200,
        "tfs_status": "UNLOADING",  # TF Serving's state for a version on its way out
        "grpc_health": not_serving,
        "grpc_health_model": not_serving,
        "grpc_ready": False,
        "grpc_live": True,
        "rest_predict": 200,
        "grpc_predict": 1,
    }, stop.log


def test_no_request_lost_and_in_flight_ones_finish(stop: Stop) -> None:
    assert not [k for k in stop.rest_load if not k.startswith(("ok", "told", "refused"))], (
        stop.rest_load
    )
    assert stop.rest_load["told to close"] + stop.rest_load["refused"] == 2, stop.rest_load
    # Both gRPC clients left when the health service said NOT_SERVING, which they watch.
    assert stop.grpc_load["left: unhealthy"] == 2, stop.grpc_load
    # Half its body was sent while draining, the rest after the listener closed: answered, and
    # told the connection closes.
    assert stop.in_flight == (200, "close"), stop.log


def test_idle_connections_are_closed_when_the_listeners_close(stop: Stop) -> None:
    assert stop.idle_rest_eof
    assert stop.idle_grpc_left_ready, "the gRPC channel stayed READY until the process exited"


def test_a_trickled_body_is_cut_at_the_grace_and_the_exit_is_0(stop: Stop) -> None:
    assert stop.exit_code == 0, stop.log
    assert stop.trickle_cut
    assert "REST connection(s) still open" in stop.log

"""TLS on both listeners (``--tls-cert-file``, ``--tls-key-file``, ``--tls-ca-file``), on the real
``sharedserve serve`` with certificates made by the test: real clients (httpx, TF Serving's gRPC
stubs, NVIDIA's tritonclient) verify the server by the test's CA; with mutual TLS a client
without a certificate is refused on both; a client that never finishes its handshake is closed
within ``--header-timeout`` and counts against ``--max-connections`` meanwhile."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from tensorflow_serving.apis import prediction_service_pb2_grpc

from tests.support import protos
from tests.support.certs import Certificates, make_certificates
from tests.support.servers import Server, run_cli, serving
from tests.support.triton_client import TritonClient

pytestmark = [pytest.mark.tensorflow]

ROWS = [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 3.0]]
HEADER_TIMEOUT = ["--header-timeout", "0.5"]
CAP = 8
CALLS = Path(__file__).parents[2] / "support" / "triton_tls_calls.py"
# The first bytes of a TLS ClientHello (record header, handshake type and length): what a
# client that stalls mid-handshake has sent.
HALF_CLIENT_HELLO = bytes.fromhex("16030100c8010000c40303") + b"\x00" * 16


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def triton(request: pytest.FixtureRequest) -> TritonClient:
    """Requested before the servers, so its venv builds while they start."""
    return TritonClient(request.config.cache.mkdir("tritonclient-env"))


@pytest.fixture(scope="module")
def server(
    models_dir: Path, certs: Certificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """TLS, any client; a short header timeout, which bounds the handshake too."""
    log = tmp_path_factory.mktemp("tls") / "serve.log"
    args = [*certs.serve_args(), *HEADER_TIMEOUT]
    yield from serving(models_dir / "tiny", log, args, tls=certs.client_context())


@pytest.fixture(scope="module")
def mutual(
    models_dir: Path, certs: Certificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """Mutual TLS, and a connection cap small enough to fill."""
    log = tmp_path_factory.mktemp("mtls") / "serve.log"
    args = [*certs.serve_args(mutual=True), "--max-connections", str(CAP)]
    context = certs.client_context(with_certificate=True)
    yield from serving(models_dir / "tiny", log, args, tls=context)


def grpc_channel(server: Server, certs: Certificates, *, with_certificate: bool) -> grpc.Channel:
    key = cert = None
    if with_certificate:
        key, cert = certs.client_key.read_bytes(), certs.client_cert.read_bytes()
    credentials = grpc.ssl_channel_credentials(certs.ca.read_bytes(), key, cert)
    return grpc.secure_channel(server.grpc_target, credentials)


def grpc_predict(channel: grpc.Channel) -> np.ndarray:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    request = protos.predict_request("tiny", {"x": np.asarray(ROWS, dtype=np.float32)})
    output = stub.Predict(request, timeout=30).outputs["probabilities"]
    return np.frombuffer(output.tensor_content, dtype=np.float32).reshape(len(ROWS), -1)


def rest_predict(server: Server) -> np.ndarray:
    answer = server.client.post("/v1/models/tiny:predict", json={"instances": ROWS})
    assert answer.status_code == 200, answer.text
    return np.asarray(answer.json()["predictions"], dtype=np.float32)


def handshakes_refused(server: Server) -> float:
    line = 'sharedserve_connections_refused_total{model="tiny",reason="tls_handshake"}'
    for sample in server.client.get("/metrics").text.splitlines():
        if sample.startswith(line):
            return float(sample.rsplit(" ", 1)[1])
    return 0.0


def closed_within(sock: socket.socket, bound_s: float = 10) -> float:
    """Seconds until the server closed ``sock`` having sent nothing (a TLS server may answer a
    half handshake with an alert: bytes, but no answer), failing past ``bound_s``."""
    started = time.monotonic()
    sock.settimeout(bound_s)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the connection was still open after {bound_s} s")
    return time.monotonic() - started


def test_start_up_says_https_and_tls(server: Server, mutual: Server) -> None:
    assert f"REST API on https://127.0.0.1:{server.port}" in server.log()
    assert f"gRPC on 127.0.0.1:{server.grpc_port} with TLS" in server.log()
    assert "mutual TLS" in mutual.log() and "mutual TLS" not in server.log()


def test_rest_and_grpc_predict_over_tls_agree(server: Server, certs: Certificates) -> None:
    over_rest = rest_predict(server)  # httpx, verifying the server by the CA alone
    with grpc_channel(server, certs, with_certificate=False) as channel:
        over_grpc = grpc_predict(channel)
    assert over_rest.shape == (2, 4)
    np.testing.assert_allclose(over_grpc, over_rest, rtol=1e-5)


def test_a_client_that_does_not_trust_the_ca_is_refused_the_connection(server: Server) -> None:
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{server.base}/v1/models/tiny", verify=ssl.create_default_context())


def test_tritonclient_over_https_and_grpc_tls(
    triton: TritonClient, server: Server, mutual: Server, certs: Certificates
) -> None:
    expected = rest_predict(server)
    for target, cert, key in (
        (server, None, None),
        (mutual, str(certs.client_cert), str(certs.client_key)),
    ):
        arguments = {
            "http": f"127.0.0.1:{target.port}",
            "grpc": target.grpc_target,
            **{"ca": str(certs.ca), "cert": cert, "key": key},
            **{"model": "tiny", "input": "x", "output": "probabilities", "rows": ROWS},
        }
        answers = triton.run(CALLS, arguments)
        for protocol in ("http", "grpc"):
            answer = answers[protocol]
            assert answer.get("ready") is True, (target.base, protocol, answer)
            np.testing.assert_allclose(answer["values"], expected, rtol=1e-5)


def test_mutual_tls_refuses_clients_without_a_certificate(
    mutual: Server, certs: Certificates
) -> None:
    # TLS 1.3 finishes the client's side of the handshake before the server checks its
    # certificate: the refusal arrives as an alert on the first read, not at connect.
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{mutual.base}/v1/models/tiny", verify=certs.client_context())
    with (
        grpc_channel(mutual, certs, with_certificate=False) as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        grpc_predict(channel)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    # With one, both serve (the fixture's client presents it).
    expected = rest_predict(mutual)
    with grpc_channel(mutual, certs, with_certificate=True) as channel:
        np.testing.assert_allclose(grpc_predict(channel), expected, rtol=1e-5)


def test_plain_text_to_a_tls_port_fails_cleanly_and_the_server_serves_on(
    server: Server,
) -> None:
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{server.port}/v1/models/tiny", timeout=10)
    with (
        grpc.insecure_channel(server.grpc_target) as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        grpc_predict(channel)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert server.client.get("/v1/models/tiny").status_code == 200
    assert "Traceback" not in server.log()


@pytest.mark.parametrize("sent", [b"", HALF_CLIENT_HELLO], ids=["silent", "half-hello"])
@pytest.mark.parametrize("api", ["rest", "grpc"])
def test_a_stalled_handshake_is_closed_within_the_header_timeout(
    server: Server, sent: bytes, api: str
) -> None:
    port = server.port if api == "rest" else server.grpc_port
    before = handshakes_refused(server)
    stalled = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
    try:
        for sock in stalled:
            sock.sendall(sent)
        # Others are served meanwhile.
        assert server.client.get("/v1/models/tiny").status_code == 200
        for sock in stalled:
            # 0.5 s asked for; asyncio's own handshake deadline, before, was 60 s.
            assert closed_within(sock) < 5
    finally:
        for sock in stalled:
            sock.close()
    assert server.client.get("/v1/models/tiny").status_code == 200
    if api == "rest":  # counted, as connections closed at the header timeout are
        assert handshakes_refused(server) - before == len(stalled)


def test_handshakes_count_against_max_connections(mutual: Server, certs: Certificates) -> None:
    held = [socket.create_connection(("127.0.0.1", mutual.port)) for _ in range(CAP)]
    try:
        # A fresh connection: the fixture's client may hold one open already.
        context = certs.client_context(with_certificate=True)
        with httpx.Client(base_url=mutual.base, verify=context) as client:
            answer = client.get("/v1/models/tiny")
        assert answer.status_code == 503 and "too many connections" in answer.json()["error"]
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 10  # the held ones are gone: it serves again
    while mutual.client.get("/v1/models/tiny").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_an_answer_before_its_body_is_read_is_delivered_and_closed_over_tls(
    server: Server, certs: Certificates
) -> None:
    # A 404 is answered before the body is read, and the connection closed: plain text first
    # half-closes it, which TLS cannot do; the answer must arrive all the same.
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    with certs.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        sock.sendall(
            b"POST /v1/models/nope:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{"
        )
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (ssl.SSLError, ConnectionResetError):
            pass  # closed without close_notify once the linger ends: the answer came first
    head = answer.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 404") and b"connection: close" in head
    assert server.client.get("/v1/models/tiny").status_code == 200
    assert "Traceback" not in server.log()  # the close went as planned, nothing raised


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        pytest.param(["--tls-cert-file", "{server_cert}"], "--tls-cert-file needs", id="no-key"),
        pytest.param(
            ["--tls-cert-file", "{tmp}/missing.pem", "--tls-key-file", "{server_key}"],
            "cannot read --tls-cert-file",
            id="missing",
        ),
        pytest.param(
            ["--tls-cert-file", "{server_cert}", "--tls-key-file", "{client_key}"],
            "--tls-key-file {client_key} is not the private key of --tls-cert-file",
            id="mismatched",
        ),
        pytest.param(
            ["--tls-cert-file", "{server_key}", "--tls-key-file", "{server_key}"],
            "--tls-cert-file {server_key} holds no PEM certificate",
            id="not-a-certificate",
        ),
        pytest.param(
            [*("--tls-cert-file", "{server_cert}", "--tls-key-file", "{server_key}"),
             *("--tls-ca-file", "{server_key}")],
            "--tls-ca-file {server_key} holds no PEM CA certificate",
            id="not-a-ca",
        ),
        pytest.param(
            ["--tls-cert-file", "{server_cert}", "--tls-key-file", "{encrypted}"],
            "is encrypted",
            id="encrypted-key",
        ),
    ],
)  # fmt: skip
def test_bad_tls_files_are_refused_with_the_flag_named(
    models_dir: Path, certs: Certificates, tmp_path: Path, flags: list[str], fragment: str
) -> None:
    encrypted = tmp_path / "encrypted.key"
    key = serialization.load_pem_private_key(certs.server_key.read_bytes(), password=None)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    encrypted.write_bytes(pem)
    names = {
        "tmp": str(tmp_path),
        "server_cert": str(certs.server_cert),
        "server_key": str(certs.server_key),
        "client_key": str(certs.client_key),
        "encrypted": str(encrypted),
    }
    args = [f.format(**names) for f in flags]
    serve = ["serve", "--model", str(models_dir / "tiny"), "--rest-port", "0", "--grpc-port", "0"]
    result = run_cli(*serve, *args, timeout=120)
    assert result.returncode == 2, result.stderr
    assert fragment.format(**names) in result.stderr
    assert "Traceback" not in result.stderr

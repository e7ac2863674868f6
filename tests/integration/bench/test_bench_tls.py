"""``bench --targets`` against a server that serves mutual TLS: the targets file names the CA
that verifies it and the client certificate it asks for (relative paths, from the file's
directory), and the load generator speaks TLS on REST and on gRPC alike."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.certs import Certificates, make_certificates
from tests.support.servers import Server, run_cli, serving

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("run") / "certs")


@pytest.fixture(scope="module")
def server(
    models_dir: Path, certs: Certificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("logs") / "serve.log"
    args = certs.serve_args(mutual=True)
    yield from serving(
        models_dir / "tiny", log, args, tls=certs.client_context(with_certificate=True)
    )


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_bench_measures_a_mutual_tls_server(
    server: Server, certs: Certificates, protocol: str
) -> None:
    run = certs.ca.parents[1]  # the targets file beside certs/
    targets = run / f"targets-{protocol}.json"
    target = {
        "name": "tiny-0",
        "model": "tiny",
        "rest": server.base,
        "grpc": server.grpc_target,
        "tls_ca_file": "certs/ca.crt",
        "tls_cert_file": "certs/client.crt",
        "tls_key_file": "certs/client.key",
    }
    assert target["rest"].startswith("https://")
    targets.write_text(json.dumps({"targets": [target]}))
    out = run / f"out-{protocol}"
    result = run_cli(
        "bench", "--targets", str(targets), "--duration", "1", "--warmup", "0",
        "--stability-windows", "1", "--protocol", protocol, "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    (row,) = report["rows"]
    assert row["requests"] > 0 and row["errors"] == 0, row
    # The server's limits were read over https too.
    (limits,) = report["settings"]["replica_limits"]
    assert limits["limits"] is not None, limits

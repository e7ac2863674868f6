"""ServerSettings.validate: what `serve` refuses before it loads a model, named by its flag."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sharedserve.config import BatchingSettings
from sharedserve.errors import ConfigError
from sharedserve.server.settings import (
    AdminSettings,
    ConnectionSettings,
    GrpcSettings,
    RestSettings,
    ServerSettings,
    TlsSettings,
)

GOOD = ServerSettings(model_dir=Path("m"))
MANY = ServerSettings(model_repository=Path("repo"))


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        pytest.param(replace(GOOD, rest=RestSettings(port=70000)), "--rest-port", id="rest-port"),
        pytest.param(replace(GOOD, grpc=GrpcSettings(port=-1)), "--grpc-port", id="grpc-port"),
        pytest.param(
            replace(GOOD, rest=RestSettings(max_body_bytes=0)), "--max-body-bytes", id="body"
        ),
        pytest.param(
            replace(GOOD, rest=RestSettings(max_decoding_bytes=0)),
            "--max-decoding-bytes",
            id="decoding",
        ),
        pytest.param(
            replace(GOOD, max_request_elements=-5), "--max-request-elements", id="elements"
        ),
        pytest.param(
            replace(GOOD, connections=ConnectionSettings(body_timeout_s=0)),
            "--body-timeout",
            id="timeout",
        ),
        pytest.param(
            replace(GOOD, grpc=GrpcSettings(max_message_bytes=0)),
            "--grpc-max-message-bytes",
            id="grpc-message",
        ),
        pytest.param(
            replace(GOOD, grpc=GrpcSettings(max_message_bytes=1 << 31)),
            "--grpc-max-message-bytes must be at most",
            id="grpc-message-ceiling",
        ),
        pytest.param(
            replace(GOOD, allowed_model_roots=(Path("/models"),)),
            "--allowed-model-roots bounds",
            id="roots-with-one-model",
        ),
        pytest.param(
            replace(MANY, admin=AdminSettings(key="short")), "at least 32", id="short-key"
        ),
        pytest.param(
            replace(MANY, admin=AdminSettings(key="x" * 31 + " y")),
            "without spaces",
            id="key-space",
        ),
        pytest.param(
            replace(MANY, admin=AdminSettings(header="Admin Key")), "--admin-header", id="header"
        ),
        pytest.param(
            replace(MANY, admin=AdminSettings(header="grpc-key")), "reserves", id="grpc-header"
        ),
        pytest.param(
            replace(GOOD, batching=BatchingSettings(max_batch_size=0)),
            "max_batch_size",
            id="batching",
        ),
        pytest.param(
            replace(GOOD, tls=TlsSettings(cert_file=Path("c.pem"))),
            "--tls-cert-file needs --tls-key-file",
            id="tls-cert-alone",
        ),
        pytest.param(
            replace(GOOD, tls=TlsSettings(key_file=Path("k.pem"))),
            "--tls-key-file needs --tls-cert-file",
            id="tls-key-alone",
        ),
        pytest.param(
            replace(GOOD, tls=TlsSettings(ca_file=Path("ca.pem"))),
            "--tls-ca-file .* needs the server's own --tls-cert-file",
            id="tls-ca-alone",
        ),
    ],
)
def test_refused_with_the_flag_named(settings: ServerSettings, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        settings.validate()


def test_the_defaults_and_port_zero_are_valid() -> None:
    GOOD.validate()
    replace(GOOD, rest=RestSettings(port=0), grpc=GrpcSettings(port=0)).validate()
    files = TlsSettings(Path("cert.pem"), Path("key.pem"), Path("ca.pem"))
    replace(GOOD, tls=files).validate()  # the files are read at start, not here


def test_the_management_key_is_never_in_the_settings_repr() -> None:
    key = "0123456789abcdef" * 4
    settings = replace(MANY, admin=AdminSettings(key=key))
    settings.validate()
    assert key not in repr(settings) and key not in str(settings)

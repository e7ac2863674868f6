"""The targets file: round trip, atomic replacement, and clear errors on bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharedserve.errors import ConfigError
from sharedserve.pack.targets import Target, read_targets, write_targets

TARGET = Target(
    name="tiny-0",
    model="tiny",
    rest="http://127.0.0.1:9000",
    grpc="127.0.0.1:9001",
    pid=1234,
    cgroup="/sys/fs/cgroup/cpu/x/tiny-0",
    gpu="GPU-0a1b",
    gpu_memory_fraction=0.2,
    cpu_limit=0.5,
)


def test_round_trip_and_documented_format(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "targets.json"
    other = Target(name="tiny-1", model="tiny", rest="http://127.0.0.1:9002")
    write_targets(path, [TARGET, other], simulated_gpus=True)
    assert read_targets(path) == [TARGET, other]
    raw = json.loads(path.read_text())
    assert raw["simulated_gpus"] is True
    assert set(raw["targets"][0]) == {
        "name",
        "model",
        "rest",
        "grpc",
        "pid",
        "cgroup",
        "gpu",
        "gpu_memory_fraction",
        "cpu_limit",
        "weight",
        "slo_p99_ms",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file",
    }
    assert raw["targets"][1]["pid"] is None


def test_files_without_weight_and_slo_read_with_the_defaults(tmp_path: Path) -> None:
    # Written before pack specs: no weight, no slo_p99_ms.
    path = tmp_path / "targets.json"
    old = {"name": "tiny-0", "model": "tiny", "rest": "http://127.0.0.1:9000"}
    path.write_text(json.dumps({"targets": [old]}))
    (target,) = read_targets(path)
    assert (target.weight, target.slo_p99_ms) == (1.0, None)
    assert (target.tls, target.tls_ca_file, target.tls_cert_file) == (False, None, None)
    mixed = Target(name="a-0", model="a", rest="http://h:1", weight=3.0, slo_p99_ms=50.0)
    write_targets(path, [mixed])
    assert read_targets(path) == [mixed]


def test_rewrite_replaces_whole_file_and_leaves_no_temporaries(tmp_path: Path) -> None:
    path = tmp_path / "targets.json"
    write_targets(path, [TARGET])
    write_targets(path, [Target(name="a", model="m", rest="http://h:1")])
    assert [t.name for t in read_targets(path)] == ["a"]
    assert [p.name for p in tmp_path.iterdir()] == ["targets.json"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not valid JSON"),
        ("[]", '"targets" list'),
        ('{"targets": []}', "lists no targets"),
        ('{"targets": [1]}', "must be an object"),
        ('{"targets": [{"name": "a", "model": "m"}]}', "has no 'rest'"),
        ('{"targets": [{"name": "a", "model": "m", "rest": "h:1"}]}', "http:// or https://"),
        ('{"targets": [{"name": "a", "model": "m", "rest": "http://h:1", "pid": "x"}]}', "pid"),
        ('{"targets": [{"name": "a", "model": "m", "rest": "http://h:1", "pid": true}]}', "pid"),
        (
            '{"targets": [{"name": "a", "model": "m", "rest": "http://h:1"},'
            ' {"name": "a", "model": "m", "rest": "http://h:2"}]}',
            "repeats a name",
        ),
        (
            '{"targets": [{"name": "a", "model": "m", "rest": "http://h:1",'
            ' "tls_ca_file": "ca.crt"}]}',
            r"targets\[0\]\.tls_ca_file is for a server that serves TLS, whose rest URL is https",
        ),
        (
            '{"targets": [{"name": "a", "model": "m", "rest": "https://h:1",'
            ' "tls_cert_file": "c.crt"}]}',
            "tls_cert_file and tls_key_file go together",
        ),
        (
            '{"targets": [{"name": "a", "model": "m", "rest": "https://h:1", "tls_ca_file": 1}]}',
            "tls_ca_file has the wrong type",
        ),
    ],
)
def test_bad_files_are_refused_clearly(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "targets.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        read_targets(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read targets file"):
        read_targets(tmp_path / "nope.json")


def test_tls_files_are_read_from_the_targets_files_directory(tmp_path: Path) -> None:
    path = tmp_path / "run" / "targets.json"
    path.parent.mkdir()
    entry = {
        "name": "a",
        "model": "m",
        "rest": "https://h:1",
        "grpc": "h:2",
        "tls_ca_file": "certs/ca.crt",
        "tls_cert_file": "/etc/client.crt",
        "tls_key_file": "client.key",
    }
    path.write_text(json.dumps({"targets": [entry]}))
    (target,) = read_targets(path)
    assert target.tls  # REST and gRPC both: one server, one certificate
    assert target.tls_ca_file == str(tmp_path / "run" / "certs" / "ca.crt")
    assert target.tls_cert_file == "/etc/client.crt"  # absolute: as given
    assert target.tls_key_file == str(tmp_path / "run" / "client.key")
    no_ca = Target(name="b", model="m", rest="https://h:3")  # the system's trust store
    write_targets(path, [no_ca])
    assert read_targets(path) == [no_ca]

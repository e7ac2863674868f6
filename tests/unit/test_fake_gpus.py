"""Table-driven tests of the JSON fake GPU inventory and the backend that re-reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sharedserve.errors import ConfigError, GpuError
from sharedserve.gpu.backend import GpuInfo
from sharedserve.gpu.fake import MAX_GPUS, MAX_MEMORY_MIB, FakeGpuBackend, parse_inventory
from tests.support.gpus import write_inventory

UUID0 = "GPU-00000000-0000-0000-0000-000000000000"
UUID1 = "GPU-11111111-1111-1111-1111-111111111111"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param({"gpus": []}, [], id="empty-list"),
        pytest.param(
            {"gpus": [{"uuid": UUID0, "memory_mib": 11441}]},
            [GpuInfo(UUID0, 0, "Simulated GPU", 11441, None, True)],
            id="required-only-defaults",
        ),
        pytest.param(
            {
                "gpus": [
                    {
                        "uuid": UUID0,
                        "index": 3,
                        "name": "Tesla K80",
                        "memory_mib": 11441,
                        "numa_node": 1,
                        "healthy": False,
                    }
                ]
            },
            [GpuInfo(UUID0, 3, "Tesla K80", 11441, 1, False)],
            id="all-fields",
        ),
        pytest.param(
            {"gpus": [{"uuid": UUID0, "memory_mib": 100}, {"uuid": UUID1, "memory_mib": 200}]},
            [
                GpuInfo(UUID0, 0, "Simulated GPU", 100),
                GpuInfo(UUID1, 1, "Simulated GPU", 200),
            ],
            id="index-defaults-to-position",
        ),
        pytest.param(
            {"gpus": [{"uuid": UUID0, "memory_mib": 100, "numa_node": None}]},
            [GpuInfo(UUID0, 0, "Simulated GPU", 100, None)],
            id="numa-null",
        ),
        pytest.param(
            {"gpus": [{"uuid": UUID0, "memory_mib": 100, "numa_node": 0, "healthy": True}]},
            [GpuInfo(UUID0, 0, "Simulated GPU", 100, 0, True)],
            id="numa-zero-kept",
        ),
        pytest.param(
            {"gpus": [{"uuid": UUID0, "memory_mib": 100, "extra": "ignored"}], "other": 1},
            [GpuInfo(UUID0, 0, "Simulated GPU", 100)],
            id="unknown-keys-ignored",
        ),
    ],
)
def test_parse_inventory(data: Any, expected: list[GpuInfo]) -> None:
    assert parse_inventory(data) == expected


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        pytest.param([], '"gpus" list', id="top-level-list"),
        pytest.param("gpus", '"gpus" list', id="top-level-string"),
        pytest.param(None, '"gpus" list', id="top-level-null"),
        pytest.param({}, '"gpus" list', id="no-gpus-key"),
        pytest.param({"gpus": {"uuid": UUID0}}, '"gpus" list', id="gpus-not-list"),
        pytest.param({"gpus": None}, '"gpus" list', id="gpus-null"),
        pytest.param({"gpus": [{"memory_mib": 100}]}, "gpus[0]", id="missing-uuid"),
        pytest.param({"gpus": [{"uuid": UUID0}]}, "gpus[0]", id="missing-memory"),
        pytest.param(
            {"gpus": [{"uuid": UUID0, "memory_mib": 1}, {"uuid": UUID1}]},
            "gpus[1]",
            id="second-entry-missing-memory",
        ),
        pytest.param(
            {"gpus": [{"uuid": UUID0, "memory_mib": "lots"}]}, "gpus[0]", id="memory-not-number"
        ),
        pytest.param(
            {"gpus": [{"uuid": UUID0, "memory_mib": 1, "index": "x"}]},
            "gpus[0]",
            id="index-not-number",
        ),
        pytest.param(
            {"gpus": [{"uuid": UUID0, "memory_mib": 1, "numa_node": "n"}]},
            "gpus[0]",
            id="numa-not-number",
        ),
        pytest.param({"gpus": [{"uuid": UUID0, "memory_mib": None}]}, "gpus[0]", id="memory-null"),
        pytest.param({"gpus": ["GPU-0"]}, "gpus[0]", id="entry-string"),
        pytest.param({"gpus": [{"uuid": UUID0, "memory_mib": 1}, 7]}, "gpus[1]", id="entry-int"),
        pytest.param({"gpus": [None]}, "gpus[0]", id="entry-null"),
        pytest.param({"gpus": [[UUID0, 100]]}, "gpus[0]", id="entry-list"),
        pytest.param({"gpus": [{"uuid": UUID0, "memory_mib": "512"}]}, "gpus[0]", id="mib-str"),
        pytest.param({"gpus": [{"uuid": UUID0, "memory_mib": 1.9}]}, "gpus[0]", id="mib-float"),
        pytest.param({"gpus": [{"uuid": UUID0, "memory_mib": 0}]}, "1..", id="mib-zero"),
        pytest.param({"gpus": [{"uuid": UUID0, "memory_mib": True}]}, "gpus[0]", id="mib-bool"),
        pytest.param({"gpus": [{"uuid": None, "memory_mib": 1}]}, "uuid", id="uuid-null"),
        pytest.param(
            {"gpus": [{"uuid": UUID0, "memory_mib": 1, "healthy": "false"}]},
            "healthy",
            id="healthy-str",
        ),
    ],
)
def test_parse_inventory_rejects(data: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_inventory(data, origin="inv.json")
    assert fragment in info.value.message
    assert info.value.message.startswith("inv.json: ")


def write(path: Path, gpus: list[dict[str, Any]]) -> None:
    # Entries as given, partial ones included: what the parser must fill in is under test.
    write_inventory(path, gpus)


def test_backend_rereads_file_each_call(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    write(path, [{"uuid": UUID0, "memory_mib": 100}, {"uuid": UUID1, "memory_mib": 200}])
    backend = FakeGpuBackend(path)
    assert backend.simulated is True
    assert [g.healthy for g in backend.list_gpus()] == [True, True]

    write(
        path,
        [{"uuid": UUID0, "memory_mib": 100}, {"uuid": UUID1, "memory_mib": 200, "healthy": False}],
    )
    assert [g.healthy for g in backend.list_gpus()] == [True, False]

    write(path, [{"uuid": UUID0, "memory_mib": 100}])
    assert backend.list_gpus() == [GpuInfo(UUID0, 0, "Simulated GPU", 100)]
    backend.close()


def test_backend_logs_simulated_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "gpus.json"
    write(path, [{"uuid": UUID0, "memory_mib": 100}])
    with caplog.at_level("WARNING", logger="sharedserve.gpu.fake"):
        FakeGpuBackend(path)
    assert any("SIMULATED" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("", "not valid JSON", id="empty-file"),
        pytest.param("{gpus: []}", "not valid JSON", id="bad-json"),
        pytest.param('{"gpus": [', "not valid JSON", id="truncated-json"),
        pytest.param('{"gpus": [{"memory_mib": 1}]}', "gpus[0]", id="valid-json-bad-entry"),
        pytest.param("[]", '"gpus" list', id="valid-json-wrong-shape"),
    ],
)
def test_backend_bad_file_fails_at_construction(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "gpus.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        FakeGpuBackend(path)
    assert fragment in info.value.message
    assert str(path) in info.value.message


def test_backend_file_turned_bad_after_construction(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    write(path, [{"uuid": UUID0, "memory_mib": 100}])
    backend = FakeGpuBackend(path)
    path.write_text("not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        backend.list_gpus()


def two(second: dict[str, Any]) -> dict[str, Any]:
    """A good first GPU and ``second`` over a good second one: the fault is at gpus[1]."""
    return {
        "gpus": [{"uuid": UUID0, "memory_mib": 100}, {"uuid": UUID1, "memory_mib": 100} | second]
    }


@pytest.mark.parametrize(
    ("second", "message"),
    [
        pytest.param(
            {"memory_mib": 2**80},
            f"gpus[1].memory_mib: must be in 1..{MAX_MEMORY_MIB}, got {2**80}",
            id="mib-2-to-80",
        ),
        pytest.param(
            {"memory_mib": MAX_MEMORY_MIB + 1}, "gpus[1].memory_mib: must be in 1..", id="mib-over"
        ),
        pytest.param({"memory_mib": -1}, "gpus[1].memory_mib: must be in 1..", id="mib-negative"),
        pytest.param(
            {"memory_mib": 1e3}, "gpus[1].memory_mib: must be a whole number", id="mib-float"
        ),
        pytest.param(
            {"memory_mib": False}, "gpus[1].memory_mib: must be a whole number", id="mib-bool"
        ),
        pytest.param({"index": -1}, "gpus[1].index: must be in 0..", id="index-negative"),
        pytest.param({"index": MAX_GPUS}, "gpus[1].index: must be in 0..", id="index-huge"),
        pytest.param({"index": True}, "gpus[1].index: must be a whole number", id="index-bool"),
        pytest.param({"numa_node": 2**40}, "gpus[1].numa_node: must be in 0..", id="numa-huge"),
        pytest.param({"uuid": UUID0}, f"gpus[1].uuid: {UUID0!r} is also gpus[0]'s", id="dup-uuid"),
        pytest.param({"index": 0}, "gpus[1].index: 0 is also gpus[0]'s", id="dup-index"),
        pytest.param({"uuid": ""}, "gpus[1].uuid: must be a non-empty string", id="uuid-empty"),
        pytest.param({"uuid": 7}, "gpus[1].uuid: must be a non-empty string", id="uuid-int"),
        pytest.param({"uuid": "G" * 97}, "gpus[1].uuid: at most 96 characters", id="uuid-long"),
        pytest.param({"name": "n" * 10**6}, "gpus[1].name: at most 96 characters", id="name-1mb"),
        pytest.param(
            {"memory_mib": [[[1]]]},
            "gpus[1].memory_mib: must be a whole number, got a list of 1",
            id="mib-nested",
        ),
        pytest.param({"healthy": 1}, "gpus[1].healthy: must be true or false", id="healthy-int"),
    ],
)
def test_absurd_values_refused_with_the_field_named(second: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_inventory(two(second), origin="inv.json")
    assert info.value.message.startswith(f"inv.json: {message}"), info.value.message
    assert len(info.value.message) < 200  # a megabyte name is not echoed back


def test_missing_uuid_named() -> None:
    with pytest.raises(ConfigError, match=r"^inv\.json: gpus\[1\]\.uuid: required$"):
        parse_inventory({"gpus": [{"uuid": UUID0, "memory_mib": 1}, {"memory_mib": 1}]}, "inv.json")


def test_too_many_gpus() -> None:
    gpus = [{"uuid": f"GPU-{i}", "memory_mib": 1} for i in range(MAX_GPUS + 1)]
    with pytest.raises(ConfigError, match=f"at most {MAX_GPUS} GPUs"):
        parse_inventory({"gpus": gpus}, "inv.json")


DEEP = "[" * 100_000 + "]" * 100_000


def test_deep_file_is_a_config_error_at_construction(tmp_path: Path) -> None:
    path = write_inventory(tmp_path / "gpus.json", '{"gpus": ' + DEEP + "}")
    with pytest.raises(ConfigError) as info:
        FakeGpuBackend(path)
    assert info.value.message == f"fake GPU inventory {path} is nested too deeply to be read"


def test_deep_or_absurd_file_at_a_probe_is_a_gpu_error(tmp_path: Path) -> None:
    """The allocator's probe counts a GpuError as the GPU failing (and logs it as a warning);
    anything else would be logged as a bug, traceback and all."""
    path = write_inventory(tmp_path / "gpus.json", [{"uuid": UUID0, "memory_mib": 100}])
    backend = FakeGpuBackend(path)
    for text, fragment in ((DEEP, "nested too deeply"), (b"\xff\xfe", "not UTF-8")):
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            write_inventory(path, text)
        with pytest.raises(GpuError, match=fragment):
            backend.probe(UUID0)
    write_inventory(path, [{"uuid": UUID0, "memory_mib": 2**80}])
    with pytest.raises(GpuError, match=r"gpus\[0\]\.memory_mib: must be in"):
        backend.probe(UUID0)
    write_inventory(path, [{"uuid": UUID0, "memory_mib": 100}])
    assert backend.probe(UUID0) is None  # the file mended: the GPU answers again

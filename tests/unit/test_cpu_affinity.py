"""Which CPUs a measurement's servers and load generator get (``limits.affinity``), table-driven."""

from __future__ import annotations

import os
import subprocess

import pytest

from sharedserve.errors import ConfigError
from sharedserve.limits.affinity import format_cpus, on_cpus, parse_cpus, split_cpus


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("auto", "auto"), (" ALL ", "all"), ("3", (3,)), ("0-2", (0, 1, 2)),
        ("5,0-1,1", (0, 1, 5)), ("2-2", (2,)),
    ],
)  # fmt: skip
def test_cpu_lists_parse_as_linux_writes_them(text: str, parsed: object) -> None:
    assert parse_cpus(text, "--server-cpus") == parsed


@pytest.mark.parametrize("text", ["", "x", "3-1", "-1", "1-", "0,,1", "1.5"])
def test_a_bad_cpu_list_names_its_flag(text: str) -> None:
    with pytest.raises(ConfigError, match="--loadgen-cpus must be auto, all or a CPU list"):
        parse_cpus(text, "--loadgen-cpus")


@pytest.mark.parametrize(
    ("cpus", "text"),
    [(None, None), ((), ""), ((0,), "0"), ((0, 1, 2, 5), "0-2,5"), ((7, 1, 2), "1-2,7")],
)
def test_cpu_lists_format_as_linux_writes_them(cpus: tuple[int, ...] | None, text: str) -> None:
    assert format_cpus(cpus) == text


# (servers, loadgen, usable CPUs) -> (servers' CPUs, load generator's CPUs)
SPLITS = [
    ("auto", "auto", (0, 1), (0,), (1,)),  # this 2-core host: one each
    ("auto", "auto", tuple(range(16)), tuple(range(12)), (12, 13, 14, 15)),  # a quarter
    ("auto", "auto", (2, 3, 4), (2, 3), (4,)),  # a cpuset's CPUs, not 0..n
    ("auto", "auto", (0,), None, None),  # one CPU: nothing to split
    ("0-2", "auto", (0, 1, 2, 3), (0, 1, 2), (3,)),  # the rest to the other side
    ("auto", "0", (0, 1, 2, 3), (1, 2, 3), (0,)),
    ("0", "0", (0, 1), (0,), (0,)),  # as given, overlap and all
    ("all", "auto", (0, 1), None, None),  # not pinned, as asked
    ("auto", "all", (0, 1), None, None),
    ("0", "all", (0, 1), (0,), None),
]  # fmt: skip


@pytest.mark.parametrize(("servers", "loadgen", "usable", "want_servers", "want_loadgen"), SPLITS)
def test_the_split_of_the_cpus(
    servers: str,
    loadgen: str,
    usable: tuple[int, ...],
    want_servers: tuple[int, ...] | None,
    want_loadgen: tuple[int, ...] | None,
) -> None:
    split = split_cpus(servers, loadgen, usable)
    assert (split.servers, split.loadgen) == (want_servers, want_loadgen)
    assert split.describe()["server_cpus"] == format_cpus(want_servers)
    assert split.note


def test_an_overlap_given_is_said() -> None:
    assert "CPU 1 shared by both sides" in split_cpus("0-1", "1", (0, 1)).note


@pytest.mark.parametrize(
    ("servers", "loadgen", "usable", "message"),
    [
        ("0-1", "auto", (0, 1), "no CPU is left for the other side: give --loadgen-cpus"),
        ("auto", "0,1", (0, 1), "no CPU is left for the other side: give --server-cpus"),
        ("4", "auto", (0, 1), "--server-cpus names CPU 4, which this process may not use"),
        ("auto", "0-9", (0, 1), "--loadgen-cpus names CPU 2-9"),
    ],
)
def test_a_split_that_cannot_be_is_refused(
    servers: str, loadgen: str, usable: tuple[int, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        split_cpus(servers, loadgen, usable)


def test_servers_started_elsewhere_take_no_cpus() -> None:
    split = split_cpus("auto", "auto", (0, 1), servers_started=False)
    assert (split.servers, split.loadgen) == (None, None)
    split = split_cpus("auto", "1", (0, 1), servers_started=False)
    assert (split.servers, split.loadgen) == (None, (1,))
    with pytest.raises(ConfigError, match="with --targets they already run"):
        split_cpus("0", "auto", (0, 1), servers_started=False)


def test_a_command_started_on_cpus_runs_there_and_its_threads_too() -> None:
    cpu = min(os.sched_getaffinity(0))
    script = (
        "import os, threading; seen = []; "
        "t = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0))); "
        "t.start(); t.join(); print(sorted(os.sched_getaffinity(0)), sorted(seen[0]))"
    )
    command = on_cpus(["python3", "-c", script], (cpu,))
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert out.split() == [f"[{cpu}]", f"[{cpu}]"]
    assert on_cpus(["true"], None) == ["true"]

"""Parsing and reading of cgroup CPU quotas, against text tables and fake cgroup trees.

The fake trees are plain directories under tmp_path laid out like cgroupfs, with a fake
/proc/self/cgroup and a mountinfo that points into them, so the walk-up and mount mapping run
exactly as on a host; the real kernel path is in tests/integration/pack/test_cgroup_v1_quota.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sharedserve.errors import ConfigError
from sharedserve.limits.cgroups import create_cpu_cgroup
from sharedserve.limits.cpu import (
    CgroupMount,
    CpuLimit,
    CpuLimitSource,
    CpuThrottling,
    ProcCgroup,
    parse_cfs_quota,
    parse_cpu_max,
    parse_cpu_stat,
    parse_mountinfo,
    parse_proc_cgroup,
    read_cgroup_cpu_limit,
    read_cpu_throttling,
    resolve_cpu_limit,
    thread_pool_sizes,
)

V1, V2, NONE = CpuLimitSource.CGROUP_V1, CpuLimitSource.CGROUP_V2, CpuLimitSource.NONE


@pytest.mark.parametrize(
    ("text", "cores"),
    [
        ("max 100000\n", None),
        ("max", None),
        ("50000 100000\n", 0.5),
        ("35000 100000", 0.35),
        ("200000 100000", 2.0),
        ("150000 50000", 3.0),
    ],
)
def test_parse_cpu_max(text: str, cores: float | None) -> None:
    assert parse_cpu_max(text) == cores


@pytest.mark.parametrize("text", ["", "garbage", "50000", "0 100000", "50000 0", "1 2 3", "x 1"])
def test_parse_cpu_max_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpu_max(text)


@pytest.mark.parametrize(
    ("quota", "period", "cores"),
    [
        ("-1\n", "100000\n", None),
        ("-1", "garbage", None),  # no quota: the period does not matter
        ("25000", "100000", 0.25),
        ("50000\n", "100000\n", 0.5),
        ("400000", "100000", 4.0),
    ],
)
def test_parse_cfs_quota(quota: str, period: str, cores: float | None) -> None:
    assert parse_cfs_quota(quota, period) == cores


@pytest.mark.parametrize(("quota", "period"), [("", "100000"), ("x", "1"), ("0", "1"), ("5", "0")])
def test_parse_cfs_quota_rejects_malformed(quota: str, period: str) -> None:
    with pytest.raises(ValueError):
        parse_cfs_quota(quota, period)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0::/\n", ProcCgroup("/", {})),
        (
            "0::/kubepods.slice/pod1/cri-abc.scope\n",
            ProcCgroup("/kubepods.slice/pod1/cri-abc.scope", {}),
        ),
        (
            "12:pids:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/docker/abc\n",
            ProcCgroup(
                "/docker/abc",
                {
                    "pids": "/docker/abc",
                    "cpu": "/docker/abc",
                    "cpuacct": "/docker/abc",
                    "name=systemd": "/docker/abc",
                },
            ),
        ),
        ("2:cpuacct:/\n1:cpu:/a/b\n", ProcCgroup(None, {"cpu": "/a/b", "cpuacct": "/"})),
        ("", ProcCgroup(None, {})),
    ],
)
def test_parse_proc_cgroup(text: str, expected: ProcCgroup) -> None:
    assert parse_proc_cgroup(text) == expected


def test_parse_proc_cgroup_rejects_malformed() -> None:
    with pytest.raises(ValueError):
        parse_proc_cgroup("not a cgroup line\n")


def _mount(root: str, point: str, fstype: str, *options: str) -> CgroupMount:
    return CgroupMount(root, point, fstype, frozenset(options))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu",
            [_mount("/", "/sys/fs/cgroup/cpu", "cgroup", "cpu")],
        ),
        (
            "30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:11 "
            "- cgroup cgroup rw,cpu,cpuacct",
            [_mount("/", "/sys/fs/cgroup/cpu,cpuacct", "cgroup", "cpu", "cpuacct")],
        ),
        (
            "1234 1200 0:26 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid master:11 "
            "- cgroup cgroup ro,cpu,cpuacct",
            [_mount("/docker/abc", "/sys/fs/cgroup/cpu,cpuacct", "cgroup", "cpu", "cpuacct")],
        ),
        (
            "28 22 0:25 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 "
            "- cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot",
            [_mount("/", "/sys/fs/cgroup", "cgroup2", "nsdelegate", "memory_recursiveprot")],
        ),
        (
            r"41 31 0:38 /a\040b /mnt/my\040cgroup\011x\134y rw - cgroup2 cgroup2 rw",
            [_mount("/a b", "/mnt/my cgroup\tx\\y", "cgroup2")],
        ),
        ("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755", []),
        ("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw", []),
        ("garbage", []),
        ("", []),
    ],
)
def test_parse_mountinfo(line: str, expected: list[CgroupMount]) -> None:
    assert parse_mountinfo(line + "\n") == expected


@pytest.mark.parametrize(
    ("cores", "available", "sizes"),
    [
        (0.1, 16, (1, 1)),
        (0.35, 16, (1, 1)),
        (1.0, 16, (1, 1)),
        (1.5, 16, (2, 2)),
        (0.7 / 0.35, 16, (2, 2)),  # 2.0000000000000004 must not become 3
        (None, 16, (16, 16)),
        (None, 2, (2, 2)),
        (8.0, 2, (2, 2)),
        (0.5, 0, (1, 1)),
    ],
)
def test_thread_pool_sizes(cores: float | None, available: int, sizes: tuple[int, int]) -> None:
    limit = CpuLimit(cores, V1 if cores else NONE, None, available)
    assert thread_pool_sizes(limit) == sizes


class FakeHost:
    """A cgroupfs look-alike under tmp_path: mounts, /proc/self/cgroup and quota files."""

    def __init__(self, tmp_path: Path) -> None:
        self.base = tmp_path
        self.mountinfo_lines: list[str] = []
        self.proc_cgroup = tmp_path / "proc-self-cgroup"
        self.mountinfo = tmp_path / "proc-self-mountinfo"

    def mount(self, name: str, fstype: str, options: str, root: str = "/") -> Path:
        point = self.base / name
        point.mkdir(parents=True, exist_ok=True)
        mount_point = str(point).replace(" ", "\\040")
        n = len(self.mountinfo_lines) + 30
        fields = f"{n} 25 0:{n} {root} {mount_point} rw,relatime shared:{n}"
        self.mountinfo_lines.append(f"{fields} - {fstype} {fstype} {options}")
        self.mountinfo.write_text("\n".join(self.mountinfo_lines) + "\n")
        return point

    def member_of(self, text: str) -> None:
        self.proc_cgroup.write_text(text)

    def read(self) -> tuple[float | None, CpuLimitSource, str | None]:
        return read_cgroup_cpu_limit(self.proc_cgroup, self.mountinfo)


def _v1(directory: Path, quota: str, period: str = "100000") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cpu.cfs_quota_us").write_text(quota + "\n")
    (directory / "cpu.cfs_period_us").write_text(period + "\n")


def _v2(directory: Path, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cpu.max").write_text(text + "\n")


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


def test_v2_walks_up_to_most_restrictive_ancestor(host: FakeHost) -> None:
    top = host.mount("cgroup v2", "cgroup2", "rw,nsdelegate")  # a space in the mount point
    _v2(top, "max 100000")
    _v2(top / "kubepods.slice", "800000 100000")
    _v2(top / "kubepods.slice" / "pod1", "35000 100000")
    _v2(top / "kubepods.slice" / "pod1" / "ctr", "max 100000")
    host.member_of("0::/kubepods.slice/pod1/ctr\n")
    assert host.read() == (0.35, V2, str(top / "kubepods.slice" / "pod1"))


def test_v2_leaf_quota_binds_when_smallest(host: FakeHost) -> None:
    top = host.mount("unified", "cgroup2", "rw")
    _v2(top / "a", "200000 100000")
    _v2(top / "a" / "b", "50000 100000")
    host.member_of("0::/a/b\n")
    assert host.read() == (0.5, V2, str(top / "a" / "b"))


def test_v1_walks_up_in_the_cpu_hierarchy(host: FakeHost) -> None:
    top = host.mount("cpu,cpuacct", "cgroup", "rw,cpu,cpuacct")
    memory = host.mount("memory", "cgroup", "rw,memory")
    _v1(memory / "docker" / "abc", "25000")  # not the cpu hierarchy: must be ignored
    _v1(top, "-1")
    _v1(top / "docker", "50000")
    _v1(top / "docker" / "abc", "-1")
    host.member_of("5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")
    assert host.read() == (0.5, V1, str(top / "docker"))


def test_container_mount_root_is_the_cgroup_itself(host: FakeHost) -> None:
    # Docker without a cgroup namespace: /proc/self/cgroup says /docker/abc, and the mount shows
    # only that cgroup, so its files are at the mount point itself, not under docker/abc.
    top = host.mount("cpu", "cgroup", "rw,cpu,cpuacct", root="/docker/abc")
    _v1(top, "25000")
    host.member_of("4:cpu,cpuacct:/docker/abc\n")
    assert host.read() == (0.25, V1, str(top))


def test_container_mount_root_prefix_of_a_nested_cgroup(host: FakeHost) -> None:
    top = host.mount("unified", "cgroup2", "rw", root="/docker/abc")
    _v2(top, "150000 100000")
    _v2(top / "worker", "max 100000")
    host.member_of("0::/docker/abc/worker\n")
    assert host.read() == (1.5, V2, str(top))


def test_unmatched_root_falls_back_to_mount_point_plus_path(host: FakeHost) -> None:
    top = host.mount("unified", "cgroup2", "rw", root="/../..")
    _v2(top / "x", "20000 100000")
    host.member_of("0::/x\n")
    assert host.read() == (0.2, V2, str(top / "x"))


def test_hybrid_takes_the_smaller_of_v1_and_v2(host: FakeHost) -> None:
    v1 = host.mount("cpu", "cgroup", "rw,cpu")
    v2 = host.mount("unified", "cgroup2", "rw")
    _v1(v1 / "svc", "75000")
    _v2(v2 / "svc", "50000 100000")
    host.member_of("1:cpu:/svc\n0::/svc\n")
    assert host.read() == (0.5, V2, str(v2 / "svc"))
    _v2(v2 / "svc", "max 100000")
    assert host.read() == (0.75, V1, str(v1 / "svc"))


def test_hybrid_without_cpu_files_in_v2(host: FakeHost) -> None:
    # Like this project's test machine: the unified mount has no cpu controller, so no cpu.max.
    v1 = host.mount("cpu", "cgroup", "rw,cpu")
    v2 = host.mount("unified", "cgroup2", "rw")
    (v2 / "svc").mkdir()
    _v1(v1, "-1")
    _v1(v1 / "svc", "30000")
    host.member_of("2:cpuacct:/\n1:cpu:/svc\n0::/svc\n")
    assert host.read() == (0.3, V1, str(v1 / "svc"))


def test_malformed_file_is_ignored_with_a_warning(
    host: FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    top = host.mount("unified", "cgroup2", "rw")
    _v2(top / "a", "40000 100000")
    _v2(top / "a" / "b", "half a core")
    host.member_of("0::/a/b\n")
    with caplog.at_level(logging.WARNING, logger="sharedserve.limits.cpu"):
        assert host.read() == (0.4, V2, str(top / "a"))
    assert "malformed" in caplog.text
    assert str(top / "a" / "b" / "cpu.max") in caplog.text


@pytest.mark.parametrize(
    "membership", ["0::/a/b\n", "1:cpu:/a/b\n", "1:cpu:/a/b\n0::/a/b\n", "1:memory:/a\n"]
)
def test_no_quota_files_means_no_limit(host: FakeHost, membership: str) -> None:
    (host.mount("unified", "cgroup2", "rw") / "a" / "b").mkdir(parents=True)
    (host.mount("cpu", "cgroup", "rw,cpu") / "a" / "b").mkdir(parents=True)
    host.member_of(membership)
    assert host.read() == (None, NONE, None)


def test_missing_proc_files_mean_no_limit(tmp_path: Path) -> None:
    assert read_cgroup_cpu_limit(tmp_path / "nope", tmp_path / "nope") == (None, NONE, None)


def test_resolve_uses_the_cgroup_quota(host: FakeHost) -> None:
    top = host.mount("cpu", "cgroup", "rw,cpu")
    _v1(top / "pod", "35000")
    host.member_of("1:cpu:/pod\n")
    limit = resolve_cpu_limit(proc_cgroup=host.proc_cgroup, mountinfo=host.mountinfo)
    assert (limit.cores, limit.source, limit.cgroup_path) == (0.35, V1, str(top / "pod"))
    assert limit.available_cpus >= 1


def test_resolve_flag_wins_and_warns_when_over_quota(
    host: FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    top = host.mount("cpu", "cgroup", "rw,cpu")
    _v1(top / "pod", "50000")
    host.member_of("1:cpu:/pod\n")
    with caplog.at_level(logging.WARNING, logger="sharedserve.limits.cpu"):
        limit = resolve_cpu_limit(0.25, proc_cgroup=host.proc_cgroup, mountinfo=host.mountinfo)
    assert (limit.cores, limit.source, limit.cgroup_path) == (0.25, CpuLimitSource.FLAG, None)
    assert caplog.text == ""
    with caplog.at_level(logging.WARNING, logger="sharedserve.limits.cpu"):
        limit = resolve_cpu_limit(4.0, proc_cgroup=host.proc_cgroup, mountinfo=host.mountinfo)
    assert (limit.cores, limit.source) == (4.0, CpuLimitSource.FLAG)
    assert "throttl" in caplog.text


def test_resolve_without_any_quota(host: FakeHost) -> None:
    host.mount("unified", "cgroup2", "rw")
    host.member_of("0::/\n")
    limit = resolve_cpu_limit(proc_cgroup=host.proc_cgroup, mountinfo=host.mountinfo)
    assert (limit.cores, limit.source, limit.cgroup_path) == (None, NONE, None)


@pytest.mark.parametrize("flag", [0.0, -1.0, float("nan"), float("inf")])
def test_resolve_rejects_a_nonpositive_flag(flag: float) -> None:
    with pytest.raises(ConfigError, match="positive"):
        resolve_cpu_limit(flag)


def test_create_v1_writes_period_and_quota(host: FakeHost) -> None:
    top = host.mount("cpu", "cgroup", "rw,cpu,cpuacct")
    leaf = create_cpu_cgroup("sharedserve", "model-0", 0.35, mountinfo=host.mountinfo)
    assert leaf == top / "sharedserve" / "model-0"
    assert (leaf / "cpu.cfs_quota_us").read_text() == "35000"
    assert (leaf / "cpu.cfs_period_us").read_text() == "100000"


def test_create_v2_enables_cpu_in_subtree_control(host: FakeHost) -> None:
    # The unified mount without cpu comes first: it must be passed over.
    host.mount("unified-nocpu", "cgroup2", "rw")
    (host.base / "unified-nocpu" / "cgroup.controllers").write_text("memory pids\n")
    top = host.mount("unified", "cgroup2", "rw")
    (top / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (top / "cgroup.subtree_control").write_text("memory\n")
    leaf = create_cpu_cgroup("sharedserve", "m", 1.5, period_us=50_000, mountinfo=host.mountinfo)
    assert leaf == top / "sharedserve" / "m"
    assert (leaf / "cpu.max").read_text() == "75000 50000"
    assert (top / "cgroup.subtree_control").read_text() == "+cpu"
    assert (top / "sharedserve" / "cgroup.subtree_control").read_text() == "+cpu"


def test_create_without_a_cpu_hierarchy(host: FakeHost) -> None:
    host.mount("memory", "cgroup", "rw,memory")
    top = host.mount("unified", "cgroup2", "rw")
    (top / "cgroup.controllers").write_text("memory pids\n")
    with pytest.raises(ConfigError, match="no cgroup hierarchy with the cpu controller"):
        create_cpu_cgroup("sharedserve", "m", 0.5, mountinfo=host.mountinfo)


@pytest.mark.parametrize(
    ("parent", "name", "cores", "period"),
    [
        ("a/b", "m", 0.5, 100_000),
        ("p", "..", 0.5, 100_000),
        ("p", "", 0.5, 100_000),
        ("p", "m", 0.0, 100_000),
        ("p", "m", float("nan"), 100_000),
        ("p", "m", 0.005, 100_000),  # 500 us: under the kernel's 1 ms minimum quota
        ("p", "m", 0.5, 500),
        ("p", "m", 0.5, 2_000_000),
    ],
)
def test_create_rejects_bad_arguments(
    host: FakeHost, parent: str, name: str, cores: float, period: int
) -> None:
    host.mount("cpu", "cgroup", "rw,cpu")
    with pytest.raises(ConfigError):
        create_cpu_cgroup(parent, name, cores, period, mountinfo=host.mountinfo)


# --- cpu.stat: what the quota did ----------------------------------------------------------------

V2_CPU_STAT = """usage_usec 8123456
user_usec 7000000
system_usec 1123456
nr_periods 1200
nr_throttled 300
throttled_usec 4500000
nr_bursts 0
burst_usec 0
"""
V1_CPU_STAT = """nr_periods 1200
nr_throttled 300
throttled_time 4500000123
nr_bursts 0
burst_time 0
"""


@pytest.mark.parametrize("text", [V2_CPU_STAT, V1_CPU_STAT], ids=["v2", "v1"])
def test_cpu_stat_parses_both_versions_in_microseconds(text: str) -> None:
    assert parse_cpu_stat(text) == CpuThrottling(1200, 300, 4_500_000)


@pytest.mark.parametrize(
    "text",
    ["usage_usec 5\nuser_usec 3\nsystem_usec 2\n", "nr_periods 3\nthrottled_usec 1\n", ""],
    ids=["v2-without-cpu-controller", "no-nr_throttled", "empty"],
)
def test_cpu_stat_without_throttling_counters_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"cpu\.stat"):
        parse_cpu_stat(text)


def test_throttling_between_two_readings() -> None:
    later = CpuThrottling(1500, 420, 6_000_000)
    assert later.since(CpuThrottling(1200, 300, 4_500_000)) == CpuThrottling(300, 120, 1_500_000)


def test_read_cpu_throttling_from_a_directory(tmp_path: Path) -> None:
    assert read_cpu_throttling(tmp_path) is None  # no cpu.stat: no cgroup to read
    (tmp_path / "cpu.stat").write_text("usage_usec 1\n")
    assert read_cpu_throttling(tmp_path) is None  # no cpu controller there
    (tmp_path / "cpu.stat").write_text(V1_CPU_STAT)
    assert read_cpu_throttling(tmp_path) == CpuThrottling(1200, 300, 4_500_000)

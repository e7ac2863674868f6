"""Run the real ``sharedserve pack`` as a child process and read its targets file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support.gpus import fake_gpu_file
from tests.support.servers import SHAREDSERVE, clean_env


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now, children of children included (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes; its parent (the packer) has exited.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# Where a packer makes its cgroups, "sharedserve-pack-PID": v1's cpu controller, v2, hybrid.
CGROUP_ROOTS = (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))


def pack_cgroups() -> set[Path]:
    """Every packer's cgroup on this host, running or left behind."""
    return {p for root in CGROUP_ROOTS if root.is_dir() for p in root.glob("sharedserve-pack-*")}


def cgroups_now(pid: int | None = None) -> set[str]:
    """The packers' cgroups on this host, or only those of packer ``pid`` (other packs may be
    running on a shared machine: a test judges its own)."""
    pattern = f"sharedserve-pack-{'*' if pid is None else pid}"
    return {str(p) for root in CGROUP_ROOTS if root.is_dir() for p in root.glob(pattern)}


def write_pack_spec(
    tmp: Path, models_dir: Path, spec: str, torch_dir: Path | None = None
) -> tuple[Path, Path]:
    """``spec`` written to ``tmp/pack.yaml`` with MODELS and TORCH replaced by the paths of
    ``models_dir`` and ``torch_dir`` relative to it, and a file of two simulated 16 GiB GPUs:
    (spec, GPUs file)."""
    gpus = fake_gpu_file(tmp, [16384, 16384])
    spec = spec.replace("MODELS", os.path.relpath(models_dir, tmp))
    if torch_dir is not None:
        spec = spec.replace("TORCH", os.path.relpath(torch_dir, tmp))
    (tmp / "pack.yaml").write_text(spec)
    return tmp / "pack.yaml", gpus


def _packer_alive(cgroup: Path) -> bool:
    try:
        return alive(int(cgroup.name.rsplit("-", 1)[1]))
    except (ValueError, FileNotFoundError):  # not a pid, or it exited while we looked
        return False


def leaked_pack_cgroups(before: set[Path], settle: float = 10) -> set[Path]:
    """The packers' cgroups that appeared since ``before`` and outlived their packer: what a
    run left behind. Packs of other tests or sessions on a shared machine keep theirs while
    they run, and one that has just exited may be removing them: only what stays, whose packer
    is gone, after ``settle`` seconds, counts. (A check of every cgroup on the host failed
    whenever another pack ran beside the test.)"""
    deadline = time.monotonic() + settle
    while True:
        leaked = {p for p in pack_cgroups() - before if p.exists() and not _packer_alive(p)}
        if not leaked or time.monotonic() > deadline:
            return leaked
        time.sleep(0.2)


class PackRun:
    """A ``sharedserve pack`` child process and its targets file."""

    def __init__(
        self,
        tmp: Path,
        model: Path | None,
        *args: str,
        env: dict[str, str] | None = None,
        log_dir: bool = True,
    ) -> None:
        """``model`` None: a ``--spec`` run, the spec among ``args``. ``env``: added to the
        packer's own environment (the contract's variables are cleared first). ``log_dir``
        False: no --log-dir, pack makes its own temporary one (under ``env``'s TMPDIR)."""
        tmp.mkdir(parents=True, exist_ok=True)
        self.targets_path = tmp / "targets.json"
        self.log_path = tmp / "pack.log"
        self._log = self.log_path.open("wb")
        command = [*SHAREDSERVE, "pack"]
        command += [] if model is None else ["--model", str(model)]
        command += ["--targets-out", str(self.targets_path)]
        command += ["--log-dir", str(tmp / "logs")] if log_dir else []
        command += args
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=clean_env(**(env or {}))
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def targets(self) -> dict:
        return json.loads(self.targets_path.read_text())

    def wait_targets(self, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"pack exited early:\n{self.log()}"
            if self.targets_path.exists():
                return self.targets()
            time.sleep(0.2)
        raise AssertionError(f"no targets file within {timeout} s:\n{self.log()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode

"""What every stage of the GPU proof kit shares: arguments, the machine, checks and results.

A stage is a script in ``stages/`` run by ``run.sh`` as ``python stages/NAME.py OUTDIR
[--dry-run]``. It calls ``Stage.from_argv()``, measures, records checks and figures on the
``Stage``, and ``finish()`` writes ``OUTDIR/NAME.md`` and ``OUTDIR/NAME.json`` with the device,
driver, CUDA and torch versions and the command. ``--dry-run`` runs the same code on a machine
without a GPU against a simulated inventory (``--fake-gpus``) with smaller settings: every GPU
figure is then ``null`` and every check that only a GPU can answer is recorded as not
applicable, never as passed. ``replicas.py`` beside it starts and drives the model servers.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

# The simulated GPU of a dry run: an H100's size, so the memory arithmetic is the real one's.
DRY_RUN_GPU = {
    "uuid": "GPU-00000000-0000-0000-0000-00000000d7e1",
    "index": 0,
    "name": "simulated GPU (dry run)",
    "memory_mib": 81559,
    "numa_node": 0,
    "healthy": True,
}


@dataclass
class Check:
    name: str
    ok: bool | None
    """None: not applicable here (a simulated GPU cannot answer it)."""
    detail: str


@dataclass
class Stage:
    """One stage's run: where it writes, what it found."""

    name: str
    title: str
    out: Path
    work: Path
    dry_run: bool
    fake_gpus: Path | None
    started: float = field(default_factory=time.time)
    checks: list[Check] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    unavailable: str | None = None

    @classmethod
    def from_argv(cls, name: str, title: str) -> Stage:
        parser = argparse.ArgumentParser(description=title)
        parser.add_argument("out", type=Path, help="directory for NAME.md and NAME.json")
        parser.add_argument("--dry-run", action="store_true", help="simulated GPU, small run")
        parser.add_argument("--work", type=Path, help="scratch directory (logs, models)")
        args = parser.parse_args()
        work = args.work or Path(os.environ.get("KIT_WORK", "/tmp/sharedserve-gpu-kit")) / name
        work.mkdir(parents=True, exist_ok=True)
        args.out.mkdir(parents=True, exist_ok=True)
        fake = None
        if args.dry_run:
            fake = work / "fake-gpus.json"
            fake.write_text(json.dumps({"gpus": [DRY_RUN_GPU]}))
        return cls(name, title, args.out, work, args.dry_run, fake)

    # --- the GPU --------------------------------------------------------------------------

    def gpu_backend(self) -> Any:
        from sharedserve.gpu.backend import open_gpu_backend

        backend = open_gpu_backend(self.fake_gpus)
        if backend is None:
            raise SystemExit(
                "no NVIDIA driver answers NVML here: run on a GPU machine, or with --dry-run"
            )
        return backend

    def gpu(self) -> Any:
        """The GPU the stage runs on: the lowest NVML index, as ``pack`` picks by default."""
        backend = self.gpu_backend()
        try:
            return min(backend.list_gpus(), key=lambda g: g.index)
        finally:
            backend.close()

    @functools.cached_property
    def environment(self) -> dict[str, Any]:
        """The bench reports' environment (CPU, GPU, driver, CUDA, packages), plus torch's CUDA
        and the checkout's commit; GPU fields are null on a dry run. Read once per stage."""
        from sharedserve.bench.environment import describe_environment

        kit_command = os.environ.get("KIT_COMMAND")
        command = tuple(shlex.split(kit_command) if kit_command else sys.argv)
        backend = self.gpu_backend()
        try:
            env = describe_environment(backend, command)
        finally:
            backend.close()
        gpu = (env["gpus"] or [{}])[0]
        torch_cuda = None
        try:
            import torch

            torch_cuda = torch.version.cuda
        except ImportError:
            pass
        env["packages"]["sharedserve"] = _sharedserve_version()
        return {
            "device": gpu.get("name"),
            "device_uuid": gpu.get("uuid"),
            "device_memory_mib": gpu.get("memory_mib"),
            "driver": env.pop("gpu_driver"),
            "simulated_gpu": env.pop("gpus_simulated"),
            "torch": env["packages"].get("torch"),
            "torch_cuda": torch_cuda,
            **env,
        }

    # --- recording ------------------------------------------------------------------------

    def check(self, name: str, ok: bool | None, detail: str) -> None:
        """Record a check; on a dry run a GPU-only check is passed as ``ok=None``."""
        self.checks.append(Check(name, None if ok is None else bool(ok), detail))
        mark = {True: "PASS", False: "FAIL", None: "n/a "}[self.checks[-1].ok]
        print(f"[{self.name}] {mark} {name}: {detail}", flush=True)

    def gpu_check(self, name: str, ok: bool, detail: str) -> None:
        """A check only a real GPU can answer: not applicable on a dry run."""
        if self.dry_run:
            self.check(name, None, "needs a real GPU (dry run)")
        else:
            self.check(name, ok, detail)

    def section(self, *lines: str) -> None:
        self.sections.append("\n".join(lines))

    def status(self) -> str:
        if self.unavailable is not None:
            return "unavailable"
        return "fail" if any(c.ok is False for c in self.checks) else "pass"

    def finish(self, *, partial: bool = False) -> None:
        """Write NAME.md and NAME.json. ``partial``: more is to come (a long stage writes what it
        has as it goes, so a run cut off at its time limit still hands something back)."""
        env = self.environment
        doc = {
            "stage": self.name,
            "title": self.title,
            "status": self.status(),
            "partial": partial,
            "unavailable": self.unavailable,
            "dry_run": self.dry_run,
            "started_utc": datetime.fromtimestamp(self.started, timezone.utc).isoformat(),
            "seconds": round(time.time() - self.started, 1),
            "environment": env,
            "checks": [c.__dict__ for c in self.checks],
            "results": self.results,
        }
        (self.out / f"{self.name}.json").write_text(json.dumps(doc, indent=1, default=_plain))
        (self.out / f"{self.name}.md").write_text(self._markdown(doc))
        if not partial:
            print(f"[{self.name}] {doc['status']} in {doc['seconds']} s", flush=True)

    def _markdown(self, doc: dict[str, Any]) -> str:
        env = doc["environment"]
        device = env["device"] or "simulated GPU (dry run): no GPU figure below is measured"
        packages = ", ".join(f"{k} {v}" for k, v in env["packages"].items() if v)
        lines = [
            f"# GPU proof kit: {self.title}" + (" (DRY RUN)" if self.dry_run else ""),
            "",
            f"{doc['started_utc'][:16].replace('T', ' ')} UTC, {doc['seconds']} s, from the "
            "repository root:",
            "",
            f"    {env['command']}",
            "",
            f"- Device: {device}"
            + (f", {env['device_memory_mib']} MiB, {env['device_uuid']}" if env["device"] else ""),
            f"- Driver {env['driver']}, CUDA (driver) {env['cuda_driver']}; torch {env['torch']} "
            f"(CUDA {env['torch_cuda']})",
            f"- CPU: {env['cpu']}, {env['cpu_count']} cores; Python {env['python']}; "
            f"{env['platform']}",
            f"- Packages: {packages}",
            "",
            f"**Status: {doc['status']}**"
            + (f" ({doc['unavailable']})" if doc["unavailable"] else "")
            + (" (PARTIAL: the stage was still running)" if doc["partial"] else ""),
            "",
        ]
        if self.checks:
            lines += ["| check | result | detail |", "|---|---|---|"]
            for c in self.checks:
                mark = {True: "PASS", False: "FAIL", None: "n/a"}[c.ok]
                lines.append(f"| {c.name} | {mark} | {c.detail} |")
            lines.append("")
        return "\n".join([*lines, *(s + "\n" for s in self.sections)])


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _sharedserve_version() -> str:
    """The checkout's version and commit: on the GPU machine it runs uninstalled, maybe without
    its .git, so the version comes from pyproject.toml and the commit where git can tell."""
    root = Path(__file__).resolve().parents[2]
    version = "?"
    if sys.version_info >= (3, 11):  # tomllib; the GPU machine has 3.12
        import tomllib

        version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    try:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=root,
            check=True,
        )
        return f"{version} (git {found.stdout.strip()})"
    except (OSError, subprocess.CalledProcessError):
        return str(version)


def markdown_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    return [
        "| " + " | ".join(header) + " |",
        "|---" * len(header) + "|",
        *("| " + " | ".join(map(cell, row)) + " |" for row in rows),
    ]

"""``sharedserve pack --dry-run`` on simulated multi-GPU hosts: where each replica goes, with its
cap, reserve and CPU quota, and nothing made or started. In process (the CLI's own ``main``),
over real models and the one placement routine; the GPUs are FakeGpuBackend's. Real replicas on
two simulated GPUs are run by test_pack_spec.py."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from sharedserve.config import CONTEXT_RESERVE_MIB
from sharedserve.pack.prepare import footprint_mib
from sharedserve.placement import OpenEnded, Replicas, place
from tests.support.cli import invoke
from tests.support.gpus import fake_gpu_file

pytestmark = [pytest.mark.tensorflow]

RESERVE = CONTEXT_RESERVE_MIB


def _spec(tmp: Path, models_dir: Path, body: str) -> Path:
    spec = tmp / "pack.yaml"
    spec.write_text(body.replace("MODELS", os.path.relpath(models_dir, tmp)))
    return spec


def _rows(stdout: str) -> dict[str, list[str]]:
    """The placement table's cells by replica name (rich draws it with box characters)."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.replace("┃", "│").split("│")[1:-1]]
        if cells and cells[0] and cells[0] != "replica":
            rows[cells[0]] = cells
    return rows


def test_the_issues_mix_fits_two_16_gib_gpus_as_size_places_it(
    models_dir: Path, tmp_path: Path
) -> None:
    # One 8 GiB model and twenty small ones. Cut into equal slots sized to the largest replica
    # (8.5 GiB), two 16 GiB GPUs held two of the 21 replicas, and pack refused the mix.
    spec = _spec(
        tmp_path,
        models_dir,
        "models:\n"
        "  - {model: MODELS/tiny, name: big, replicas: 1, gpu_memory_mib: 8192}\n"
        "  - {model: MODELS/tiny, name: small, replicas: 20}\n",
    )
    gpus = fake_gpu_file(tmp_path, [16384, 16384])
    logs = tmp_path / "logs"
    result = invoke(
        "pack", "--spec", str(spec), "--fake-gpus", str(gpus), "--dry-run", "--log-dir", str(logs)
    )
    assert result.exit_code == 0, result.output
    rows = _rows(result.stdout)
    assert sorted(rows) == sorted(["big-0", *(f"small-{i}" for i in range(20))])
    assert rows["big-0"][1:5] == ["0", "8192", "0.5", "asked"]
    on_gpu = {name: int(cells[1]) for name, cells in rows.items()}
    # The small ones fill what the big one leaves of GPU 0 (bundle), then GPU 1.
    small = [on_gpu[f"small-{i}"] for i in range(20)]
    assert small == sorted(small) and set(small) == {0, 1}
    for index in (0, 1):  # caps and reserves within each GPU, as the summary line adds them
        line = next(x for x in result.stdout.splitlines() if x.startswith(f"GPU {index} "))
        used, total = line.rsplit("= ", 1)[1].removesuffix(" MiB").split(" of ")
        assert int(used) <= int(total) == 16384
    assert "dry run: nothing was started" in result.stdout
    assert not logs.exists()  # nothing made: no log directory, so no replica either

    # size places the same replicas on 16 GiB GPUs opened as needed: as many GPUs.
    weights = math.ceil(footprint_mib(models_dir / "tiny" / "1"))
    fleet = place(
        [Replicas("big", 1, 8192), Replicas("small", 20, weights)],
        OpenEnded(16384, gpus_per_node=8),
        reserve_mib=RESERVE,
    )
    assert len(fleet.gpus) == len(set(on_gpu.values())) == 2
    assert fleet.gpus_of("small") == small


def test_spread_skips_an_unhealthy_gpu_and_places_around_a_pinned_entry(
    models_dir: Path, tmp_path: Path
) -> None:
    spec = _spec(
        tmp_path,
        models_dir,
        "cpu_limit: 0.5\nmodels:\n"
        "  - {model: MODELS/tiny, name: a, replicas: 2}\n"
        "  - {model: MODELS/tiny, name: b, replicas: 1, gpu: 2, gpu_memory_mib: 4096}\n",
    )
    gpus = fake_gpu_file(tmp_path, [81920, 16384, 16384], healthy=[True, False, True])
    result = invoke(
        "pack", "--spec", str(spec), "--fake-gpus", str(gpus), "--dry-run", "--policy", "spread"
    )
    assert result.exit_code == 0, result.output
    rows = _rows(result.stdout)
    # b pinned to GPU 2; a's replicas apart, on the least used GPUs; none on unhealthy GPU 1.
    assert {name: cells[1] for name, cells in rows.items()} == {
        "a-0": "0",
        "a-1": "2",
        "b-0": "2",
    }
    assert rows["b-0"][2:] == ["4096", "0.25", "asked", "0.5 cores"]
    assert rows["a-0"][4:] == ["split", "0.5 cores"]
    # The reserve, the same for every replica, is said once under the table.
    assert f"also holds a {RESERVE} MiB reserve beside its cap" in " ".join(result.stdout.split())
    assert "CPU quota: NOT enforced (a dry run makes no cgroup)" in result.stdout


def test_a_mix_no_gpu_holds_is_refused_with_its_figures(models_dir: Path, tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        models_dir,
        "models:\n  - {model: MODELS/tiny, replicas: 5, gpu_memory_mib: 7000}\n",
    )
    gpus = fake_gpu_file(tmp_path, [16384, 16384])
    result = invoke("pack", "--spec", str(spec), "--fake-gpus", str(gpus), "--dry-run")
    assert result.exit_code == 2
    free = 16384 - 2 * (7000 + RESERVE)  # two replicas of each GPU's fit
    assert (
        f"1 of 5 replicas fit no GPU on this host: 1 of tiny (7,000 MiB + {RESERVE} MiB reserve "
        f"each); GPU 0 {free:,} of 16,384 MiB free (2 replicas)"
    ) in result.stderr

"""Where ``pack`` keeps its replicas' logs, and what a run leaves in the temporary folder.

Without --log-dir, pack names a new folder under TMPDIR on start and removes it on a clean stop
(SIGTERM or Ctrl-C), unless --keep-logs. Judged by listing the packer's TMPDIR, one of the
test's own, before and after a real run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.gpus import fake_gpu_file
from tests.support.pack import PackRun

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]


def run_and_stop(models_dir: Path, tmp: Path, *args: str) -> tuple[Path, str]:
    """One replica of ``tiny`` packed with TMPDIR ``tmp/tmp``, AVAILABLE, then stopped: that
    TMPDIR and the packer's output."""
    scratch = tmp / "tmp"
    scratch.mkdir()
    gpus = fake_gpu_file(tmp, [16384])
    run = PackRun(
        tmp / "run",
        models_dir / "tiny",
        "--replicas",
        "1",
        "--fake-gpus",
        str(gpus),
        *args,
        env={"TMPDIR": str(scratch)},
        log_dir=False,
    )
    try:
        run.wait_targets()
        (folder,) = scratch.iterdir()  # named on start, holding the replica's log
        assert folder.name.startswith("sharedserve-pack-tiny-")
        assert (folder / "tiny-0.log").is_file()
        assert f"replica logs in {folder}, " in run.log()  # said before any replica starts
    finally:
        code = run.stop()
    assert code == 0, run.log()
    return scratch, run.log()


def test_a_clean_stop_leaves_the_temporary_folder_as_it_was(
    models_dir: Path, tmp_path: Path
) -> None:
    scratch, log = run_and_stop(models_dir, tmp_path)
    assert list(scratch.iterdir()) == [], log
    assert "removed when pack stops cleanly" in log


def test_keep_logs_keeps_the_folder_and_the_replica_s_log(models_dir: Path, tmp_path: Path) -> None:
    scratch, log = run_and_stop(models_dir, tmp_path, "--keep-logs")
    (folder,) = scratch.iterdir()
    assert "AVAILABLE" in (folder / "tiny-0.log").read_text()
    assert "kept (--keep-logs) when pack stops cleanly" in log
    assert f"replica logs kept in {folder}" in log

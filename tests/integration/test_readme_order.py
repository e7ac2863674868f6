"""README.md's ``sh`` blocks, top to bottom in one directory, as a reader goes after ``make demo``.

Run as written: every ``sharedserve models build`` and ``models list`` (in process, in the walk's
directory). Each section starts by building what it needs, so the walk builds ``tiny`` five times
and ``resnet50`` (torch) three times into the same ``models/`` and ``torch-models/``: every build
after the first must succeed on what is there, as a reader's does. The first build of each model
is stood in for, at the line that builds it and not before: ``tiny`` is the session's real build;
any other name is ``tiny``'s files and build stamp under that name (building mobilenet_v2,
resnet50 and inception_v3 for both frameworks would take minutes). ``models build`` then finds
each identical and keeps it, as it does a reader's second run.

Checked where it stands (tests/support/readme_walk.py), not run: every other command. The
serving, paging and pack blocks run as written in tests/integration/test_readme.py (each in a
fresh directory with ``tiny`` given), the ``k8s render --spec`` block in test_k8s_manifests.py,
the client snippets in test_readme_snippets.py; bench, profile, size --verify, allocator and make
take minutes or a cluster. For those the walk holds each path read to "in the checkout, or made by
a block above", each subcommand and flag to the CLI's own, and each spec or fleet file's model and
profile paths likewise.

Why a block moved too early fails here: the walk's directory starts empty and a model appears in
it only at the ``models build`` line that builds it; a path that a command not run writes
(``profile --out profiles/tiny``, ``size --out plan/``) counts only from that line on. Move the
paging block (``cp -r models/tiny ...``) above "Example models" and ``models/tiny`` is in neither
place when it is read: the walk names the README line and the path. tests/unit/test_readme_walk.py
shows it on a README of its own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli import invoke
from tests.support.readme_walk import Invocation, Walk

pytestmark = [pytest.mark.tensorflow, pytest.mark.torch, pytest.mark.onnx]

ROOT = Path(__file__).resolve().parents[2]
RUN = frozenset({("models", "build"), ("models", "list")})


def _stand_in(base: Path, tiny: Path, name: str) -> None:
    """``tiny``'s base path copied to ``base`` (OUT/NAME), its build stamp naming ``name``."""
    shutil.copytree(tiny, base)
    for stamp in base.glob(".*.json"):  # the build's record of what it built (hidden)
        record = json.loads(stamp.read_text())
        stamp.write_text(json.dumps({**record, "model": name}) + "\n")


def test_every_block_in_order_in_one_directory(
    models_dir: Path,
    torch_models_dir: Path,
    onnx_models_dir: Path,
    export_models_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    builds: dict[str, int] = {}  # OUT/NAME: how many README lines built it
    built = {"torch": torch_models_dir, "onnx": onnx_models_dir, "export": export_models_dir}

    def run(command: Invocation) -> None:
        if command.command == ("models", "build"):
            tiny = built.get(command.options.get("--framework", ""), models_dir) / "tiny"
            for name in command.positionals:
                base = tmp_path / command.options["--out"] / name
                if not base.exists():  # the first build of it in this walk
                    _stand_in(base, tiny, name)
                key = str(base.relative_to(tmp_path))
                builds[key] = builds.get(key, 0) + 1
        result = invoke(*command.argv)
        assert result.exit_code == 0, f"sharedserve {' '.join(command.argv)}:\n{result.output}"

    walk = Walk(tmp_path, ROOT, run=run, runnable=RUN)
    assert walk.readme((ROOT / "README.md").read_text()) == []
    # The walk did run the README's builds, and again on what an earlier block built.
    assert {("models", "list")} < {c.command for c in walk.ran}
    assert builds["models/tiny"] > 1 and builds["torch-models/resnet50"] > 1, builds

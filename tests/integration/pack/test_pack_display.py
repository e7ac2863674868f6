"""``pack``'s tables at the widths terminals have: every cell whole at 80 columns, one line per
replica at 120; the live one and ``--dry-run``'s placement. The plan is pack's own (a dry run
over a real model on two simulated GPUs); the replicas are pack's, in the states a running pack
shows."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from sharedserve.config import PackEntry, PackSettings
from sharedserve.pack import Pack
from sharedserve.pack.display import describe_plan, placement_table, replica_table
from sharedserve.pack.dry_run import dry_run
from sharedserve.pack.prepare import PreparedPack, prepare_pack
from sharedserve.pack.replica import Replica, ReplicaState
from sharedserve.pack.spec import parse_spec
from tests.support.gpus import fake_gpu_file

pytestmark = [pytest.mark.tensorflow]


@pytest.fixture
def settings(models_dir: Path, tmp_path: Path) -> PackSettings:
    # A name as long as the catalogue's longest (mobilenet_v2), twelve replicas of it (two-digit
    # indices), over two GPUs: the widest cells a pack of the examples has.
    entry = PackEntry(
        model_dir=models_dir / "tiny", name="mobilenet_v2", replicas=12, cpu_limit_cores=0.5
    )
    return PackSettings(
        entries=(entry,),
        fake_gpus=fake_gpu_file(tmp_path, [16384, 16384]),
        log_dir=tmp_path / "a-log-directory-as-long-as-a-temporary-one-is" / "logs",
        base_port=50000,
    )


@pytest.fixture
def plan(settings: PackSettings) -> PreparedPack:
    return prepare_pack(settings, dry_run=True)


def _replicas(plan: PreparedPack) -> list[Replica]:
    replicas = [Replica(spec) for spec in plan.specs]
    for replica in replicas:
        replica.state = ReplicaState.AVAILABLE
    crashed = replicas[-1]
    crashed.state, crashed.restarts, crashed.last_exit = ReplicaState.BACKOFF, 3, -9
    return replicas


def _render(plan: PreparedPack, width: int, table: Table | None = None) -> str:
    """``table`` (the live one, by default) as a terminal ``width`` columns wide shows it."""
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(table or replica_table(_replicas(plan), plan))
    return console.export_text()


def _row(text: str, name: str) -> str:
    (line,) = [ln for ln in text.splitlines() if f"│ {name} " in ln]
    return line


@pytest.mark.parametrize("width", [80, 120])
def test_the_live_table_fits_with_every_cell_whole(plan: PreparedPack, width: int) -> None:
    text = _render(plan, width)
    # Rich cuts a cell that does not fit with "…"; the old table (full URLs, gRPC addresses,
    # pid, model) lost every address that way at 80 columns.
    assert "…" not in text, text
    assert all(len(line) <= width for line in text.splitlines()), text
    for spec, share in zip(plan.specs, plan.shares, strict=True):
        cells = [c.strip() for c in _row(text, spec.name).split("│")[1:-1]]
        assert share.gpu is not None and share.share.mib is not None
        state = "backoff" if spec is plan.specs[-1] else "available"
        restarts = "3 (exit -9)" if spec is plan.specs[-1] else "0"
        assert cells == [
            spec.name, str(spec.rest_port), str(spec.grpc_port), str(share.gpu.index),
            str(share.share.mib), state, restarts,
        ], text  # fmt: skip
    # The addresses are ports on the one host; the table says where the full endpoints are.
    caption = " ".join(text.split())
    assert "ports on http://127.0.0.1; every endpoint in full:" in caption
    assert "".join(text.split()).endswith(str(plan.targets_path).replace(" ", "")), text


@pytest.mark.parametrize("width", [80, 120])
def test_the_dry_runs_placement_fits_with_every_cell_whole(plan: PreparedPack, width: int) -> None:
    text = _render(plan, width, placement_table(plan))
    # It had the GPU's name and a reserve column: 94 columns wide, cut to fit 80.
    assert "…" not in text, text
    assert all(len(line) <= width for line in text.splitlines()), text
    for spec, share in zip(plan.specs, plan.shares, strict=True):
        cells = [c.strip() for c in _row(text, spec.name).split("│")[1:-1]]
        assert share.gpu is not None and share.share.fraction is not None
        fraction = f"{share.share.fraction:g}"
        assert cells == [
            spec.name, str(share.gpu.index), str(share.share.mib), fraction, "split", "0.5 cores"
        ], text  # fmt: skip
    reserve = f"each replica on a GPU also holds a {plan.context_reserve_mib} MiB reserve"
    assert reserve in " ".join(text.split())


def test_the_dry_run_prints_at_the_terminals_width(
    settings: PackSettings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # It printed at 120 columns at least, whatever the terminal: wider than an 80-column one.
    monkeypatch.setenv("COLUMNS", "80")
    assert dry_run(settings) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith(tuple("┏┃┡│└"))]
    assert len(table) > settings.entries[0].replicas
    assert all(len(line) <= 80 for line in table), out
    assert "GPU 0 Tesla T4" in out and "dry run: nothing was started" in out


def test_the_summary_names_a_shared_servers_models_with_their_weights(
    models_dir: Path, tmp_path: Path
) -> None:
    # It said "shared: 2 replicas, weight 1": the group's default weight, its models unnamed.
    spec = parse_spec(
        {
            "servers": [
                {
                    "name": "shared", "replicas": 2, "cpu_limit": 0.5,
                    "models": [
                        {"model": "tiny", "name": "t1", "weight": 3, "slo_p99_ms": 50},
                        {"model": "tiny", "name": "t2"},
                    ],
                }
            ],
            "models": [{"model": "tiny", "name": "solo", "weight": 2}],
        },
        base_dir=models_dir,
    )  # fmt: skip
    pack = Pack(PackSettings(entries=spec.entries, fake_gpus=fake_gpu_file(tmp_path, [16384])))
    pack.plan = prepare_pack(pack.settings, dry_run=True)
    lines = describe_plan(pack)
    assert lines[0] == "3 replicas of 3 models:"
    at = lines.index("  shared: 2 replicas of a shared server, each holding 2 models:")
    assert lines[at + 1 : at + 3] == [
        "    t1: weight 3, P99 objective 50 ms",
        "    t2: weight 1",
    ]
    assert "  solo: 1 replica, weight 2" in lines
    assert not any("shared" in line and "weight" in line for line in lines)

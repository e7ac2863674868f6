"""``profile --beside``: each neighbour paired with its rate, and its row as a bench of two
entries weighted by their requests/s, so that ``bench.offered`` gives each its own rate."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sharedserve.bench.offered import ReplicaRef, offered_load
from sharedserve.cli.profile import Beside, beside_settings, neighbours
from sharedserve.config import BenchSettings, LoadPattern, PackEntry, PackSettings
from sharedserve.errors import ConfigError

RESNET, MOBILENET = Path("models/resnet50"), Path("models/mobilenet_v2")


@pytest.mark.parametrize(
    ("given", "rates", "folders"),
    [
        ([(RESNET, "resnet50")], [5.0], ["beside-resnet50"]),
        ([(RESNET, "resnet50"), (MOBILENET, "mobilenet_v2")], [5.0, 20.0],
         ["beside-resnet50", "beside-mobilenet_v2"]),
        # One neighbour at two rates: a folder each, named by its rate.
        ([(RESNET, "resnet50"), (RESNET, "resnet50")], [2.0, 7.5],
         ["beside-resnet50-2qps", "beside-resnet50-7.5qps"]),
    ],
)  # fmt: skip
def test_each_neighbour_gets_its_rate_and_a_folder_of_its_own(
    given: list[tuple[Path, str]], rates: list[float], folders: list[str]
) -> None:
    found = neighbours("tiny", given, rates)
    assert [(b.model_dir, b.name, b.rate) for b in found] == [
        (path, name, rate) for (path, name), rate in zip(given, rates, strict=True)
    ]
    assert [b.folder for b in found] == folders


@pytest.mark.parametrize(
    ("given", "rates", "message"),
    [
        ([(RESNET, "resnet50")], [], "got 1 --beside and 0 --beside-rate"),
        ([], [5.0], "got 0 --beside and 1 --beside-rate"),
        ([(RESNET, "resnet50")], [0.0], "--beside-rate must be positive requests/s, got 0"),
        ([(RESNET, "resnet50")], [float("inf")], "--beside-rate must be positive"),
        ([(Path("models/tiny"), "tiny")], [5.0], "named tiny, as the profiled one is"),
        ([(RESNET, "resnet50"), (RESNET, "resnet50")], [5.0, 5.0],
         "measures beside-resnet50-5qps twice"),
    ],
)  # fmt: skip
def test_what_cannot_be_measured_is_refused_naming_the_flag(
    given: list[tuple[Path, str]], rates: list[float], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        neighbours("tiny", given, rates)


def test_the_row_beside_a_neighbour_is_the_open_loop_row_with_the_neighbour_added(
    tmp_path: Path,
) -> None:
    own = PackEntry(model_dir=Path("models/tiny"), gpu="0", cpu_limit_cores=1.0)
    poisson = BenchSettings(
        out_dir=tmp_path / "poisson",
        scales=(1,),
        pack=PackSettings(entries=(own,)),
        pattern=LoadPattern.POISSON,
        rate=12.0,
        stability_windows=1,
    )
    settings = beside_settings(
        poisson, Beside(RESNET, "resnet50", 3.0, "beside-resnet50"), tmp_path
    )
    settings.validate()
    assert settings.out_dir == tmp_path / "beside-resnet50"
    assert settings.pack is not None
    model, other = settings.pack.entries
    assert model == replace(own, weight=12.0)
    assert (other.model_dir, other.gpu, other.cpu_limit_cores, other.weight) == (
        RESNET, "0", 1.0, 3.0)  # fmt: skip
    # The rest is the open-loop row's: its pattern, one scale, no stability asked.
    assert replace(settings, out_dir=poisson.out_dir, pack=poisson.pack, rate=12.0) == poisson
    # bench splits the rate by weight: the model its open-loop rate, the neighbour its own.
    offered = offered_load(
        [ReplicaRef("tiny-0", "tiny", model.weight), ReplicaRef("resnet50-0", "resnet50", 3.0)],
        settings.pattern,
        concurrency=settings.concurrency,
        rate=settings.rate,
        scale=1,
    )
    assert offered["tiny-0"].rate == pytest.approx(12.0)
    assert offered["resnet50-0"].rate == pytest.approx(3.0)

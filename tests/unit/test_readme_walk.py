"""The README walker (tests/support/readme_walk.py) on small READMEs of its own: what it takes
for "made by a block above", and what it refuses, so test_readme_order.py's silence on the real
README means something."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.readme_walk import Invocation, Walk

FENCE = "`" * 3
BUILD = "sharedserve models build tiny --out models/\n"
SERVE = "sharedserve serve --model models/tiny --rest-port 8501 &   # or in another terminal\n"


def readme(*blocks: str) -> str:
    return "\n".join(f"# step\n\n{FENCE}sh\n{b}{FENCE}\n" for b in blocks)


@pytest.fixture
def walk(tmp_path: Path) -> Walk:
    checkout = tmp_path / "checkout"
    (checkout / "examples").mkdir(parents=True)
    (checkout / "Makefile").write_text("demo: .venv\n\tsharedserve demo\n")
    (checkout / "examples" / "mix.yaml").write_text(
        "models:\n  - {model: ../models/tiny}\n  - model: ../torch-models/resnet50\n"
    )
    (tmp_path / "walk").mkdir()
    return Walk(tmp_path / "walk", checkout)


def test_a_block_that_reads_what_a_block_above_built_passes(walk: Walk) -> None:
    assert walk.readme(readme("make demo\n", BUILD, SERVE + "kill %1\n")) == []
    assert "models/tiny" in walk.written


def test_a_block_moved_above_the_build_it_needs_is_named(walk: Walk) -> None:
    # The serving block before the models block: models/tiny is not there yet.
    text = readme(BUILD.replace("tiny", "resnet50"), SERVE, BUILD)
    (problem,) = walk.readme(text)
    assert problem.startswith("README line 10, `sharedserve serve --model models/tiny")
    assert (
        "reads models/tiny, which is neither in the checkout nor made by a block above" in problem
    )


def test_a_spec_is_opened_and_its_models_held_to_the_same_rule(walk: Walk) -> None:
    bench = "sharedserve bench --spec examples/mix.yaml --scales 1,2 \\\n    --out bench-report/\n"
    (problem,) = walk.readme(readme(BUILD, bench))
    assert "(examples/mix.yaml): reads torch-models/resnet50" in problem
    assert "bench-report" in walk.written


def test_flags_and_commands_are_the_clis(walk: Walk) -> None:
    text = readme(
        BUILD
        + "sharedserve serve --model models/tiny --no-such-flag 3\n"
        + "sharedserve models make tiny\n"
        # pack hands a flag it does not know to serve: one serve takes is fine.
        + "sharedserve pack --model models/tiny --replicas 2 --enable-batching --max-batch-size 8\n"
        + "make demo install-everything\n"
    )
    assert walk.readme(text) == [
        "README line 5, `sharedserve serve --model models/tiny --no-such-flag 3`: "
        "`sharedserve serve` has no flag --no-such-flag",
        "README line 6, `sharedserve models make tiny`: `sharedserve models make` is no command",
        "README line 8, `make demo install-everything`: the Makefile has no target "
        "'install-everything'",
    ]


def test_shell_lines_read_and_write_as_cp_mkdir_and_redirections_do(walk: Walk) -> None:
    block = (
        "mkdir -p repository\n"
        "for name in a b; do cp -r models/tiny repository/m-$name; done\n"
        "printf 'pinned: true\\n' > repository/m-a/sharedserve.yaml\n"
        "sharedserve serve --model-repository repository --paging lru &\n"
        "until curl -sf localhost:8501/v2/health/ready > /dev/null; do sleep 1; done\n"
    )
    assert walk.readme(readme(BUILD, block)) == []
    (problem,) = Walk(walk.cwd, walk.checkout).readme(readme(block))
    assert "`cp -r models/tiny repository/m-$name`: reads models/tiny" in problem


def test_the_runnable_commands_are_run_each_time_a_block_has_them(walk: Walk) -> None:
    ran: list[Invocation] = []
    walk.run, walk.runnable = ran.append, frozenset({("models", "build")})
    torch = "sharedserve models build tiny resnet50 --framework torch --out torch-models/\n"
    assert walk.readme(readme(BUILD + torch, BUILD)) == []
    tf, torch_options = {"--out": "models/"}, {"--framework": "torch", "--out": "torch-models/"}
    assert [(i.command, i.positionals, i.options) for i in ran] == [
        (("models", "build"), ["tiny"], tf),
        (("models", "build"), ["tiny", "resnet50"], torch_options),
        (("models", "build"), ["tiny"], tf),
    ]
    # What is run writes for real: nothing is taken as written for it.
    assert walk.written == set()

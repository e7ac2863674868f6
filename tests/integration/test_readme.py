"""The README's serving and pack examples, run as written, so they cannot drift again.

Each block is taken from README.md as it stands and run by bash in a fresh directory, as a new
user would run it from a checkout with the environment active (``sharedserve`` on the PATH). The
only help given is ``models/tiny``, copied from the session's build instead of building it again
(the README's own build command makes it the same way). The serving example once started
``mobilenet_v2`` and then posted to ``tiny``: a 404 nobody noticed.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.readme_blocks import BLOCKS, README, ROOT, block, run_block, user_env

pytestmark = [pytest.mark.tensorflow, pytest.mark.torch]


def test_the_serving_example(models_dir: Path, tmp_path: Path) -> None:
    script = block("sharedserve serve --model models/tiny")
    shutil.copytree(models_dir / "tiny", tmp_path / "models" / "tiny")
    result = run_block(script, tmp_path)
    answers = [json.loads(line) for line in result.stdout.replace("}{", "}\n{").splitlines()]
    assert [a for a in answers if "error" in a] == []
    status, metadata, prediction, inference, limits = answers
    assert status["model_version_status"][0]["state"] == "AVAILABLE"
    assert "serving_default" in metadata["metadata"]["signature_def"]["signature_def"]
    assert len(prediction["predictions"]) == 1
    # The same row over the Open Inference Protocol gives the same answer.
    (output,) = inference["outputs"]
    assert output["shape"] == [1, 4]
    assert output["data"] == pytest.approx(prediction["predictions"][0], rel=1e-6)
    assert limits["gpu_memory_enforced"] is False


@pytest.mark.slow
def test_the_paging_example(models_dir: Path, torch_models_dir: Path, tmp_path: Path) -> None:
    script = block("--paging lru")
    shutil.copytree(models_dir / "tiny", tmp_path / "models" / "tiny")
    shutil.copytree(torch_models_dir / "tiny", tmp_path / "torch-models" / "tiny")
    result = run_block(script, tmp_path)
    decoder, text, answers = json.JSONDecoder(), result.stdout, []
    while not text.lstrip().startswith("sharedserve_"):
        answer, end = decoder.raw_decode(text.lstrip())
        answers.append(answer)
        text = text.lstrip()[end:]
    *predictions, limits = answers
    assert [len(p["predictions"]) for p in predictions] == [1] * 5, predictions
    states = {name: m["versions"]["1"]["state"] for name, m in limits["models"].items()}
    assert states["tf-tiny"] == "resident"  # pinned
    assert sorted(states.values()).count("paged_out") == 1, states
    counted = dict(line.rsplit(" ", 1) for line in text.strip().splitlines())
    assert (
        float(counted['sharedserve_model_page_ins_total{how="device_copy",model="torch-a"}']) >= 1
    )


@pytest.mark.slow
def test_the_pack_example(tmp_path: Path) -> None:
    build, pack = block("sharedserve pack").strip().split("\n", 1)
    # pack keeps its replicas' logs in a new folder under TMPDIR: this test's, not /tmp.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**user_env(), "TMPDIR": str(scratch)}
    built = subprocess.run(["bash", "-e", "-c", build], cwd=tmp_path, env=env, check=False)
    assert built.returncode == 0
    log = (tmp_path / "pack.out").open("w")
    packer = subprocess.Popen(
        ["bash", "-c", f"exec {pack.replace(chr(92) + chr(10), ' ')}"],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    targets = tmp_path / "targets.json"
    try:
        deadline = time.monotonic() + 240
        while not targets.exists():
            assert packer.poll() is None, (tmp_path / "pack.out").read_text()
            assert time.monotonic() < deadline, "the replicas never became AVAILABLE"
            time.sleep(0.5)
        replicas = json.loads(targets.read_text())["targets"]
        assert len(replicas) == 4
    finally:
        packer.send_signal(signal.SIGINT)  # the README's Ctrl-C
        assert packer.wait(60) == 0
        log.close()
    output = (tmp_path / "pack.out").read_text()
    assert "4 replicas of resnet50" in output and "CPU: 2 cores per replica" in output
    assert not targets.exists()  # cleaned up on the way out
    # The logs' temporary folder, named on start, went too: a clean stop leaves nothing.
    assert re.search(r"replica logs in \S*/sharedserve-pack-resnet50-\S*, removed", output), output
    assert list(scratch.iterdir()) == []


def test_the_paging_example_can_be_run_again(models_dir: Path, tmp_path: Path) -> None:
    """Its copies, made twice in the same folder, are the same copies: none lands inside one
    made before (``cp -r models/tiny repository/tf-tiny`` copies into a folder that exists)."""
    setup = block("--paging lru").split("sharedserve serve", 1)[0]
    shutil.copytree(models_dir / "tiny", tmp_path / "models" / "tiny")
    shutil.copytree(models_dir / "tiny", tmp_path / "torch-models" / "tiny")  # only copied here
    run_block(setup, tmp_path)
    first = sorted(p.relative_to(tmp_path) for p in (tmp_path / "repository").rglob("*"))
    run_block(setup, tmp_path)
    second = sorted(p.relative_to(tmp_path) for p in (tmp_path / "repository").rglob("*"))
    assert second == first
    assert sorted(p.name for p in (tmp_path / "repository").iterdir()) == [
        "tf-tiny",
        "torch-a",
        "torch-b",
        "torch-c",
    ]
    assert not (tmp_path / "repository" / "tf-tiny" / "tiny").exists()


# What the README has a reader write into the checkout: its blocks' outputs and folders, and the
# virtual environment its prose has Triton's client installed in.
WRITTEN = {
    *re.findall(r"--(?:out|targets-out) (\S+)", "\n".join(BLOCKS)),
    *(f"{d}/" for d in re.findall(r"\bmkdir (?:-p )?(\S+)", "\n".join(BLOCKS))),
    *(f"{d}/" for d in re.findall(r"python -m venv (\w[\w.-]*)", README)),
}


@pytest.mark.parametrize("written", sorted(WRITTEN))
def test_what_the_examples_write_is_ignored_by_git(written: str) -> None:
    if not (ROOT / ".git").exists():
        pytest.fail("run from a git checkout: the ignore rules are what is tested")
    result = subprocess.run(
        [
            "git",
            "check-ignore",
            "-q",
            written.rstrip("/") + "/x" if written.endswith("/") else written,
        ],
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, f"{written} would show as untracked"

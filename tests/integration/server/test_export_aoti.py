"""An AOTInductor package (``aoti_compile_and_package``'s ``model.pt2``) compiled from the
``torch.export`` ``tiny``, served by the real server over every API with the TorchScript
``tiny``'s answers, told apart from a program by what is inside the file, and paged under a cap
beside the program it came from (a package pages in from its file).

It needs a C++ compiler to make the package: where none is found, it is skipped and says so.
This is not a core path (the package is an optimisation of a program, served without it).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from sharedserve.server.version.backends.torch_export import is_aoti_package
from tests.support.aoti_models import COMPILER, compile_package
from tests.support.servers import Server
from tests.support.tiny_apis import APIS, TOLERANCE, assert_answers_as, rest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.tensorflow,
    pytest.mark.torch,
    pytest.mark.timeout(600),  # the compile: a minute or two on a busy host
    pytest.mark.skipif(
        COMPILER is None,
        reason="no C++ compiler ($CXX, g++ or clang++) found: AOTInductor needs one to compile "
        "a package; torch.export programs are served and tested without one",
    ),
]


@pytest.fixture(scope="module")
def packaged(
    export_models_dir: Path,
    without_tf_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("aoti") / "models"
    compile_package(export_models_dir / "tiny" / "1", root / "tiny" / "1", without_tf_env)
    shutil.copytree(export_models_dir / "tiny", root / "program")
    # The package's footprint is its file (1.5 MiB: code and weights), the program's its tensors.
    for name, mib in (("tiny", 2), ("program", 1)):
        (root / name / "sharedserve.yaml").write_text(f"gpu_memory_mib: {mib}\n")
    # Room for one of the two: each request to the other pages one out and the other in.
    args = ["--model-repository", str(root), "--gpu-memory-mib", "2", "--paging", "lru"]
    server = Server(None, root.parent / "serve.log", args, env=without_tf_env)
    try:
        server.wait_available("tiny")
        server.wait_available("program")
        yield server
    finally:
        assert server.stop() == 0, server.log()


@pytest.mark.parametrize("api", APIS, ids=lambda f: f.__name__)
def test_every_api_answers_as_the_torchscript_model_it_came_from(
    api: Callable[[Server], np.ndarray], packaged: Server, torch_server: Server
) -> None:
    assert_answers_as(api(packaged), api(torch_server))


def test_a_package_is_told_apart_from_a_program_and_pages_from_its_file(
    packaged: Server, export_models_dir: Path
) -> None:
    assert not is_aoti_package(export_models_dir / "tiny" / "1" / "model.pt2")
    first = {name: rest(packaged, name) for name in ("tiny", "program")}
    np.testing.assert_allclose(first["tiny"], first["program"], **TOLERANCE)
    for _ in range(2):
        for name in ("tiny", "program"):
            np.testing.assert_allclose(rest(packaged, name), first[name], rtol=1e-6)
    models = packaged.client.get("/sharedserve/v1/limits").json()["models"]
    package, program = models["tiny"]["versions"]["1"], models["program"]["versions"]["1"]
    assert (package["page_in_from"], program["page_in_from"]) == ("file", "host_memory")
    assert sorted([package["state"], program["state"]]) == ["paged_out", "resident"]
    assert packaged.client.get("/v2/models/tiny").json()["platform"] == "pytorch_export"

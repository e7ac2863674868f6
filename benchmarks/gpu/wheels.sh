#!/usr/bin/env bash
# Download, here, the wheels the GPU machine lacks, so the kit runs there with no registry.
#
#   benchmarks/gpu/wheels.sh [DIR]        DIR defaults to .whl at the repository root
#
# The GPU machine has Python 3.12 (x86-64, manylinux) with torch, numpy and nvidia-ml-py; it
# reaches no package registry. This resolves sharedserve's runtime dependencies
# (pyproject.toml's [project].dependencies) for that interpreter and platform, leaves out what the
# machine's image already has (below; and whatever only those need), downloads one wheel per
# package into DIR, refuses a total over 40 MiB, and prints the install line to put in front of a
# command there. sharedserve itself does not travel as a wheel: run.sh puts the repository on
# PYTHONPATH.
#
# GPU_EXTRA_WHEELS adds requirements beside sharedserve's own, with what they need: for the
# ONNX parts of the kit, "onnx onnxruntime-gpu" (the onnxcap stage needs the CUDA provider;
# onnxruntime's CPU build serves multimodel's ONNX rows, on the CPU). onnxruntime-gpu alone is
# some 300 MiB: GPU_WHEELS_LIMIT_MIB raises the limit for a machine that can take it.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:-$root/.whl}
python=${PYTHON:-python3}
limit_mib=${GPU_WHEELS_LIMIT_MIB:-40}
extra=${GPU_EXTRA_WHEELS:-}
# In the GPU machine's image already. torch alone is gigabytes; matplotlib (the bench's plots)
# would bring ~24 MiB with pillow and fonttools, putting the total at ~47 MiB. Everything else
# travels, whether the image has it or not: its versions there are unknown, and the generated
# gRPC code refuses an older grpcio or protobuf at import.
present='torch numpy nvidia-ml-py matplotlib'

platforms=()
for n in 39 35 34 31 28 27 24 17; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
py=${GPU_PYTHON_VERSION:-3.12}  # the GPU machine's; another only to rehearse elsewhere
target=(--only-binary=:all: --python-version "$py" --implementation cp --abi "cp${py/./}" --abi abi3
    --abi none "${platforms[@]}")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The runtime requirements, less what is already there.
"$python" - "$root/pyproject.toml" "$present" "$extra" >"$work/requirements.txt" <<'EOF'
import re, sys, tomllib
present = set(sys.argv[2].split())
wanted = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"] + sys.argv[3].split()
for requirement in wanted:
    name = re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0]
    if name.lower() not in present:
        print(requirement)
EOF

# Resolve for the GPU machine's interpreter without installing anything.
"$python" -m pip install --quiet --dry-run --ignore-installed --target "$work/none" \
    --report "$work/report.json" "${target[@]}" -r "$work/requirements.txt"
"$python" - "$work/report.json" "$present" >"$work/pins.txt" <<'EOF'
import json, sys
present = set(sys.argv[2].split())
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    if meta["name"].lower().replace("_", "-") not in present:
        print(f"{meta['name']}=={meta['version']}")
EOF

rm -rf "$dest"
mkdir -p "$dest"
"$python" -m pip download --quiet --no-deps --dest "$dest" "${target[@]}" -r "$work/pins.txt"

count=$(find "$dest" -name '*.whl' | wc -l)
bytes=$(du -cb "$dest"/*.whl | tail -1 | cut -f1)
mib=$(( (bytes + (1 << 20) - 1) >> 20 ))
echo "$count wheels, $mib MiB, in $dest" >&2
if (( mib > limit_mib )); then
    echo "error: $mib MiB is over the $limit_mib MiB a GPU run may carry" \
        "(GPU_WHEELS_LIMIT_MIB); the largest:" >&2
    du -b "$dest"/*.whl | sort -n | tail -5 >&2
    exit 1
fi
rel=$(realpath --relative-to="$root" "$dest")
echo "Carry '$rel' and start the command on the GPU machine with:" >&2
echo "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade" \
    "--target /tmp/site $rel/*.whl && export PYTHONPATH=/tmp/site || exit;"

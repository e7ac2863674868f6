#!/usr/bin/env bash
# The GPU proof kit's runner: every stage under stages/, each writing NAME.md and NAME.json.
#
#   benchmarks/gpu/run.sh [--dry-run] [--force] STAGES OUTDIR
#   benchmarks/gpu/run.sh --plan [STAGES]
#   benchmarks/gpu/run.sh --list
#
# STAGES is `all` or a comma list (caps,context). A stage is any stages/NAME.py; its header says
# `# order: N` (where `all` runs it) and `# minutes: N` (its length on one H100/H200, estimated
# until a GPU run times it). Dropping in a script adds a stage. See README.md beside this file.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
budget=${KIT_BUDGET_S:-570}   # one command on the lent GPU machine may run 600 s
max_per_call=3                # a run there hands back 8 files: 2 per stage and the logs

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }

header() { sed -n "s/^# $2: *\([0-9][0-9]*\).*/\1/p" "$here/stages/$1.py" | head -1; }

stages_in_order() {
    local file name
    for file in "$here"/stages/*.py; do
        name=$(basename "$file" .py)
        echo "$(header "$name" order) $name"
    done | sort -n | cut -d' ' -f2
}

dry=() force=0 plan=0
while [[ $# -gt 0 && $1 == --* ]]; do
    case $1 in
        --dry-run) dry=(--dry-run) ;;
        --force) force=1 ;;
        --plan) plan=1 ;;
        --list) for s in $(stages_in_order); do echo "$s ($(header "$s" minutes) min)"; done
                exit 0 ;;
        --help) usage; exit 0 ;;
        *) echo "run.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

select_stages() {
    local all known wanted s
    all=$(stages_in_order)
    if [[ ${1:-all} == all ]]; then echo "$all"; return; fi
    IFS=, read -ra wanted <<<"$1"
    for s in "${wanted[@]}"; do
        known=0
        for k in $all; do [[ $k == "$s" ]] && known=1; done
        if (( ! known )); then
            echo "run.sh: no stage '$s'; stages: $(echo $all | tr ' ' ,)" >&2
            return 2
        fi
        echo "$s"
    done
}

if (( plan )); then
    # Fewest commands: stages in order, packed while their minutes fit the budget and each
    # call's returned files stay within the eight a GPU run hands back.
    group=() minutes=0
    selected=$(select_stages "${1:-all}") || exit 2
    for s in $selected; do
        m=$(header "$s" minutes)
        if (( ${#group[@]} && (minutes + m > budget / 60 || ${#group[@]} == max_per_call) )); then
            echo "bash benchmarks/gpu/run.sh $(IFS=,; echo "${group[*]}") \"\$OUT\"   # ~${minutes} min"
            group=() minutes=0
        fi
        group+=("$s") minutes=$((minutes + m))
    done
    (( ${#group[@]} )) && echo "bash benchmarks/gpu/run.sh $(IFS=,; echo "${group[*]}") \"\$OUT\"   # ~${minutes} min"
    exit 0
fi

if [[ $# -ne 2 ]]; then usage >&2; exit 2; fi
selected=$(select_stages "$1") || exit 2
out=$2
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)

# The checkout is the package (no install on the GPU machine); carried wheels, if installed
# with the line wheels.sh prints, are already on PYTHONPATH.
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x $root/.venv/bin/python ]]; then PYTHON=$root/.venv/bin/python; else PYTHON=python3; fi
fi
if [[ -z ${KIT_WORK:-} ]]; then
    # Scratch of our own (models, replica logs): what is worth keeping is archived into
    # OUTDIR/logs.tar.gz below, so the folder goes when the run ends, however it ends.
    KIT_WORK=$(mktemp -d "${TMPDIR:-/tmp}/sharedserve-gpu-kit-XXXXXX") || exit 2
    trap 'rm -rf "$KIT_WORK"' EXIT
fi
export KIT_WORK
export PYTHONUNBUFFERED=1
cd "$root" || exit 2

start=$SECONDS ran=() failed=() left=()
for s in $selected; do
    if [[ -f $out/$s.json && $force == 0 ]] && ! grep -q '"partial": true' "$out/$s.json"; then
        echo "== $s: done already ($out/$s.json); --force runs it again"
        continue
    fi
    m=$(header "$s" minutes)
    if (( ${#ran[@]} && ! ${#dry[@]} && SECONDS - start + m * 60 > budget )); then
        left+=("$s")
        continue
    fi
    echo "== $s (about $m min on a GPU)"
    export KIT_COMMAND="benchmarks/gpu/run.sh ${dry[*]:+${dry[*]} }$s OUTDIR"
    ran+=("$s")
    if ! "$PYTHON" "$here/stages/$s.py" "$out" --work "$KIT_WORK/$s" "${dry[@]}"; then
        failed+=("$s")
    elif grep -q '"status": "fail"' "$out/$s.json"; then
        failed+=("$s")
    fi
done

logged=()
for s in "${ran[@]}"; do [[ -d $KIT_WORK/$s ]] && logged+=("$s"); done
if (( ${#logged[@]} )); then
    # The stages' logs (replica logs, bench reports), without the model files; one file so a
    # GPU run's eight returned files are not spent on them.
    tar -czf "$out/logs.tar.gz" -C "$KIT_WORK" --exclude='*.pt' --exclude='models' \
        "${logged[@]}" || echo "run.sh: could not archive the logs in $KIT_WORK" >&2
fi
echo "== ran: ${ran[*]:-none}; failed: ${failed[*]:-none}; results in $out"
if (( ${#left[@]} )); then
    echo "== not started, out of this command's ${budget} s: ${left[*]}; run the same command" \
        "again with the same OUTDIR to go on"
    exit 3
fi
(( ${#failed[@]} == 0 ))

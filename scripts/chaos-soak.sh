#!/usr/bin/env bash
# Runs every chaos scenario across many seeds and appends a results table to docs/chaos-results.md.
#
#   scripts/chaos-soak.sh [--seeds N] [--first-seed S] [--duration SECONDS] [--scenarios "a b c"]
#                         [--out DIR] [--no-append] [--note TEXT]
#
# Defaults: 3 seeds from 1, 60 s per run, every scenario of `raftka chaos run --list` (the unsafe
# one included: it must come out INVALID), runs under chaos-soak/<timestamp>/<scenario>-<seed>.
# Each run prints its seed; repeat one with: raftka chaos run --scenario NAME --seed N.
# Exit status: 0 when every run came out as expected, 1 otherwise.
set -euo pipefail
source "$(dirname "$0")/_env.sh"
ensure_venv

seeds=3; first=1; duration=60; scenarios=""; out=""; append=1; note=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) seeds="$2"; shift 2 ;;
        --first-seed) first="$2"; shift 2 ;;
        --duration) duration="$2"; shift 2 ;;
        --scenarios) scenarios="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --no-append) append=0; shift ;;
        --note) note="$2"; shift 2 ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
cd "$RAFTKA_ROOT"
[ -n "$scenarios" ] || scenarios=$("$VENV_PY" -m raftka chaos run --list | awk '{print $1}' | tr '\n' ' ')
[ -n "$out" ] || out="chaos-soak/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"

unexpected=0
for scenario in $scenarios; do
    for ((seed = first; seed < first + seeds; seed++)); do
        dir="$out/$scenario-$seed"
        echo "==> $scenario seed $seed ($duration s) -> $dir"
        set +e
        "$VENV_PY" -m raftka chaos run --scenario "$scenario" --seed "$seed" --duration "$duration" \
            --out "$dir" > "$dir.log" 2>&1
        rc=$?
        set -e
        verdict=$(grep -m1 '^verdict:' "$dir.log" || echo "verdict: (no verdict, see $dir.log)")
        echo "    $verdict (exit $rc)"
        if grep -q '^UNEXPECTED' "$dir.log" || ! grep -q '^verdict:' "$dir.log"; then
            unexpected=$((unexpected + 1))
            echo "    UNEXPECTED outcome: repeat with raftka chaos run --scenario $scenario --seed $seed"
        fi
    done
done

if [ "$append" = 1 ]; then
    "$VENV_PY" -m chaos.soak "$out" --append docs/chaos-results.md --note "$note"
else
    "$VENV_PY" -m chaos.soak "$out"
fi
echo "runs in $out; $unexpected unexpected"
[ "$unexpected" = 0 ]

#!/usr/bin/env bash
# The long wire fuzz (#hardening): a million seeded frames against a real broker, then the data
# produced before it must read back byte-identical. Prints the outcome counts every 10,000 inputs.
#
#   scripts/fuzz-soak.sh                                   # 1,000,000 inputs, seed 20261124
#   RAFTKA_FUZZ_INPUTS=200000 RAFTKA_FUZZ_SEED=7 scripts/fuzz-soak.sh
set -euo pipefail
exec bash "$(dirname "$0")/test.sh" -m soak tests/test_fuzz.py -s "$@"

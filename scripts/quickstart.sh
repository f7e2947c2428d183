#!/usr/bin/env bash
# The main demo: creates .venv if missing, installs Raftka into it, and runs the demo.
# Until the cluster exists it runs the storage demo: append, read back, and benchmark a log.
set -euo pipefail
source "$(dirname "$0")/_env.sh"
ensure_venv
check_java || true
cd "$RAFTKA_ROOT"
exec "$RAFTKA_ROOT/.venv/bin/raftka" perf storage --quick

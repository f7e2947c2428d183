#!/usr/bin/env bash
# Starts a local controller quorum (default 3 voters) and keeps it running until Ctrl-C.
# Usage: scripts/controller-quorum.sh [--voters 1|3|5] [--brokers N] [--dir DIR]  (`raftka quorum run`)
set -euo pipefail
source "$(dirname "$0")/_env.sh"
ensure_venv
cd "$RAFTKA_ROOT"
case " $* " in
    *" --dir "*) ;;
    *) set -- --dir "$(mktemp -d -t raftka-quorum-XXXXXX)" "$@" ;;
esac
exec "$VENV_PY" -m raftka quorum run "$@"

#!/usr/bin/env bash
# Runs the whole default test suite: creates .venv if missing, installs raftka[test], runs pytest.
# Extra arguments go to pytest, e.g. scripts/test.sh -k storage -x
# Long runs are behind markers: scripts/test.sh -m soak, scripts/test.sh -m perf.
set -euo pipefail
source "$(dirname "$0")/_env.sh"
ensure_venv test
ensure_kcat
if check_java; then export RAFTKA_HAVE_JAVA=1; fi
cd "$RAFTKA_ROOT"
case " $* " in
    *" -m "*) ;;
    *) set -- -m "not soak and not perf" "$@" ;;
esac
exec "$VENV_PY" -m pytest "$@"

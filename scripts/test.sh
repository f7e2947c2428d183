#!/usr/bin/env bash
# Runs the whole default test suite: creates .venv if missing, installs raftka[test], runs pytest.
# Extra arguments go to pytest, e.g. scripts/test.sh -k storage -x
# Long runs are behind markers: scripts/test.sh -m soak, scripts/test.sh -m perf.
# Runs two pytest workers by default (RAFTKA_TEST_WORKERS; see below).
set -euo pipefail
source "$(dirname "$0")/_env.sh"
ensure_venv test
ensure_kcat
if check_java; then export RAFTKA_HAVE_JAVA=1; fi
cd "$RAFTKA_ROOT"
default_suite=0
case " $* " in
    *" -m "*) ;;
    *) set -- -m "not soak and not perf" "$@"; default_suite=1 ;;
esac
# Two workers (pytest-xdist), one test file each at a time (--dist loadfile keeps a module's
# cluster fixture in one worker): most integration tests wait on processes, timeouts and the
# network, so two files at once take ~2/3 of the wall time on the 2-core box.
# RAFTKA_TEST_WORKERS=1 runs in one process (or pass -n yourself). Soak and perf runs (-m) run
# alone: they measure or load the machine on purpose.
workers="${RAFTKA_TEST_WORKERS:-2}"
case " $* " in
    *" -n "*|*" -n="*) ;;
    *) if [ "$default_suite" = 1 ] && [ "$workers" -gt 1 ]; then set -- -n "$workers" --dist loadfile "$@"; fi ;;
esac
exec "$VENV_PY" -m pytest "$@"

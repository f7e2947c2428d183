#!/usr/bin/env bash
# The peer benchmark (issue #performance): Raftka (3 controllers + 3 brokers, RF 3, min ISR 2)
# against NATS JetStream (3-node cluster, R1 and R3) and Redis Streams, on 127.0.0.1 only.
# Installs what it needs (Debian's nats-server and redis-server; the project's `bench` extra),
# runs each figure several times and rewrites the generated section of BENCHMARKS.md. Raftka's
# acks=all and e2e figures are also taken on a second cluster holding --many-partitions N
# partitions (default 1000; 0 skips), beside the fresh cluster's, with their ratio.
# --security-protocol SASL_SSL measures Raftka on a secure cluster (TLS, SCRAM-SHA-512, ACLs);
# --security-protocol both takes each Raftka figure on a PLAINTEXT and then on a SASL_SSL cluster,
# alternated, and rewrites only BENCHMARKS.md's security section (not the peer section).
#
#   scripts/bench.sh                 # the full run (about 10 minutes on the 2-core box)
#   scripts/bench.sh --runs 1 --records 50000 --failover-kills 2   # a quick look
#   scripts/bench.sh --many-partitions 5000 ...                    # the many-partitions cluster's size
#   scripts/bench.sh --security-protocol both --skip nats,redis --failover-kills 0 --many-partitions 0
#                                    # what security costs: PLAINTEXT and SASL_SSL side by side
#   BENCH_OUT=/tmp/b.md scripts/bench.sh ...                       # write elsewhere
#
# Every process it starts is stopped by PID when it ends, also on failure or Ctrl-C; the whole
# run is bounded by --time-limit-s (default 2400 s) and every measurement by its own timeout.
set -euo pipefail
source "$(dirname "$0")/_env.sh"

install_peer() {  # install_peer BINARY PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    command -v apt-get >/dev/null 2>&1 || die "$1 is missing and apt-get is not available; install $2."
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "==> installing $2 (apt-get)"
    if [ -z "${BENCH_APT_UPDATED:-}" ]; then
        $sudo apt-get update -qq || true
        BENCH_APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$2" >/dev/null ||
        die "apt-get install $2 failed"
    # Debian starts packaged daemons on install; the benchmark starts its own on free ports.
    if command -v systemctl >/dev/null 2>&1; then $sudo systemctl stop "$2" >/dev/null 2>&1 || true; fi
}

skipped() {  # skipped NAME ARGS...: is NAME in the driver's --skip list (--skip a,b or --skip=a,b)?
    local name=$1 list=""
    shift
    while [ $# -gt 0 ]; do
        case "$1" in
            --skip) list="${2:-}"; shift ;;
            --skip=*) list="${1#--skip=}" ;;
        esac
        shift
    done
    list="${list// /}"
    [[ ",$list," == *",$name,"* ]]
}

ensure_venv bench
skipped nats "$@" || install_peer nats-server nats-server
skipped redis "$@" || install_peer redis-server redis-server
cd "$RAFTKA_ROOT"

PIDFILE=$(mktemp "${TMPDIR:-/tmp}/raftka-bench-pids.XXXXXX")
DRIVER=""
cleanup() {
    local status=$?
    if [ -n "$DRIVER" ] && kill -0 "$DRIVER" 2>/dev/null; then
        kill -TERM "$DRIVER" 2>/dev/null || true   # the driver stops its processes on SIGTERM
        for _ in $(seq 1 60); do kill -0 "$DRIVER" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$DRIVER" 2>/dev/null || true
    fi
    # Anything the driver started and could not stop (it was killed itself): by PID, and only
    # if that PID still runs one of the programs we start.
    while read -r pid; do
        [ -n "$pid" ] || continue
        if cmd=$( { tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null) &&
           [[ "$cmd" == *raftka* || "$cmd" == *nats-server* || "$cmd" == *redis-server* ]]; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done < "$PIDFILE"
    rm -f "$PIDFILE"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$VENV_PY" -m raftka.bench --out "${BENCH_OUT:-$RAFTKA_ROOT/BENCHMARKS.md}" --pidfile "$PIDFILE" \
    --command-line "scripts/bench.sh${*:+ $*}" "$@" &
DRIVER=$!
wait "$DRIVER"

#!/usr/bin/env bash
# The Raftka quickstart: from a fresh clone to a running cluster, a stream of events, and back.
#
#   scripts/quickstart.sh [--keep] [--no-spark] [--dir DIR] [--events N] [--matches M] [--base-port P]
#                         [--spark-seconds S]
#
# 1. creates .venv and installs Raftka into it (the first time only);
# 2. starts 3 controllers + 3 brokers in the background (raftka cluster up; DIR, default .raftka);
# 3. creates the topic worldcup-events: 6 partitions, replication factor 3, min.insync.replicas 2;
# 4. produces N (100,000) World Cup match events keyed by match id, acks=all, and consumes them
#    with 3 consumers, checking that every match's events arrive in order (examples/worldcup_demo.py);
# 5. with Java 17+ (and without --no-spark), runs the Spark demo on the committed events: a
#    streaming aggregation of goals and cards per match and team, with S (10) seconds of live
#    feed (raftka spark demo --seconds S);
# 6. prints a summary and stops the cluster (--keep leaves it running for the console tools:
#    raftka topics describe worldcup-events, raftka consume worldcup-events --from-beginning ...).
# A cluster that was already running in DIR is used and left running.
# Ports: free ones chosen at run time unless --base-port P (P, P+1, ... as in raftka cluster up).
set -euo pipefail
source "$(dirname "$0")/_env.sh"

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }

keep=0
spark=1
dir=.raftka
events=100000
matches=3000
base_port=0
spark_seconds=10
while [ $# -gt 0 ]; do
    case "$1" in
        --keep) keep=1; shift ;;
        --no-spark) spark=0; shift ;;
        --dir|--events|--matches|--base-port|--spark-seconds)
            [ $# -ge 2 ] || die "$1 needs a value (see --help)"
            case "$1" in
                --dir) dir="$2" ;; --events) events="$2" ;; --matches) matches="$2" ;; --base-port) base_port="$2" ;;
                --spark-seconds) spark_seconds="$2" ;;
            esac
            shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

began=$SECONDS
ensure_venv
have_java=0
if check_java; then have_java=1; fi
raftka="$VENV/bin/raftka"
topic=worldcup-events

step() { echo; echo "\$ raftka $*"; "$raftka" "$@"; }

was_running=0
if "$raftka" cluster status --dir "$dir" --json 2>/dev/null | grep -q '"alive": true'; then
    was_running=1
fi
stop_cluster() {
    local code=$?
    if [ "$keep" = 0 ] && [ "$was_running" = 0 ]; then
        step cluster down --dir "$dir" || true
    elif [ "$was_running" = 0 ]; then
        echo
        echo "The cluster keeps running (--keep). Try:"
        echo "  .venv/bin/raftka cluster status --dir $dir"
        echo "  .venv/bin/raftka topics describe $topic --dir $dir"
        echo "  .venv/bin/raftka consume $topic --dir $dir --from-beginning --max-messages 5 --print-key"
        echo "Stop it with: .venv/bin/raftka cluster down --dir $dir"
    fi
    exit $code
}
trap stop_cluster EXIT

step cluster up --dir "$dir" --controllers 3 --brokers 3 --base-port "$base_port"
step topics create "$topic" --dir "$dir" --partitions 6 --replication-factor 3 \
    --config min.insync.replicas=2 --if-not-exists
step topics describe "$topic" --dir "$dir"
echo
echo "\$ python examples/worldcup_demo.py --dir $dir --events $events --matches $matches"
"$VENV_PY" "$RAFTKA_ROOT/examples/worldcup_demo.py" --dir "$dir" --topic "$topic" --events "$events" \
    --matches "$matches" --consumers 3
if [ "$spark" = 1 ] && [ "$have_java" = 1 ]; then
    # Spark's JVM logs (WARN lines, and its own shutdown noise) go to a file; on failure its tail
    # is shown.
    spark_log="$dir/spark-demo.log"
    echo
    echo "\$ raftka spark demo --dir $dir --seconds $spark_seconds    (Spark's log: $spark_log)"
    if ! "$raftka" spark demo --dir "$dir" --seconds "$spark_seconds" 2> "$spark_log"; then
        tail -n 30 "$spark_log" >&2
        die "the Spark demo failed; its whole log is in $spark_log"
    fi
elif [ "$spark" = 1 ]; then
    echo
    echo "(Spark demo skipped: it needs Java 17+, see the warning above.)"
fi
echo
echo "quickstart done in $((SECONDS - began)) s"

#!/usr/bin/env bash
# Bootstrap a local Raftka cluster from scratch: a controller quorum plus brokers, as background
# processes that keep running after this script exits.
#
#   scripts/bootstrap-quorum.sh [--controllers 1|3|5] [--brokers N] [--dir DIR] [--base-port P]
#                               [--combined] [--config KEY=VALUE ...]
#   scripts/bootstrap-quorum.sh --stop [--dir DIR] [--delete]
#
# The first run generates a cluster id, formats each node's storage (DIR/<node>/data/
# meta.properties), writes one config per node (DIR/<node>/server.properties), starts the
# controllers, waits for an active controller, starts the brokers, waits until every broker is
# registered and unfenced, and prints the bootstrap servers and how to stop. Each node logs to
# DIR/<node>/server.log. Run again, it reuses what exists and starts only what is not running.
# --stop stops every node (brokers first); --delete also removes DIR's cluster data.
# Defaults: 3 controllers, 3 brokers, DIR=.raftka, base port 9092 (brokers 9092.., then each
# controller's Raft and RPC ports, then the brokers' HTTP ports, then the controllers' HTTP
# ports); --base-port 0 picks free ports.
# This is `raftka cluster up` / `raftka cluster down` (the raftka.cluster package) with the venv set up.
set -euo pipefail
source "$(dirname "$0")/_env.sh"

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }

dir=.raftka
stop=0
delete=0
up_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --controllers|--brokers|--base-port|--config|--timeout-ms)
            [ $# -ge 2 ] || die "$1 needs a value (see --help)"
            up_args+=("$1" "$2"); shift 2 ;;
        --combined|--quiet) up_args+=("$1"); shift ;;
        --dir)
            [ $# -ge 2 ] || die "--dir needs a value (see --help)"
            dir="$2"; shift 2 ;;
        --stop) stop=1; shift ;;
        --delete) delete=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ "$delete" = 0 ] || [ "$stop" = 1 ] || die "--delete goes with --stop"

ensure_venv
raftka="$VENV/bin/raftka"
if [ "$stop" = 1 ]; then
    down_args=(cluster down --dir "$dir")
    [ "$delete" = 0 ] || down_args+=(--delete)
    exec "$raftka" "${down_args[@]}"
fi
exec "$raftka" cluster up --dir "$dir" "${up_args[@]}" --stop-hint "scripts/bootstrap-quorum.sh --stop --dir $dir"

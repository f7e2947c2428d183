"""`raftka quorum status|run`: the controller quorum.

``status``, like kafka-metadata-quorum describe --status: asks one controller
(``--bootstrap-controller HOST:PORT``, its CONTROLLER RPC listener) for DescribeQuorum. Per-voter
log end offsets and lags are known by the active controller; when the bootstrap controller is
not the active one and knows its endpoint, the tool asks it too.

``run``: a local controller quorum (and, with ``--brokers``, brokers) in the foreground, for
trying Raftka out (scripts/controller-quorum.sh): prints its endpoints, keeps it running until
Ctrl-C or SIGTERM, then stops every process it started. Unlike `raftka cluster up`, nothing
outlives the command.
"""
from __future__ import annotations

import argparse
import json

from raftka.cli.commands._common import CommandError, one_line_errors


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("quorum", help="describe the controller quorum, or run a local one")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="quorum_command", metavar="ACTION")
    status = sub.add_parser("status", help="leader, term, commit index, each voter's and observer's lag")
    status.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT",
                        help="a controller's RPC listener (CONTROLLER://, not the Raft port)")
    status.add_argument("--json", action="store_true", help="print the raw answer as JSON")
    status.add_argument("--timeout-ms", type=int, default=5000)
    status.set_defaults(func=run_status)
    run = sub.add_parser("run", help="a local controller quorum in the foreground until Ctrl-C or SIGTERM")
    run.add_argument("--voters", type=int, default=3, choices=[1, 3, 5], help="quorum size (default 3)")
    run.add_argument("--brokers", type=int, default=0,
                     help="also start this many brokers (default 0: controllers only)")
    run.add_argument("--dir", required=True, metavar="DIR", help="directory for configs, logs and data")
    run.add_argument("--timeout-ms", type=int, default=60_000, help="give up waiting for readiness after this long")
    run.set_defaults(func=run_foreground)


def run_status(args: argparse.Namespace) -> int:
    from raftka.cluster.controller_client import describe_quorum
    timeout_s = args.timeout_ms / 1000
    status = describe_quorum(args.bootstrap_controller, timeout_s=timeout_s)
    if not status.get("active") and status.get("leader_endpoint"):
        try:  # the active controller knows every voter's log end offset
            status = describe_quorum(status["leader_endpoint"], timeout_s=timeout_s)
        except Exception:
            pass  # keep the bootstrap controller's view
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return 0
    leader = status["leader_id"]
    print(f"ClusterLeaderId:   {leader if leader >= 0 else 'none'}"
          + (f" ({status['leader_endpoint']})" if status.get("leader_endpoint") else ""))
    print(f"LeaderEpoch:       {status['term']}")
    print(f"HighWatermark:     {status['high_watermark']}")
    print(f"AnsweredBy:        controller {status['node_id']} ({status['role']})")
    print(f"HasQuorum:         {status['has_quorum']}")
    rows = [("NodeId", "Role", "RaftAddress", "Endpoint", "LogEndOffset", "Lag", "Connected")]
    for voter in status["voters"]:
        role = "Leader" if voter["node_id"] == leader else "Follower"
        rows.append((str(voter["node_id"]), role, voter["raft_address"], voter["endpoint"] or "-",
                     _opt(voter["log_end_offset"]), _opt(voter["lag"]),
                     "self" if voter["connected"] is None else str(voter["connected"]).lower()))
    for observer in status["observers"]:
        if observer.get("replica_id") is not None:  # a broker following the log by Fetch
            rows.append((str(observer["replica_id"]), "Observer", "-", "-", _opt(observer["log_end_offset"]),
                         _opt(observer["lag"]), "fetching"))
        else:  # a pysyncobj read-only node
            rows.append(("-", "Observer", observer["raft_address"], "-", "-", "-", "true"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def _opt(value: object) -> str:
    return "-" if value is None else str(value)


@one_line_errors
def run_foreground(args: argparse.Namespace) -> int:
    import signal
    import threading
    from raftka.cluster import Cluster, ControllerCluster
    if args.brokers < 0:
        raise CommandError("--brokers must be 0 or more")
    timeout_s = args.timeout_ms / 1000
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.brokers > 0:
        started: ControllerCluster = Cluster.start(
            args.dir, controllers=args.voters, brokers=args.brokers, timeout_s=timeout_s,
            configs={"default.replication.factor": min(3, args.brokers),
                     "min.insync.replicas": min(2, args.brokers)})
    else:
        started = ControllerCluster.start(args.dir, voters=args.voters, timeout_s=timeout_s)
    with started as cluster:  # closing stops every process it started
        if isinstance(cluster, Cluster):
            print(f"brokers ready: bootstrap servers {cluster.bootstrap_servers}", flush=True)
        leader = cluster.wait_for_leader(timeout_s=timeout_s)
        print(f"controller quorum ready: voters {cluster.voters_string}", flush=True)
        print(f"bootstrap controllers (RPC): {cluster.bootstrap_controllers}", flush=True)
        print(f"active controller: {leader}; logs in {args.dir}/controller-N/server.log", flush=True)
        print(f"try: raftka quorum status --bootstrap-controller {cluster.bootstrap_controllers.split(',')[0]}",
              flush=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    return 0

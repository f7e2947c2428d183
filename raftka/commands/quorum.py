"""`raftka quorum status`: the controller quorum, like kafka-metadata-quorum describe --status.

Asks one controller (``--bootstrap-controller HOST:PORT``, its CONTROLLER RPC listener) for
DescribeQuorum. Per-voter log end offsets and lags are known by the active controller; when the
bootstrap controller is not the active one and knows its endpoint, the tool asks it too.
"""
from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("quorum", help="describe the controller quorum")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="quorum_command", metavar="ACTION")
    status = sub.add_parser("status", help="leader, term, commit index, each voter's and observer's lag")
    status.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT",
                        help="a controller's RPC listener (CONTROLLER://, not the Raft port)")
    status.add_argument("--json", action="store_true", help="print the raw answer as JSON")
    status.add_argument("--timeout-ms", type=int, default=5000)
    status.set_defaults(func=run_status)


def run_status(args: argparse.Namespace) -> int:
    from raftka.controller_client import describe_quorum
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

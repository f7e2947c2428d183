"""`raftka cluster up|down|status|kill|pause|resume|restart`: a local cluster kept in a directory.

Every action is one short-lived command: `up` starts detached processes (own session, output in
`DIR/<node>/server.log`) and records them in `DIR/cluster.json`; the others attach to them by
PID. The work is done by the cluster API (raftka.cluster: ``Cluster.up``, ``Cluster.open``),
the same code tests and the chaos harness use.
"""
from __future__ import annotations

import argparse
import json
import time

from raftka.cli.commands._common import (CommandError, add_dir_arg, cluster_dir, one_line_errors,
                                         parse_key_values, print_table, say)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cluster", help="start, stop and inspect a local cluster (default dir ./.raftka)",
                                   description="A local Raftka cluster kept in a directory (default ./.raftka).")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="cluster_command", metavar="ACTION")

    up = sub.add_parser("up", help="create (first time) or start the cluster and wait until it is ready")
    add_dir_arg(up)
    up.add_argument("--controllers", type=int, choices=[1, 3, 5], default=None,
                    help="controller quorum size for a new cluster (default 3)")
    up.add_argument("--brokers", type=int, default=None, help="brokers for a new cluster (default 3)")
    up.add_argument("--combined", action="store_true",
                    help="controllers are brokers too (process.roles=broker,controller)")
    up.add_argument("--base-port", type=int, default=None, metavar="PORT",
                    help="first port of a new cluster (default 9092: brokers 9092.., then controllers, "
                         "then HTTP); 0 picks free ports")
    up.add_argument("--config", action="append", metavar="KEY=VALUE",
                    help="server config for nodes started now (repeatable), e.g. num.partitions=3")
    up.add_argument("--add-scram", action="append", default=[], metavar="MECHANISM=[name=U,password=P]",
                    help="a SCRAM user the new cluster starts with (repeatable), in Kafka's kafka-storage "
                         "syntax: SCRAM-SHA-256=[name=admin,password=admin-secret], optionally iterations=N, "
                         "salt=S, or password-file=PATH instead of password (the shell history keeps a "
                         "password given here)")
    up.add_argument("--secure", action="store_true",
                    help="a new cluster with SASL_SSL (SCRAM) on every listener, a private CA, ACLs, and an admin "
                         "super user whose login DIR/client.properties (mode 600) holds for every raftka command")
    up.add_argument("--timeout-ms", type=int, default=60_000, help="give up waiting after this long")
    up.add_argument("--quiet", action="store_true", help="no progress lines")
    up.add_argument("--stop-hint", default=None, help=argparse.SUPPRESS)  # scripts name their own stop command
    up.set_defaults(func=run_up)

    down = sub.add_parser("down", help="stop every node (brokers first); safe to repeat")
    add_dir_arg(down)
    down.add_argument("--delete", action="store_true", help="also delete the cluster's data, logs and state")
    down.add_argument("--timeout-ms", type=int, default=10_000,
                      help="SIGKILL a node that has not exited this long after SIGTERM")
    down.set_defaults(func=run_down)

    status = sub.add_parser("status", help="every node: id, role, pid, ports, alive, leader or fenced")
    add_dir_arg(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=run_status)

    for action, help_text in (("kill", "kill -9 a node"), ("pause", "SIGSTOP a node (it stops answering)"),
                              ("resume", "SIGCONT a paused node"),
                              ("restart", "stop a node (if running) and start it again")):
        node = sub.add_parser(action, help=help_text)
        add_dir_arg(node)
        node.add_argument("node", metavar="NODE", help="node id (4), name (broker-4), or 'leader' "
                                                       "(the active controller)")
        if action == "restart":
            node.add_argument("--timeout-ms", type=int, default=60_000, help="give up waiting after this long")
        node.set_defaults(func=run_node_action, action=action)


def _hint(args: argparse.Namespace, root: str) -> str:
    return args.stop_hint or f"raftka cluster down --dir {root}"


@one_line_errors
def run_up(args: argparse.Namespace) -> int:
    from raftka.cluster import DEFAULT_BASE_PORT, Cluster
    if args.brokers is not None and args.brokers < 0:
        raise CommandError("--brokers must be 0 or more")
    base_port = DEFAULT_BASE_PORT if args.base_port is None else (args.base_port or None)
    began = time.monotonic()
    cluster, created = Cluster.up(cluster_dir(args), args.controllers, args.brokers, combined=args.combined,
                                  base_port=base_port, configs=parse_key_values(args.config, "--config"),
                                  timeout_s=args.timeout_ms / 1000, progress=None if args.quiet else say,
                                  add_scram=args.add_scram, secure=args.secure)
    took = time.monotonic() - began
    if not created and args.base_port is not None:
        say("note: --base-port applies to a new cluster; this one keeps its ports")
    print(f"cluster {cluster.cluster_id} ready in {took:.1f} s: {cluster.shape()} in {cluster.root}"
          + ("" if created else " (already existed)"))
    print(f"bootstrap servers: {cluster.bootstrap_servers}")
    print(f"bootstrap controllers: {cluster.bootstrap_controllers}")
    print(f"stop it with: {_hint(args, cluster_dir(args))}")
    kit = cluster.security
    if kit is not None:
        print(f"security: SASL_SSL (SCRAM-SHA-256/512) on every listener, ACLs on; CA certificate {kit.ca_path}")
        print(f"admin super user's login: {kit.client_properties_path} (mode 600; raftka commands with "
              f"--dir {cluster_dir(args)} read it, Kafka's tools take it as --command-config)")
        if args.secure and not created:
            say("note: this cluster already existed; it keeps its CA and users")
        return 0
    # Kafka's quickstart is the same: plain TCP, no login, no ACLs (docs/security.md).
    say(f"note: PLAINTEXT listeners ({cluster.bootstrap_servers}) without authentication: anyone who can "
        "reach them can read and write every topic (docs/security.md)")
    return 0


@one_line_errors
def run_down(args: argparse.Namespace) -> int:
    from raftka.cluster import Cluster, NoClusterError
    try:
        cluster = Cluster.open(cluster_dir(args))
    except NoClusterError:
        print(f"no cluster in {cluster_dir(args)}: nothing to stop")
        return 0
    stopped = cluster.down(args.timeout_ms / 1000, delete=args.delete)
    names = ", ".join(cluster.nodes[n].name for n in stopped) or "nothing was running"
    print(f"stopped: {names}" + (f"; deleted {cluster.root}" if args.delete else ""))
    return 0


@one_line_errors
def run_status(args: argparse.Namespace) -> int:
    from raftka.cluster import Cluster
    cluster = Cluster.open(cluster_dir(args))
    rows = cluster.status()
    if args.json:
        print(json.dumps({"cluster_id": cluster.cluster_id, "dir": str(cluster.root),
                          "bootstrap_servers": cluster.bootstrap_servers,
                          "bootstrap_controllers": cluster.bootstrap_controllers, "nodes": rows},
                         indent=2, sort_keys=True))
        return 0
    running = sum(1 for r in rows if r["alive"])
    print(f"cluster {cluster.cluster_id} in {cluster.root}: {cluster.shape()}, {running} of {len(rows)} running")
    table = [["NODE", "NAME", "ROLE", "PID", "ALIVE", "STATE", "PORTS"]]
    for row in rows:
        ports = " ".join(f"{label}={row[key]}" for key, label in (
            ("plaintext_port", cluster.client_listener.lower()), ("controller_port", "controller"), ("raft_port", "raft"),
            ("http_port", "http")) if row[key] is not None)
        table.append([row["node_id"], row["name"], ",".join(row["roles"]), row["pid"] or "-",
                      "yes" if row["alive"] else "no", _state(row), ports])
    print_table(table)
    print(f"bootstrap servers: {cluster.bootstrap_servers}")
    return 0


def _state(row: dict) -> str:
    if not row["alive"]:
        return "stopped"
    if row["paused"]:
        return "paused"
    parts = []
    if "quorum_role" in row:
        parts.append(row["quorum_role"] or "unknown")
    if "fenced" in row:
        parts.append({True: "fenced", False: "unfenced", None: "unknown"}[row["fenced"]])
    return ",".join(parts)


@one_line_errors
def run_node_action(args: argparse.Namespace) -> int:
    from raftka.cluster import Cluster, state_lock
    cluster = Cluster.open(cluster_dir(args))
    node_id = cluster.find_node(args.node)
    spec = cluster.nodes[node_id]
    if args.action == "restart":
        began = time.monotonic()
        with state_lock(cluster.root):
            process = cluster.restart(node_id, timeout_s=args.timeout_ms / 1000, progress=say)
        print(f"restarted {spec.name} (pid {process.pid}) in {time.monotonic() - began:.1f} s")
        return 0
    if not cluster.alive(node_id):
        raise CommandError(f"{spec.name} is not running")
    pid = cluster.process(node_id).pid
    if args.action == "kill":
        cluster.kill(node_id)
        print(f"killed {spec.name} (pid {pid}, SIGKILL)")
    elif args.action == "pause":
        cluster.pause(node_id)
        print(f"paused {spec.name} (pid {pid}, SIGSTOP); resume it with: raftka cluster resume "
              f"--dir {cluster_dir(args)} {node_id}")
    else:
        cluster.resume(node_id)
        print(f"resumed {spec.name} (pid {pid}, SIGCONT)")
    return 0


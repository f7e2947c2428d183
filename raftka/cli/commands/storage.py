"""`raftka storage format|random-uuid`: Kafka's ``kafka-storage``, for nodes run by hand.

``format --config server.properties --cluster-id ID`` writes ``meta.properties`` (cluster.id,
node.id) into each of the node's log dirs and, for a controller with ``--add-scram``, the
bootstrap file (common/meta_properties.py) into its first: the SCRAM users the first active
controller commits to an empty metadata log. ``raftka cluster up`` does the same for the nodes
it makes.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from raftka.cli.commands._common import CommandError, one_line_errors


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("storage", help="format a node's log dirs (Kafka's kafka-storage)",
                                   description="Format a node's log dirs before its first start, as kafka-storage does.")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="storage_command", metavar="ACTION")

    fmt = sub.add_parser("format", help="write meta.properties (and a controller's bootstrap file) into the log dirs")
    fmt.add_argument("--config", required=True, help="the node's server.properties")
    fmt.add_argument("--cluster-id", required=True, help="the cluster's id (`raftka storage random-uuid` makes one)")
    fmt.add_argument("--add-scram", action="append", default=[], metavar="MECHANISM=[name=U,password=P]",
                     help="a SCRAM user the cluster starts with (repeatable; controllers only), e.g. "
                          "SCRAM-SHA-256=[name=admin,password=admin-secret], optionally iterations=N, salt=S, "
                          "or password-file=PATH instead of password (the shell history keeps a password given here)")
    fmt.add_argument("--ignore-formatted", action="store_true",
                     help="leave log dirs formatted for this cluster and node alone instead of failing")
    fmt.set_defaults(func=run_format)

    uuid = sub.add_parser("random-uuid", help="print a new cluster id")
    uuid.set_defaults(func=run_random_uuid)


@one_line_errors
def run_format(args: argparse.Namespace) -> int:
    from raftka.cluster.clusters import parse_scram_users
    from raftka.cluster.state import META_PROPERTIES, read_properties, write_atomic
    from raftka.common.meta_properties import BOOTSTRAP_FILE, write_bootstrap
    from raftka.common.server_config import load_server_config
    config = load_server_config(args.config)
    if not args.cluster_id.strip() or any(c.isspace() or c == "=" for c in args.cluster_id):
        raise CommandError("--cluster-id must be one word (no spaces or '=')")
    users = parse_scram_users(args.add_scram)
    if users and not config.is_controller:
        raise CommandError("--add-scram is for a controller's storage (process.roles names controller)")
    log_dirs = [Path(d) for d in config["log.dirs"]]
    for index, log_dir in enumerate(log_dirs):
        meta = log_dir / META_PROPERTIES
        if meta.exists():
            found = read_properties(meta)
            same = found.get("cluster.id") == args.cluster_id and found.get("node.id") == str(config.node_id)
            if not (same and args.ignore_formatted):
                raise CommandError(f"{log_dir} is already formatted (cluster {found.get('cluster.id')}, node "
                                   f"{found.get('node.id')})" + ("" if same else "; use an empty directory"))
            print(f"{log_dir}: already formatted")
            continue
        log_dir.mkdir(parents=True, exist_ok=True)
        if index == 0 and users:
            write_bootstrap(log_dir / BOOTSTRAP_FILE, users)
        write_atomic(meta, f"# written by raftka storage format\nversion=1\n"
                           f"cluster.id={args.cluster_id}\nnode.id={config.node_id}\n")
        print(f"formatted {log_dir}" + (f" with {len(users)} bootstrap SCRAM credential(s)" if index == 0 and users else ""))
    return 0


def run_random_uuid(args: argparse.Namespace) -> int:
    from raftka.cluster.state import new_cluster_id
    print(new_cluster_id())
    return 0

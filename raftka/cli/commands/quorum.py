"""`raftka quorum status|unregister-broker|run`: the controller quorum.

``status``, like kafka-metadata-quorum describe --status and --replication: asks a controller
for Kafka's DescribeQuorum (v2): those of ``--bootstrap-controller HOST:PORT[,...]`` (CONTROLLER
RPC listeners) in turn until one answers, or the local cluster's in ``--dir`` / ``./.raftka``.
Per-voter log end offsets and lags are known by the active controller; a controller that is not
the active one answers its own view with NOT_LEADER_OR_FOLLOWER, and the tool then asks the
leader at the CONTROLLER listener the answer's ``nodes`` give for it.

``status --bootstrap-server HOST:PORT[,...]`` (brokers), as kafka-metadata-quorum takes it: a
Kafka broker forwards DescribeQuorum to the controllers, a Raftka broker does not answer it, so
the tool asks a live broker for its own ``controller.quorum.bootstrap.servers`` (DescribeConfigs
of its BROKER resource) and then asks those controllers itself. The controllers' listener must be
reachable from where the tool runs; ``--command-config`` logs in to both.

``run``: a local controller quorum (and, with ``--brokers``, brokers) in the foreground, for
trying Raftka out (scripts/controller-quorum.sh): prints its endpoints, keeps it running until
Ctrl-C or SIGTERM, then stops every process it started. Unlike `raftka cluster up`, nothing
outlives the command.

``unregister-broker``, like kafka-cluster unregister: UnregisterBroker to the active controller,
for a broker taken out of the cluster for good (its leaderships and ISR places move at once).
"""
from __future__ import annotations

import argparse
import json

from raftka.cli.commands._common import (CommandError, _host_ports, add_bootstrap_controller_args,
                                         bootstrap_controllers, bootstrap_servers, command_configs,
                                         controller_dial, describe_error, one_line_errors)

CONTROLLERS_KEY = "controller.quorum.bootstrap.servers"  # a broker's controllers' RPC listeners


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("quorum", help="describe the controller quorum, or run a local one")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="quorum_command", metavar="ACTION")
    status = sub.add_parser("status", help="leader, leader epoch, high watermark, each voter's and observer's lag")
    add_bootstrap_controller_args(status)
    status.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                        help=f"brokers instead: ask the controllers a broker names in its {CONTROLLERS_KEY}")
    status.add_argument("--json", action="store_true",
                        help="print the answer as JSON (controller_client.quorum_view's fields)")
    status.add_argument("--timeout-ms", type=int, default=5000, help="per controller asked")
    status.set_defaults(func=run_status)
    unregister = sub.add_parser("unregister-broker",
                                help="remove a broker taken out for good (Kafka's UnregisterBroker)")
    add_bootstrap_controller_args(unregister)
    unregister.add_argument("--broker-id", type=int, required=True)
    unregister.add_argument("--timeout-ms", type=int, default=10_000)
    unregister.set_defaults(func=run_unregister_broker)
    run = sub.add_parser("run", help="a local controller quorum in the foreground until Ctrl-C or SIGTERM")
    run.add_argument("--voters", type=int, default=3, choices=[1, 3, 5], help="quorum size (default 3)")
    run.add_argument("--brokers", type=int, default=0,
                     help="also start this many brokers (default 0: controllers only)")
    run.add_argument("--dir", required=True, metavar="DIR", help="directory for configs, logs and data")
    run.add_argument("--timeout-ms", type=int, default=60_000, help="give up waiting for readiness after this long")
    run.set_defaults(func=run_foreground)


@one_line_errors
def run_status(args: argparse.Namespace) -> int:
    from raftka.cluster.controller_client import PLAINTEXT_DIAL, describe_quorum
    from raftka.common.errors import RaftkaError
    timeout_s = args.timeout_ms / 1000
    if args.bootstrap_server and args.bootstrap_controller:
        raise CommandError("only one of --bootstrap-server or --bootstrap-controller must be specified")
    if args.bootstrap_server:
        addresses = _controllers_of_brokers(args)
        dial = controller_dial(args) if args.command_config else PLAINTEXT_DIAL
    else:
        dial = controller_dial(args)
        addresses = bootstrap_controllers(args)
    problems = []
    for address in addresses:  # the first that answers, as Kafka's admin client does
        try:
            status = describe_quorum(address, timeout_s=timeout_s, dial=dial)
            break
        except RaftkaError as error:
            if not error.retriable:  # a refused login: the next controller would refuse it too
                raise
            problems.append(f"{address}: {describe_error(error)}")
        except (OSError, TimeoutError) as error:
            problems.append(f"{address}: {describe_error(error)}")
    else:
        raise CommandError(f"no controller answered at {','.join(addresses)} ({'; '.join(problems)})")
    if not status["active"] and status["leader_endpoint"]:
        try:  # the active controller knows every voter's log end offset
            status = describe_quorum(status["leader_endpoint"], timeout_s=timeout_s, dial=dial)
        except Exception:
            pass  # keep the bootstrap controller's view
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return 0
    leader = status["leader_id"]
    print(f"ClusterLeaderId:   {leader if leader >= 0 else 'none'}"
          + (f" ({status['leader_endpoint']})" if status["leader_endpoint"] else ""))
    print(f"LeaderEpoch:       {status['leader_epoch']}")
    print(f"HighWatermark:     {status['high_watermark']}")
    print(f"CurrentVoters:     {[v['node_id'] for v in status['voters']]}")
    print(f"CurrentObservers:  {[o['replica_id'] for o in status['observers']]}")
    if not status["active"]:
        print(f"AnsweredBy:        a controller that is not the active one ({status['error_message']})")
    rows = [("NodeId", "Role", "Endpoint", "RaftAddress", "LogEndOffset", "Lag", "LastFetchTimestamp",
             "LastCaughtUpTimestamp")]
    for voter in status["voters"]:
        role = "Leader" if voter["node_id"] == leader else "Follower"
        rows.append((str(voter["node_id"]), role, voter["endpoint"] or "-", voter["raft_address"] or "-",
                     _opt(voter["log_end_offset"]), _opt(voter["lag"]), _time(voter["last_fetch_timestamp"]),
                     _time(voter["last_caught_up_timestamp"])))
    for observer in status["observers"]:  # a broker following the metadata log by Fetch
        rows.append((str(observer["replica_id"]), "Observer", "-", "-", str(observer["log_end_offset"]),
                     str(observer["lag"]), _time(observer["last_fetch_timestamp"]),
                     _time(observer["last_caught_up_timestamp"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def _controllers_of_brokers(args: argparse.Namespace) -> list[str]:
    """The controllers' RPC listeners the first live broker of ``--bootstrap-server`` that
    answers names in its controller.quorum.bootstrap.servers."""
    from raftka.client import AdminClient, ConfigResource, ConfigResourceType
    from raftka.common.errors import RaftkaError
    problems = []
    with AdminClient(**{**command_configs(args, "admin"), "bootstrap_servers": bootstrap_servers(args),
                        "request_timeout_ms": args.timeout_ms}) as admin:
        for broker in admin.describe_cluster()["brokers"]:
            if broker["fenced"]:
                continue
            name = str(broker["node_id"])
            try:
                entries = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, name)])
            except RaftkaError as error:
                if not error.retriable:  # refused (an ACL): every broker would refuse it
                    raise
                problems.append(f"broker {name}: {describe_error(error)}")
                continue
            except (OSError, TimeoutError) as error:
                problems.append(f"broker {name}: {describe_error(error)}")
                continue
            entry = entries.get(name, {}).get(CONTROLLERS_KEY)
            if entry is not None and entry.value:
                return _host_ports(entry.value, f"broker {name}'s {CONTROLLERS_KEY}")
            problems.append(f"broker {name}: no {CONTROLLERS_KEY}")
    raise CommandError(f"no broker at {args.bootstrap_server} named its controllers"
                       + (f" ({'; '.join(problems)})" if problems else ""))


@one_line_errors
def run_unregister_broker(args: argparse.Namespace) -> int:
    from raftka.cluster.controller_client import controller_request
    from raftka.common import errors
    from raftka.common.api import ApiKey
    code, out = controller_request(",".join(bootstrap_controllers(args)), ApiKey.UNREGISTER_BROKER,
                                   {"broker_id": args.broker_id}, timeout_s=args.timeout_ms / 1000,
                                   dial=controller_dial(args))
    if code != errors.NONE:
        raise errors.error_for(code, (out or {}).get("error_message") or f"broker {args.broker_id} not unregistered")
    print(f"unregistered broker {args.broker_id}")
    return 0


def _opt(value: object) -> str:
    return "-" if value is None else str(value)


def _time(ms: int) -> str:
    """A DescribeQuorum timestamp (ms since the epoch; -1 unknown)."""
    return "-" if ms < 0 else str(ms)


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

"""`raftka leader-election`: Kafka's kafka-leader-election, on the public AdminClient.

    raftka leader-election --election-type PREFERRED --all-topic-partitions
    raftka leader-election --election-type PREFERRED --topic orders --partition 3
    raftka leader-election --election-type UNCLEAN --topic orders --partition 0
    raftka leader-election --election-type PREFERRED --path-to-json-file partitions.json

The JSON file is kafka-leader-election's: ``{"partitions": [{"topic": "orders", "partition": 1}]}``.
PREFERRED moves leadership to each partition's first replica when it is live and in the ISR
(the controllers also do that by themselves unless ``auto.leader.rebalance.enable=false``);
UNCLEAN elects a leader for a partition that has none, outside the ISR if need be, and may lose
acknowledged records. Exit code 1 when any partition's election failed.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from raftka.cli.commands._common import (CommandError, add_bootstrap_args, bootstrap_servers, command_configs,
                                         one_line_errors, read_json_file)

ELECTION_TYPES = ("PREFERRED", "UNCLEAN")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("leader-election", help="elect partition leaders (preferred or unclean)",
                                   description="Elect partition leaders (ElectLeaders), as kafka-leader-election.")
    add_bootstrap_args(parser)
    parser.add_argument("--election-type", required=True, type=str.upper, choices=ELECTION_TYPES,
                        help="PREFERRED: the first replica leads; UNCLEAN: a partition without a leader gets one, "
                             "outside the ISR if need be (may lose acknowledged records)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    which.add_argument("--topic", help="the topic of --partition")
    which.add_argument("--path-to-json-file", metavar="FILE",
                       help='{"partitions": [{"topic": "orders", "partition": 1}, ...]}')
    parser.add_argument("--partition", type=int, help="with --topic: the partition")
    parser.add_argument("--timeout-ms", type=int, default=60_000, help="request timeout")
    parser.set_defaults(func=run)


def partitions_from_json(document: Any, source: str) -> list[Any]:
    """The TopicPartitions of kafka-leader-election's JSON file; CommandError saying what is wrong."""
    from raftka.client import TopicPartition
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CommandError(f'{source}: expected {{"partitions": [{{"topic": "T", "partition": N}}, ...]}}')
    out = []
    for entry in entries:
        if (not isinstance(entry, dict) or not isinstance(entry.get("topic"), str)
                or not isinstance(entry.get("partition"), int) or isinstance(entry.get("partition"), bool)
                or entry["partition"] < 0):
            raise CommandError(f"{source}: each partition needs a topic (string) and a partition (number >= 0), "
                               f"got {json.dumps(entry)[:80]}")
        out.append(TopicPartition(entry["topic"], entry["partition"]))
    return out


@one_line_errors
def run(args: argparse.Namespace) -> int:
    from raftka.client import AdminClient, ElectionType, TopicPartition
    partitions: list[Any] | None = None
    if args.topic is not None:
        if args.partition is None or args.partition < 0:
            raise CommandError("--topic needs --partition N (N >= 0)")
        partitions = [TopicPartition(args.topic, args.partition)]
    elif args.partition is not None:
        raise CommandError("--partition goes with --topic")
    elif args.path_to_json_file:
        partitions = partitions_from_json(read_json_file(args.path_to_json_file, "--path-to-json-file"),
                                          args.path_to_json_file)
    election = ElectionType[args.election_type]
    with AdminClient(**{**command_configs(args, "admin"), "bootstrap_servers": bootstrap_servers(args),
                        "request_timeout_ms": args.timeout_ms, "client_id": "raftka-leader-election"}) as admin:
        results = admin.perform_leader_election(election, partitions, raise_errors=False)
    from raftka.common import errors
    done = sorted(tp for tp, error in results.items() if error is None)
    not_needed = sorted(tp for tp, error in results.items()
                        if error is not None and error.code == errors.ELECTION_NOT_NEEDED)
    failed = sorted((tp, error) for tp, error in results.items()
                    if error is not None and error.code != errors.ELECTION_NOT_NEEDED)

    def names(tps: list[Any]) -> str:
        return ", ".join(f"{tp.topic}-{tp.partition}" for tp in tps)
    if done:
        print(f"Successfully completed leader election ({election.name}) for partitions {names(done)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {names(not_needed)}")
    if not results:
        print("No partition needed an election")
    for tp, error in failed:
        print(f"Error completing leader election ({election.name}) for partition {tp.topic}-{tp.partition}: "
              f"{errors.name_of(error.code)}: {error.message}")
    return 1 if failed else 0

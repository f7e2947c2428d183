"""`raftka topics create|list|describe|delete|alter`: Kafka's kafka-topics, on the public AdminClient.

    raftka topics create orders --partitions 6 --replication-factor 3 --config min.insync.replicas=2
    raftka topics describe orders
    raftka topics alter orders --config retention.ms=3600000 --delete-config segment.bytes
    raftka topics alter orders --partitions 12        (kafka-topics --alter --partitions: only grows)
    raftka topics describe --under-replicated-partitions   (only those partitions' lines, as kafka-topics)
"""
from __future__ import annotations

import argparse
import time
from typing import Any

from raftka.cli.commands._common import (CommandError, add_bootstrap_args, bootstrap_servers, command_configs,
                                         one_line_errors, parse_key_values)

LEADERS_WAIT_S = 15.0  # after create: brokers learn the topic from the metadata log a moment later
# kafka-topics --describe's reports: each prints only what it names (partition lines, or for
# --topics-with-overrides topic lines), without the other lines.
REPORTS = {
    "--under-replicated-partitions": "only partitions whose ISR is shorter than their replicas",
    "--unavailable-partitions": "only partitions without a live leader",
    "--under-min-isr-partitions": "only partitions whose ISR is below min.insync.replicas (or without a live leader)",
    "--at-min-isr-partitions": "only partitions whose ISR is exactly min.insync.replicas",
    "--topics-with-overrides": "only the topic lines of topics with config overrides",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("topics", help="create, list, describe, delete and alter topics",
                                   description="Manage topics (Kafka's kafka-topics).")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="topics_command", metavar="ACTION")

    def action(name: str, help_text: str, *, topic: str | None = "required") -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        if topic == "required":
            p.add_argument("name", nargs="?", metavar="TOPIC")
            p.add_argument("--topic", dest="topic_flag", metavar="TOPIC", help="the topic (instead of TOPIC)")
        elif topic == "many":
            p.add_argument("name", nargs="*", metavar="TOPIC", help="topics (default: all)")
            p.add_argument("--topic", dest="topic_flag", action="append", metavar="TOPIC")
        add_bootstrap_args(p)
        p.add_argument("--timeout-ms", type=int, default=30_000, help="request timeout")
        return p

    create = action("create", "create a topic")
    create.add_argument("--partitions", type=int, default=-1, help="partition count (default: num.partitions)")
    create.add_argument("--replication-factor", type=int, default=-1,
                        help="replicas per partition (default: default.replication.factor)")
    create.add_argument("--config", action="append", metavar="KEY=VALUE",
                        help="topic config, repeatable (min.insync.replicas=2, retention.ms=...)")
    create.add_argument("--if-not-exists", action="store_true", help="no error when the topic exists")
    create.set_defaults(func=run_create)

    listing = action("list", "list topic names", topic=None)
    listing.add_argument("--exclude-internal", action="store_true", help="leave out __consumer_offsets & co")
    listing.set_defaults(func=run_list)

    describe = action("describe", "partitions with leader, replicas and ISR", topic="many")
    describe.add_argument("--exclude-internal", action="store_true", help="leave out __consumer_offsets & co")
    report = describe.add_mutually_exclusive_group()  # kafka-topics takes one report at a time
    for flag, text in REPORTS.items():
        report.add_argument(flag, dest="report", action="store_const", const=flag, help=text)
    describe.set_defaults(func=run_describe, report=None)

    delete = action("delete", "delete a topic")
    delete.add_argument("--if-exists", action="store_true", help="no error when the topic does not exist")
    delete.set_defaults(func=run_delete)

    alter = action("alter", "add partitions, set or remove topic config overrides")
    alter.add_argument("--partitions", type=int, metavar="N",
                       help="the partition count in all (CreatePartitions; more than the topic has)")
    alter.add_argument("--config", "--add-config", dest="config", action="append", metavar="KEY=VALUE",
                       help="set a config, repeatable (other overrides stay)")
    alter.add_argument("--delete-config", action="append", metavar="KEY", help="remove an override, repeatable")
    alter.set_defaults(func=run_alter)


def _topic(args: argparse.Namespace) -> str:
    name = args.name or args.topic_flag
    if not name:
        raise CommandError(f"topics {args.topics_command}: name the topic (TOPIC or --topic TOPIC)")
    return name


def _admin(args: argparse.Namespace) -> Any:
    from raftka.client import AdminClient
    return AdminClient(**{**command_configs(args, "admin"), "bootstrap_servers": bootstrap_servers(args),
                          "request_timeout_ms": args.timeout_ms, "client_id": "raftka-topics"})


def _unknown(name: str) -> CommandError:
    return CommandError(f"unknown topic {name!r} (UNKNOWN_TOPIC_OR_PARTITION)")


@one_line_errors
def run_create(args: argparse.Namespace) -> int:
    from raftka.client import NewTopic
    from raftka.client.errors import TopicAlreadyExistsError
    name = _topic(args)
    configs = parse_key_values(args.config, "--config")
    with _admin(args) as admin:
        try:
            admin.create_topics([NewTopic(name, args.partitions, args.replication_factor, configs or None)])
        except TopicAlreadyExistsError:
            if args.if_not_exists:
                print(f"Topic {name} already exists.")
                return 0
            raise CommandError(f"topic {name!r} already exists (TOPIC_ALREADY_EXISTS)") from None
        wait_for_leaders(admin, name, LEADERS_WAIT_S)
    print(f"Created topic {name}.")
    return 0


def wait_for_leaders(admin: Any, name: str, timeout_s: float, partitions: int | None = None) -> dict[str, Any] | None:
    """Wait until every partition of ``name`` (``partitions`` of them, when given) has a leader in
    the brokers' metadata (so the next produce finds it); returns the description, None if it did
    not happen in time."""
    deadline = time.monotonic() + timeout_s
    while True:
        [described] = admin.describe_topics([name])
        parts = described["partitions"]
        if (described["error_code"] == 0 and parts and all(p["leader"] >= 0 for p in parts)
                and partitions in (None, len(parts))):
            return described
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


def _internal(name: str) -> bool:
    from raftka.client.aio.subscription_state import INTERNAL_TOPICS
    return name in INTERNAL_TOPICS


@one_line_errors
def run_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        for name in admin.list_topics():
            if not (args.exclude_internal and _internal(name)):
                print(name)
    return 0


@one_line_errors
def run_describe(args: argparse.Namespace) -> int:
    names = list(args.name or []) + list(args.topic_flag or [])
    with _admin(args) as admin:
        if not names:
            names = admin.list_topics()
        if args.exclude_internal:
            names = [n for n in names if not _internal(n)]
        described = admin.describe_topics(names) if names else []
        for topic in described:
            if topic["error_code"] != 0:
                raise _unknown(topic["topic"])
        configs = admin.describe_configs(names) if names else {}
        live: set[int] = set()
        if args.report in ("--unavailable-partitions", "--under-min-isr-partitions"):
            live = {b["node_id"] for b in admin.describe_cluster()["brokers"] if not b.get("fenced")}
    for topic in described:
        name, parts = topic["topic"], topic["partitions"]
        overrides = ",".join(f"{k}={e.value}" for k, e in sorted(configs.get(name, {}).items()) if not e.is_default)
        rf = max((len(p["replicas"]) for p in parts), default=0)
        if args.report is None or (args.report == "--topics-with-overrides" and overrides):
            print(f"Topic: {name}\tTopicId: {topic['topic_id']}\tPartitionCount: {len(parts)}\t"
                  f"ReplicationFactor: {rf}\tConfigs: {overrides}")
        if args.report == "--topics-with-overrides":
            continue
        min_isr = _min_isr(configs.get(name, {}))
        for p in parts:
            if args.report is not None and not _reported(args.report, p, live, min_isr):
                continue
            offline = f"\tOffline: {_ids(p['offline_replicas'])}" if p.get("offline_replicas") else ""
            print(f"\tTopic: {name}\tPartition: {p['partition']}\tLeader: {p['leader'] if p['leader'] >= 0 else 'none'}"
                  f"\tReplicas: {_ids(p['replicas'])}\tIsr: {_ids(p['isr'])}{offline}")
    return 0


def _min_isr(entries: dict[str, Any]) -> int | None:
    entry = entries.get("min.insync.replicas")
    try:
        return int(entry.value) if entry is not None else None
    except (TypeError, ValueError):
        return None


def _reported(report: str, p: dict[str, Any], live: set[int], min_isr: int | None) -> bool:
    """Whether partition ``p`` belongs in ``report`` (kafka-topics' rules for each)."""
    has_leader = p["leader"] >= 0 and (not live or p["leader"] in live)
    isr = len(p["isr"])
    if report == "--under-replicated-partitions":
        return isr < len(p["replicas"])
    if report == "--unavailable-partitions":
        return not has_leader
    if report == "--under-min-isr-partitions":
        return not has_leader or (min_isr is not None and isr < min_isr)
    if report == "--at-min-isr-partitions":
        return min_isr is not None and isr == min_isr
    raise AssertionError(report)


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids)


@one_line_errors
def run_delete(args: argparse.Namespace) -> int:
    from raftka.client.errors import UnknownTopicOrPartitionError
    name = _topic(args)
    with _admin(args) as admin:
        try:
            admin.delete_topics([name])
        except UnknownTopicOrPartitionError:
            if args.if_exists:
                print(f"Topic {name} does not exist.")
                return 0
            raise _unknown(name) from None
    print(f"Deleted topic {name}.")
    return 0


@one_line_errors
def run_alter(args: argparse.Namespace) -> int:
    from raftka.client import AlterConfigOp, AlterConfigOpType, ConfigResource, NewPartitions
    name = _topic(args)
    changes: dict[str, str | None] = dict(parse_key_values(args.config, "--config"))
    for key in args.delete_config or []:
        changes[key.strip()] = None
    if not changes and args.partitions is None:
        raise CommandError("topics alter: nothing to change (give --partitions N, --config KEY=VALUE "
                           "or --delete-config KEY)")
    with _admin(args) as admin:
        [described] = admin.describe_topics([name])
        if described["error_code"] != 0:
            raise _unknown(name)
        if args.partitions is not None:
            admin.create_partitions({name: NewPartitions(args.partitions)})  # INVALID_PARTITIONS unless it grows
            wait_for_leaders(admin, name, LEADERS_WAIT_S, args.partitions)
            print(f"Topic {name} now has {args.partitions} partitions.")
        if not changes:
            return 0
        # IncrementalAlterConfigs, as kafka-configs.sh: overrides not named here stay.
        ops = [AlterConfigOp(k, v, AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
               for k, v in changes.items()]
        admin.incremental_alter_configs([ConfigResource("topic", name, incremental_configs=ops)])
    shown = ", ".join(f"{k}={v}" if v is not None else f"-{k}" for k, v in changes.items())
    print(f"Updated config of topic {name}: {shown}.")
    return 0

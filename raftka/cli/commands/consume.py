"""`raftka consume TOPIC`: Kafka's console consumer. One line per record on stdout.

    raftka consume events --from-beginning --max-messages 10 --print-key --print-offset
    raftka consume --include 'events-.*' --property print.key=true --property key.separator=:

``--include REGEX`` reads every topic whose whole name the regex matches (Kafka's --include;
internal topics excluded): without ``--group`` those there at the start, with ``--group`` also
ones created later. ``--property`` takes the console consumer's formatter properties
(print.key, print.timestamp, ..., key.separator; see FORMATTER_PROPERTIES).
``--consumer-property KEY=VALUE`` and ``--consumer.config FILE`` take consumer configs by Kafka's
names (max.poll.records, auto.offset.reset, client.id, group.id, ...); --from-beginning and
--group win over them, and contradicting them is an error, as in Kafka's tool.

Without ``--group`` it reads every partition (or ``--partition``) itself and commits nothing.
With ``--group`` it joins that consumer group (its partitions are shared among the group's
members, offsets committed). Fields are printed in Kafka's order, tab-separated:
CreateTime, Partition, Offset, headers, key, value (null for a missing key or value). It stops
after ``--max-messages``, after ``--timeout-ms`` without a record, or on Ctrl-C / SIGTERM, and
prints ``Processed a total of N messages`` on stderr.
"""
from __future__ import annotations

import argparse
import signal
import sys
import warnings
from typing import Any

from raftka.cli.commands._common import (CommandError, add_bootstrap_args, add_client_property_args,
                                         bootstrap_servers, client_role_configs, one_line_errors, say)

POLL_MS = 500

# Kafka's DefaultMessageFormatter properties (--property KEY=VALUE) -> (the args attribute they
# set, whether the value is a boolean). The --print-* and --separator flags set the same ones.
FORMATTER_PROPERTIES = {
    "print.timestamp": ("print_timestamp", True),
    "print.key": ("print_key", True),
    "print.offset": ("print_offset", True),
    "print.partition": ("print_partition", True),
    "print.headers": ("print_headers", True),
    "print.value": ("print_value", True),
    "key.separator": ("separator", False),
    "line.separator": ("line_separator", False),
    "headers.separator": ("headers_separator", False),
    "null.literal": ("null_literal", False),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("consume", help="print records of a topic (console consumer)",
                                   description="Print the records of a topic, one per line.")
    parser.add_argument("topic", metavar="TOPIC", nargs="?", help="the topic (or --topic, or --include)")
    parser.add_argument("--topic", dest="topic_flag", metavar="TOPIC", help="the topic (Kafka's flag)")
    parser.add_argument("--include", metavar="REGEX",
                        help="every topic whose name matches this regular expression (Kafka's --include)")
    add_bootstrap_args(parser)
    add_client_property_args(parser, "consumer")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the earliest offset (default: only records produced from now on)")
    parser.add_argument("--group", metavar="GROUP", help="consume as a member of this consumer group")
    parser.add_argument("--partition", type=int, default=None, help="only this partition")
    parser.add_argument("--offset", default=None,
                        help="with --partition: earliest, latest, or an offset to start at")
    parser.add_argument("--max-messages", type=int, default=None, help="exit after this many records")
    parser.add_argument("--timeout-ms", type=int, default=None, help="exit after this long without a record")
    parser.add_argument("--print-key", action="store_true")
    parser.add_argument("--print-offset", action="store_true")
    parser.add_argument("--print-partition", action="store_true")
    parser.add_argument("--print-timestamp", action="store_true")
    parser.add_argument("--print-headers", action="store_true")
    parser.add_argument("--separator", default="\t", help="between printed fields (default tab)")
    parser.add_argument("--property", action="append", metavar="KEY=VALUE",
                        help="a formatter property, as Kafka's console consumer takes them: "
                             + ", ".join(FORMATTER_PROPERTIES) + "; repeatable")
    parser.set_defaults(func=run, print_value=True, line_separator="\n", headers_separator=",",
                        null_literal="null")


def apply_properties(args: argparse.Namespace) -> None:
    """Set the formatter options of ``--property KEY=VALUE`` on ``args`` (a boolean is true when
    it says "true" in any case, as in Kafka). CommandError for a key the formatter does not know."""
    for item in args.property or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CommandError(f"--property {item!r}: expected KEY=VALUE")
        if key not in FORMATTER_PROPERTIES:
            raise CommandError(f"--property {key}: unknown (known: {', '.join(FORMATTER_PROPERTIES)})")
        attribute, boolean = FORMATTER_PROPERTIES[key]
        setattr(args, attribute, value.strip().lower() == "true" if boolean else value)


def format_record(record: Any, args: argparse.Namespace) -> str:
    """One output line (without the line separator), in the field order of Kafka's
    DefaultMessageFormatter."""
    null = getattr(args, "null_literal", "null")
    fields = []
    if args.print_timestamp:
        kind = "LogAppendTime" if getattr(record, "timestamp_type", 0) == 1 else "CreateTime"
        fields.append(f"{kind}:{record.timestamp}")
    if args.print_partition:
        fields.append(f"Partition:{record.partition}")
    if args.print_offset:
        fields.append(f"Offset:{record.offset}")
    if args.print_headers:
        headers = record.headers or []
        fields.append(getattr(args, "headers_separator", ",").join(f"{k}:{_text(v, null)}" for k, v in headers)
                      if headers else "NO_HEADERS")
    if args.print_key:
        fields.append(_text(record.key, null))
    if getattr(args, "print_value", True):
        fields.append(_text(record.value, null))
    return args.separator.join(fields)


def _text(data: bytes | None, null: str = "null") -> str:
    return null if data is None else data.decode("utf-8", errors="replace")


def _topics(args: argparse.Namespace) -> tuple[str | None, Any]:
    """(the one topic, or None) and (the --include pattern compiled, or None); CommandError
    unless exactly one of TOPIC, --topic, --include is given."""
    import re
    named = [t for t in (args.topic, args.topic_flag) if t]
    if len(named) + (args.include is not None) != 1:
        raise CommandError("name one topic (TOPIC or --topic) or --include REGEX")
    if args.include is None:
        return named[0], None
    if args.partition is not None:
        raise CommandError("--partition needs one topic, not --include")
    try:
        return None, re.compile(args.include)
    except re.error as error:
        raise CommandError(f"--include {args.include!r}: {error}") from None


def _matching_partitions(servers: str, pattern: Any, configs: dict[str, Any]) -> list[tuple[str, int]]:
    """Every partition of the topics whose whole name ``pattern`` matches (internal ones left
    out, as a pattern subscription does); CommandError when none does."""
    from raftka.client import AdminClient
    from raftka.client.aio.subscription_state import INTERNAL_TOPICS
    with AdminClient(**{**configs, "bootstrap_servers": servers, "client_id": "raftka-tools"}) as admin:
        names = [t for t in admin.list_topics() if pattern.fullmatch(t) and t not in INTERNAL_TOPICS]
        described = admin.describe_topics(names) if names else []
    found = [(d["topic"], p["partition"]) for d in described
             if not d["error_code"] for p in d["partitions"]]
    if not found:
        raise CommandError(f"no topic matches --include {pattern.pattern!r}")
    return found


@one_line_errors
def run(args: argparse.Namespace) -> int:
    from raftka.client import Consumer, TopicPartition
    from raftka.cli.commands.produce import check_topic
    apply_properties(args)
    properties, admin_configs = client_role_configs(args, "consumer")
    _merge_group_and_reset(args, properties)
    topic, pattern = _topics(args)
    if args.offset is not None and args.partition is None:
        raise CommandError("--offset needs --partition")
    if args.max_messages is not None and args.max_messages < 1:
        raise CommandError("--max-messages must be 1 or more")
    if args.group and args.partition is not None:
        raise CommandError("--group and --partition do not go together (a group assigns partitions)")
    servers = bootstrap_servers(args)
    partitions: list[tuple[str, int]] = []  # assigned by hand, without --group
    if pattern is None:
        described = check_topic(servers, topic, 30_000, partition=args.partition, configs=admin_configs)
        partitions = ([(topic, args.partition)] if args.partition is not None
                      else [(topic, p["partition"]) for p in described["partitions"]])
    elif not args.group:
        partitions = _matching_partitions(servers, pattern, admin_configs)
    configs: dict[str, Any] = {"client_id": "raftka-consume", "auto_offset_reset": "latest", **properties,
                               "bootstrap_servers": servers}
    if args.from_beginning:
        configs["auto_offset_reset"] = "earliest"
    if args.group:
        configs["group_id"] = args.group
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        consumer = Consumer(**configs)
        if args.group:
            if pattern is not None:
                consumer.subscribe(pattern=args.include)
            else:
                consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(t, p) for t, p in partitions])
    for warning in caught:  # e.g. groups not available yet: one line, not a Python warning dump
        say(f"warning: {str(warning.message).splitlines()[0]}")
    stop = _stop_on_sigterm()
    count = 0
    idle_ms = 0
    try:
        if args.offset is not None:
            tp = TopicPartition(topic, args.partition)
            if args.offset == "earliest":
                consumer.seek_to_beginning(tp)
            elif args.offset == "latest":
                consumer.seek_to_end(tp)
            elif args.offset.lstrip("-").isdigit() and int(args.offset) >= 0:
                consumer.seek(tp, int(args.offset))
            else:
                raise CommandError(f"--offset {args.offset!r}: expected earliest, latest or an offset >= 0")
        out = sys.stdout
        while not stop:
            batch = consumer.poll(timeout_ms=POLL_MS, max_records=_room(args, count))
            records = [r for part in batch.values() for r in part]
            if not records:
                idle_ms += POLL_MS
                if args.timeout_ms is not None and idle_ms >= args.timeout_ms:
                    break
                continue
            idle_ms = 0
            for record in records:
                out.write(format_record(record, args) + args.line_separator)
                count += 1
            out.flush()
            if args.max_messages is not None and count >= args.max_messages:
                break
    except KeyboardInterrupt:
        pass  # Ctrl-C ends a console consumer normally
    finally:
        say(f"Processed a total of {count} messages")
        consumer.close()
    return 0


def _merge_group_and_reset(args: argparse.Namespace, properties: dict[str, Any]) -> None:
    """group.id among the consumer properties is --group (the two must agree); auto.offset.reset
    must agree with --from-beginning. Kafka's console consumer refuses the same conflicts."""
    group = properties.pop("group_id", None)
    if group is not None:
        if args.group is not None and args.group != group:
            raise CommandError(f"--group {args.group} and group.id={group} differ: give one")
        args.group = group
    reset = properties.get("auto_offset_reset")
    if args.from_beginning and reset is not None and reset != "earliest":
        raise CommandError(f"--from-beginning and auto.offset.reset={reset} do not go together")


def _room(args: argparse.Namespace, count: int) -> int | None:
    return None if args.max_messages is None else max(1, args.max_messages - count)


def _stop_on_sigterm() -> list[bool]:
    """A flag list that SIGTERM makes truthy, so the loop ends cleanly (summary, close)."""
    flag: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: flag.append(True))
    return flag

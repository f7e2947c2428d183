"""`raftka groups`: consumer groups, like kafka-consumer-groups.sh.

    raftka groups list --bootstrap-server HOST:PORT [--state]
    raftka groups describe (GROUP | --group G ... | --all-groups) [--offsets | --members | --state]
    raftka groups reset-offsets (--group G ... | --all-groups) --topic T[:P,P...] | --all-topics
                                --to-earliest | --to-latest | --to-current | --to-offset N
                                | --shift-by N | --to-datetime T | --by-duration PnDTnHnMnS  [--execute]
    raftka groups delete --group G
    raftka groups delete-offsets --group G --topic T[:P,P...]

Brokers are found as by every tool: ``--bootstrap-server`` (a comma list) or the local cluster
in ``--dir``. ``describe`` prints one row per partition: committed offset, log end offset (the
high watermark), lag, and the member that owns it. ``reset-offsets`` prints the plan and changes
nothing unless ``--execute``; it works only on a group without members (stop its consumers
first), as Kafka's tool. With several groups (``--group`` repeated, or ``--all-groups``) a group
with members is reported and skipped, the others are reset, and the exit code is 1, as Kafka's
tool reports such a group and goes on. A time (``--to-datetime``, or now minus ``--by-duration``) gives each
partition's first offset with a timestamp at or after it (ListOffsets by timestamp), or the log
end offset when there is none, as Kafka's tool. ``delete-offsets`` deletes committed offsets (Kafka's
``--delete-offsets``); a group with members keeps those of the topics it subscribes to.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any, Iterable, Sequence

from raftka.cli.commands._common import (CommandError, add_bootstrap_args, bootstrap_servers, command_configs,
                                         one_line_errors)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("groups", help="list, describe, reset and delete consumer groups and offsets")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="groups_command", metavar="ACTION")

    def common(p: argparse.ArgumentParser) -> None:
        add_bootstrap_args(p)
        p.add_argument("--timeout-ms", type=int, default=15000, help="how long to wait for answers")

    listing = sub.add_parser("list", help="every consumer group")
    common(listing)
    listing.add_argument("--state", action="store_true", help="show each group's state too")
    listing.set_defaults(func=run_list)

    describe = sub.add_parser("describe", help="a group's partitions: committed offset, log end offset, lag, owner")
    common(describe)
    describe.add_argument("group", metavar="GROUP", nargs="?", help="the group (or --group)")
    named = describe.add_mutually_exclusive_group()
    named.add_argument("--group", dest="groups", action="append", metavar="GROUP", help="a group; repeatable")
    named.add_argument("--all-groups", action="store_true", help="every consumer group")
    shown = describe.add_mutually_exclusive_group()
    shown.add_argument("--offsets", action="store_true", help="one row per partition (the default)")
    shown.add_argument("--members", action="store_true", help="the members and how many partitions each has")
    shown.add_argument("--state", action="store_true", help="the group's state, assignor and member count")
    describe.set_defaults(func=run_describe)

    reset = sub.add_parser("reset-offsets", help="set a group's committed offsets (group must have no members)")
    common(reset)
    groups = reset.add_mutually_exclusive_group(required=True)
    groups.add_argument("--group", dest="groups", action="append", metavar="GROUP", help="a group; repeatable")
    groups.add_argument("--all-groups", action="store_true",
                        help="every consumer group (with --all-topics: each group's own committed topics)")
    which = reset.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic (all its partitions, or the listed ones); repeatable")
    which.add_argument("--all-topics", action="store_true", help="every topic the group has committed offsets for")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset (skip everything there now)")
    to.add_argument("--to-current", action="store_true",
                    help="the committed offset (the log end offset where none is committed)")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (kept within the log's range)")
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="the committed offset plus N (negative: back; kept within the log's range)")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                    help="the first offset at or after this time (Kafka's format; timezone Z or +HH:MM, "
                         "default local time)")
    to.add_argument("--by-duration", metavar="PnDTnHnMnS",
                    help="the first offset at or after now minus this ISO-8601 duration, e.g. P1DT2H or PT30M")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="change the offsets (default: only show the plan)")
    mode.add_argument("--dry-run", action="store_true", help="only show the plan (the default)")
    reset.set_defaults(func=run_reset)

    delete = sub.add_parser("delete", help="delete a group without members, with its committed offsets")
    common(delete)
    delete.add_argument("--group", required=True, action="append")
    delete.set_defaults(func=run_delete)

    delete_offsets = sub.add_parser("delete-offsets", help="delete committed offsets of a group (not of topics "
                                    "its members subscribe to)")
    common(delete_offsets)
    delete_offsets.add_argument("--group", required=True)
    delete_offsets.add_argument("--topic", required=True, action="append", metavar="TOPIC[:P,P...]",
                                help="a topic (all its partitions, or the listed ones); repeatable")
    delete_offsets.set_defaults(func=run_delete_offsets)


def _admin(args: argparse.Namespace) -> Any:
    from raftka.client import AdminClient
    return AdminClient(**{**command_configs(args, "admin"), "bootstrap_servers": bootstrap_servers(args),
                          "request_timeout_ms": args.timeout_ms})


def _table(rows: Sequence[Sequence[Any]]) -> None:
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


@one_line_errors
def run_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        groups = admin.list_consumer_groups()
        if not args.state:
            for group_id, _ in groups:
                print(group_id)
            return 0
        infos = admin.describe_consumer_groups([g for g, _ in groups]) if groups else []
    rows: list[Sequence[Any]] = [("GROUP", "STATE", "MEMBERS")]
    rows += [(i.group, i.state, len(i.members)) for i in infos]
    _table(rows)
    return 0


@one_line_errors
def run_describe(args: argparse.Namespace) -> int:
    if args.group and (args.groups or args.all_groups):
        raise CommandError("name the group once: GROUP, --group or --all-groups")
    with _admin(args) as admin:
        if args.all_groups:
            groups = sorted(g for g, _ in admin.list_consumer_groups())
            if not groups:
                print("No consumer groups.")
                return 0
        else:
            groups = [args.group] if args.group else list(dict.fromkeys(args.groups or []))
        if not groups:
            raise CommandError("name the group: GROUP, --group G or --all-groups")
        failed = 0
        for n, group in enumerate(groups):
            if n:
                print()  # a blank line between groups, as kafka-consumer-groups prints them
            failed += _describe_group(admin, group, args)
    return 1 if failed else 0


def _describe_group(admin: Any, group: str, args: argparse.Namespace) -> int:
    """Print one group's table; 1 when the group does not exist (after an error line)."""
    info = admin.describe_consumer_groups([group])[0]
    if args.state:
        rows: list[Sequence[Any]] = [("GROUP", "STATE", "ASSIGNMENT-STRATEGY", "GENERATION", "#MEMBERS"),
                                     (info.group, info.state, info.protocol or None, info.generation_id,
                                      len(info.members))]
        _table(rows)
        return 0
    if args.members:
        if not info.members:
            print(f"Consumer group '{group}' has no active members.")
            return 0
        rows = [("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS")]
        for m in info.members:
            parts = getattr(m.member_assignment, "partitions", None) or []
            rows.append((info.group, m.member_id, m.group_instance_id, m.client_host, m.client_id, len(parts)))
        _table(rows)
        return 0
    lag = admin.describe_consumer_group_lag(group)
    if info.state == "Dead" and not lag:
        return _fail(f"consumer group '{group}' does not exist")
    if not info.members:
        print(f"Consumer group '{group}' has no active members.")
        print()
    rows = [("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
             "CLIENT-ID")]
    for r in lag:
        rows.append((group, r["topic"], r["partition"], r["committed_offset"] if r["committed_offset"] >= 0
                     else None, r["log_end_offset"], r["lag"], r["member_id"], r["host"], r["client_id"]))
    _table(rows)
    return 0


def _named_partitions(admin: Any, specs: Iterable[str], committed: Iterable[Any] = ()) -> list[Any]:
    """The partitions ``--topic TOPIC[:P,P...]`` names: the listed ones, or all of the topic's.
    A topic that no longer exists has the partitions in ``committed`` (a group's offsets).
    CommandError for a bad list or a partition that is neither in the topic nor committed."""
    from raftka.client import TopicPartition
    tps: list[Any] = []
    for spec in specs:
        name, _, parts = spec.partition(":")
        described = admin.describe_topics([name])[0]
        known = [p["partition"] for p in described["partitions"]] if not described["error_code"] else []
        known = known or sorted(tp.partition for tp in committed if tp.topic == name)
        if not known:
            raise CommandError(f"topic '{name}' does not exist")
        if parts:
            try:
                wanted = [int(p) for p in parts.split(",") if p.strip()]
            except ValueError:
                raise CommandError(f"bad partition list in {spec!r} (want TOPIC:0,1,2)") from None
            missing = sorted(set(wanted) - set(known))
            if missing:
                raise CommandError(f"topic '{name}' has no partition(s) {missing}")
        else:
            wanted = known
        tps += [TopicPartition(name, p) for p in wanted]
    return tps


@one_line_errors
def run_reset(args: argparse.Namespace) -> int:
    at_time = _reset_time_ms(args)  # a bad time is refused before anything is asked
    failed = 0
    plans: dict[str, dict[Any, int]] = {}
    with _admin(args) as admin:
        if args.all_groups:
            names = sorted(group_id for group_id, _ in admin.list_consumer_groups())
        else:
            names = list(dict.fromkeys(args.groups))  # named twice: reset once
        infos = admin.describe_consumer_groups(names) if names else []
        for info in infos:
            group = info.group
            if info.state not in ("Empty", "Dead"):
                print(f"error: assignments can only be reset if the group '{group}' is inactive, but the current "
                      f"state is {info.state} ({len(info.members)} member(s)); stop its consumers first",
                      file=sys.stderr)
                failed += 1
                continue
            try:
                plan = _reset_plan(admin, group, args, at_time)
            except CommandError as error:
                if args.all_groups and "has no committed offsets" in str(error):
                    continue  # --all-groups --all-topics: nothing to reset in this one
                print(f"error: {error}", file=sys.stderr)
                failed += 1
                continue
            if args.execute:
                admin.alter_consumer_group_offsets(group, plan)
            plans[group] = plan
    if plans:
        rows: list[Sequence[Any]] = [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")]
        rows += [(group, tp.topic, tp.partition, offset)
                 for group, plan in sorted(plans.items()) for tp, offset in sorted(plan.items())]
        _table(rows)
        if not args.execute:
            print("(dry run: nothing changed; add --execute to reset these offsets)")
    elif args.all_groups and not failed:
        print("no consumer group has offsets to reset")
    return 1 if failed else 0


def _reset_plan(admin: Any, group: str, args: argparse.Namespace, at_time: int | None) -> dict[Any, int]:
    """{TopicPartition: new offset} of one inactive group; CommandError for what cannot be planned."""
    committed = admin.list_consumer_group_offsets(group)
    if args.all_topics:
        tps = sorted(committed)
        if not tps:
            raise CommandError(f"group '{group}' has no committed offsets; name the topics with --topic")
    else:
        tps = _named_partitions(admin, args.topic)
    earliest = admin.list_offsets({tp: "earliest" for tp in tps})
    latest = admin.list_offsets({tp: "latest" for tp in tps})
    by_time = admin.list_offsets({tp: at_time for tp in tps}) if at_time is not None else {}
    plan = {}
    for tp in tps:
        current = committed.get(tp)
        current_offset = getattr(current, "offset", current)
        if args.to_earliest:
            plan[tp] = earliest[tp]
        elif args.to_latest:
            plan[tp] = latest[tp]
        elif args.to_current:
            plan[tp] = current_offset if current_offset is not None and current_offset >= 0 else latest[tp]
        elif at_time is not None:  # no record at or after that time: the log end, as Kafka
            plan[tp] = by_time[tp] if by_time[tp] >= 0 else latest[tp]
        elif args.shift_by is not None:
            if current_offset is None or current_offset < 0:
                raise CommandError(f"cannot shift the offset of {tp.topic}-{tp.partition}: group '{group}' "
                                   "has no committed offset for it")
            plan[tp] = min(max(current_offset + args.shift_by, earliest[tp]), latest[tp])
        else:
            plan[tp] = min(max(args.to_offset, earliest[tp]), latest[tp])
    return plan


_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{1,3})?(Z|[+-]\d{2}:?\d{2})?")
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,3})?)S)?)?")


def parse_datetime_ms(text: str) -> int:
    """Kafka's --to-datetime (YYYY-MM-DDTHH:mm:SS.sss, optional Z or +HH:MM; local time without
    one) -> ms since the epoch. CommandError for anything else."""
    from datetime import datetime
    match = _DATETIME.fullmatch(text.strip())
    if not match:
        raise CommandError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss with an optional timezone "
                           "(Z, +HH:MM)")
    zone = match.group(3) or ""
    if zone and zone != "Z" and ":" not in zone:
        zone = zone[:3] + ":" + zone[3:]
    try:
        moment = datetime.fromisoformat(match.group(1) + (match.group(2).ljust(4, "0") if match.group(2) else "")
                                        + ("+00:00" if zone == "Z" else zone))
    except ValueError as error:
        raise CommandError(f"--to-datetime {text!r}: {error}") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # Kafka's tool reads a time without zone as local time
    return int(round(moment.timestamp() * 1000))


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as Kafka's --by-duration takes it (PnDTnHnMnS) -> ms. CommandError
    for anything else."""
    match = _DURATION.fullmatch(text.strip().upper())
    if not match or not any(match.groups()) or text.strip().upper().endswith("T"):
        raise CommandError(f"--by-duration {text!r}: expected an ISO-8601 duration PnDTnHnMnS, e.g. P1DT2H or PT30M")
    days, hours, minutes, seconds = match.groups()
    return int(round(((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000
                     + float(seconds or 0) * 1000))


def _reset_time_ms(args: argparse.Namespace) -> int | None:
    if args.to_datetime is not None:
        return parse_datetime_ms(args.to_datetime)
    if args.by_duration is not None:
        return int(time.time() * 1000) - parse_duration_ms(args.by_duration)
    return None


@one_line_errors
def run_delete(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        results = admin.delete_consumer_groups(args.group)
    failed = 0
    for group_id, error in results:
        if error is None:
            print(f"Deletion of group '{group_id}' was successful.")
        else:
            failed += 1
            print(f"error: group '{group_id}': {error}", file=sys.stderr)
    return 1 if failed else 0


@one_line_errors
def run_delete_offsets(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        committed = admin.list_consumer_group_offsets(args.group)
        try:
            tps = _named_partitions(admin, args.topic, committed)
        except CommandError as error:
            return _fail(str(error))
        results = admin.delete_consumer_group_offsets(args.group, tps)
    rows: list[Sequence[Any]] = [("TOPIC", "PARTITION", "STATUS")]
    rows += [(tp.topic, tp.partition, "Successful" if error is None else f"Error: {error}")
             for tp, error in sorted(results.items())]
    _table(rows)
    return 1 if any(error is not None for error in results.values()) else 0

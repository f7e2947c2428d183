"""`raftka reassign`: Kafka's kafka-reassign-partitions, on the public AdminClient.

    raftka reassign --generate --topics-to-move-json-file topics.json --broker-list 4,5,6
    raftka reassign --execute --reassignment-json-file plan.json [--throttle BYTES_PER_S]
    raftka reassign --verify --reassignment-json-file plan.json [--preserve-throttles]
    raftka reassign --cancel --reassignment-json-file plan.json
    raftka reassign --list

The files are kafka-reassign-partitions': topics to move ``{"version": 1, "topics": [{"topic":
"orders"}]}``, a plan ``{"version": 1, "partitions": [{"topic": "orders", "partition": 0,
"replicas": [4, 5, 6]}]}`` (``log_dirs`` is accepted, and must be "any": one log dir per broker
is chosen by the broker). ``--generate`` prints the current assignment (keep it to roll back) and
a proposed one that spreads each topic's partitions round-robin over ``--broker-list`` with the
same replication factor, leaders spread too; ``--execute`` starts a plan (the new replicas catch
up, then the old ones are removed); ``--verify`` says which partitions are done; ``--cancel``
stops those still under way (back to their original replicas); ``--list`` shows every
reassignment under way. Exit status 1 when a partition failed or (``--verify``) is not done.

``--execute --throttle RATE`` first throttles the copy (broker/quota.py), as kafka-reassign-partitions
does: on each topic of the plan, ``leader.replication.throttled.replicas`` lists the current
replicas of its partitions that gain a replica and ``follower.replication.throttled.replicas``
the replicas they gain; every broker of those partitions, old and new, gets
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` = RATE. A later
``--verify`` that finds the whole plan done removes all four from every broker and every topic
of the plan, unless ``--preserve-throttles``; until then the throttle stays.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from raftka.cli.commands._common import (CommandError, add_bootstrap_args, bootstrap_servers, command_configs,
                                         one_line_errors, read_json_file)

PLAN_VERSION = 1
NO_THROTTLE = -1  # kafka-reassign-partitions' --throttle default
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
VERIFY_WARNING = ("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
                  "throttle is removed.")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("reassign", help="move partition replicas between brokers",
                                   description="Move partition replicas (AlterPartitionReassignments), "
                                               "as kafka-reassign-partitions.")
    add_bootstrap_args(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true", help="propose a plan (prints; changes nothing)")
    action.add_argument("--execute", action="store_true", help="start the plan of --reassignment-json-file")
    action.add_argument("--verify", action="store_true", help="which partitions of the plan are done")
    action.add_argument("--cancel", action="store_true", help="stop the plan's reassignments still under way")
    action.add_argument("--list", action="store_true", help="every reassignment under way")
    parser.add_argument("--topics-to-move-json-file", metavar="FILE", help='--generate: {"topics": [{"topic": "T"}]}')
    parser.add_argument("--broker-list", metavar="ID,ID,...", help="--generate: the brokers to move to")
    parser.add_argument("--reassignment-json-file", metavar="FILE",
                        help='{"partitions": [{"topic": "T", "partition": 0, "replicas": [4, 5, 6]}]}')
    parser.add_argument("--throttle", type=int, default=NO_THROTTLE, metavar="BYTES_PER_S",
                        help="--execute: limit the copy between brokers to this many bytes/s (removed by a "
                             "--verify that finds the plan done)")
    parser.add_argument("--preserve-throttles", action="store_true",
                        help="--verify: leave the throttle's broker and topic configs in place")
    parser.add_argument("--timeout-ms", type=int, default=60_000, help="request timeout")
    parser.set_defaults(func=run)


def parse_plan(document: Any, source: str) -> dict[Any, list[int]]:
    """{TopicPartition: replicas} of a reassignment JSON; CommandError saying what is wrong."""
    from raftka.client import TopicPartition
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CommandError(f'{source}: expected {{"version": 1, "partitions": [{{"topic": "T", "partition": 0, '
                           f'"replicas": [1, 2, 3]}}, ...]}}')
    plan: dict[Any, list[int]] = {}
    for entry in entries:
        ok = (isinstance(entry, dict) and isinstance(entry.get("topic"), str) and _is_id(entry.get("partition"))
              and isinstance(entry.get("replicas"), list) and entry["replicas"]
              and all(_is_id(b) for b in entry["replicas"]))
        if not ok:
            raise CommandError(f"{source}: each partition needs a topic, a partition (>= 0) and replicas (a non-empty "
                               f"list of broker ids), got {json.dumps(entry)[:100]}")
        dirs = entry.get("log_dirs")
        if dirs is not None and (not isinstance(dirs, list) or any(d != "any" for d in dirs)):
            raise CommandError(f"{source}: {entry['topic']}-{entry['partition']}: log_dirs must be \"any\" "
                               "(each broker picks the log dir of a new replica itself)")
        tp = TopicPartition(entry["topic"], entry["partition"])
        if tp in plan:
            raise CommandError(f"{source}: {tp.topic}-{tp.partition} is listed twice")
        plan[tp] = list(entry["replicas"])
    return plan


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def propose(current: dict[Any, list[int]], brokers: list[int]) -> dict[Any, list[int]]:
    """Each topic's partitions spread round-robin over ``brokers``, replication factor kept, the
    first replica (the preferred leader) moving one broker on per partition."""
    plan: dict[Any, list[int]] = {}
    topics = sorted({tp.topic for tp in current})
    for shift, topic in enumerate(topics):
        for tp in sorted(tp for tp in current if tp.topic == topic):
            factor = len(current[tp])
            if factor > len(brokers):
                raise CommandError(f"{tp.topic} has replication factor {factor}, more than the {len(brokers)} "
                                   f"broker(s) of --broker-list")
            start = (tp.partition + shift) % len(brokers)
            plan[tp] = [brokers[(start + i) % len(brokers)] for i in range(factor)]
    return plan


def plan_json(plan: dict[Any, list[int]]) -> str:
    return json.dumps({"version": PLAN_VERSION, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": replicas, "log_dirs": ["any"] * len(replicas)}
        for tp, replicas in sorted(plan.items())]})


def throttles(current: dict[Any, list[int]],
              plan: dict[Any, list[int]]) -> tuple[dict[str, dict[str, str]], list[int]]:
    """What --throttle sets for ``plan``: {topic: {leader and follower throttled-replicas key:
    "partition:broker,..."}} (the leader list: the current replicas, any of which may lead; the
    follower list: the replicas gained), and the brokers of those partitions, old and new. As
    kafka-reassign-partitions, except that a partition that gains no replica (a reorder, only
    removals) is left out: nothing of it is copied."""
    leader: dict[str, set[tuple[int, int]]] = {}
    follower: dict[str, set[tuple[int, int]]] = {}
    brokers: set[int] = set()
    for tp, target in plan.items():
        now = current.get(tp)
        gained = [b for b in target if now is not None and b not in now]
        if not gained:
            continue  # unknown (the reassignment reports it), a reorder or only removals: nothing copied
        leader.setdefault(tp.topic, set()).update((tp.partition, b) for b in now)
        follower.setdefault(tp.topic, set()).update((tp.partition, b) for b in gained)
        brokers.update(now, target)

    def text(items: set[tuple[int, int]]) -> str:
        return ",".join(f"{p}:{b}" for p, b in sorted(items))
    return ({topic: {LEADER_REPLICAS: text(leader[topic]), FOLLOWER_REPLICAS: text(follower[topic])}
             for topic in sorted(leader)}, sorted(brokers))


def _set_throttles(admin: Any, current: dict[Any, list[int]], plan: dict[Any, list[int]], rate: int) -> None:
    from raftka.client import AlterConfigOp, ConfigResource
    topics, brokers = throttles(current, plan)
    if topics:
        admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[
            AlterConfigOp(key, value) for key, value in values.items()]) for topic, values in topics.items()])
    if brokers:
        admin.incremental_alter_configs([ConfigResource("broker", str(b), incremental_configs=[
            AlterConfigOp(LEADER_RATE, str(rate)), AlterConfigOp(FOLLOWER_RATE, str(rate))]) for b in brokers])


def _clear_throttles(admin: Any, plan: dict[Any, list[int]]) -> None:
    """kafka-reassign-partitions' clearAllThrottles: both rates off every broker of the cluster
    and of the plan, both replica lists off every topic of the plan."""
    from raftka.client import AlterConfigOp, AlterConfigOpType, ConfigResource
    registered = {b["node_id"] for b in admin.describe_cluster()["brokers"]}
    brokers = sorted(registered | {b for replicas in plan.values() for b in replicas})
    topics = sorted({tp.topic for tp in plan})
    print()
    print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} {_ids(brokers)}")
    admin.incremental_alter_configs([ConfigResource("broker", str(b), incremental_configs=[
        AlterConfigOp(key, None, AlterConfigOpType.DELETE) for key in (LEADER_RATE, FOLLOWER_RATE)])
        for b in brokers])
    print(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}")
    admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[
        AlterConfigOp(key, None, AlterConfigOpType.DELETE) for key in (LEADER_REPLICAS, FOLLOWER_REPLICAS)])
        for topic in topics])


def _names(tps: Any) -> str:
    return ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(tps))


@one_line_errors
def run(args: argparse.Namespace) -> int:
    from raftka.client import AdminClient, TopicPartition
    if args.throttle < NO_THROTTLE:
        raise CommandError(f"--throttle: expected bytes per second (>= 0), got {args.throttle}")
    if args.throttle != NO_THROTTLE and not args.execute:
        raise CommandError("--throttle is used with --execute only")
    if args.preserve_throttles and not args.verify:
        raise CommandError("--preserve-throttles is used with --verify only")
    admin = AdminClient(**{**command_configs(args, "admin"), "bootstrap_servers": bootstrap_servers(args),
                           "request_timeout_ms": args.timeout_ms, "client_id": "raftka-reassign"})
    with admin:
        if args.list:
            under_way = admin.list_partition_reassignments()
            if not under_way:
                print("No partition reassignments found.")
            for tp, r in sorted(under_way.items()):
                print(f"{tp.topic}-{tp.partition}: replicas: {_ids(r.replicas)}. adding: {_ids(r.adding_replicas)}. "
                      f"removing: {_ids(r.removing_replicas)}.")
            return 0
        if args.generate:
            if not args.topics_to_move_json_file or not args.broker_list:
                raise CommandError("--generate needs --topics-to-move-json-file and --broker-list")
            document = read_json_file(args.topics_to_move_json_file, "--topics-to-move-json-file")
            entries = document.get("topics") if isinstance(document, dict) else None
            if not isinstance(entries, list) or not entries or not all(
                    isinstance(e, dict) and isinstance(e.get("topic"), str) for e in entries):
                raise CommandError(f'--topics-to-move-json-file: expected {{"version": 1, "topics": [{{"topic": "T"}}]}}')
            try:
                brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
            except ValueError:
                raise CommandError(f"--broker-list: expected broker ids like 4,5,6, got {args.broker_list!r}") from None
            current = _current(admin, [e["topic"] for e in entries])
            print("Current partition replica assignment")
            print(plan_json(current))
            print()
            print("Proposed partition reassignment configuration")
            print(plan_json(propose(current, brokers)))
            return 0
        if not args.reassignment_json_file:
            raise CommandError("--execute, --verify and --cancel need --reassignment-json-file")
        plan = parse_plan(read_json_file(args.reassignment_json_file, "--reassignment-json-file"),
                          args.reassignment_json_file)
        if args.execute:
            current = _current(admin, sorted({tp.topic for tp in plan}))
            print("Current partition replica assignment")
            print(plan_json({tp: current[tp] for tp in plan if tp in current}))
            print()
            print("Save this to use as the --reassignment-json-file option during rollback")
            if args.throttle != NO_THROTTLE:
                print(VERIFY_WARNING)
                _set_throttles(admin, current, plan, args.throttle)
                print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
            results = admin.alter_partition_reassignments(plan, raise_errors=False)
            return _report(results, "Successfully started partition reassignments for",
                           "Error starting the reassignment of")
        if args.cancel:
            results = admin.alter_partition_reassignments({tp: None for tp in plan}, raise_errors=False)
            return _report(results, "Successfully cancelled partition reassignments for",
                           "Error cancelling the reassignment of")
        under_way = admin.list_partition_reassignments(list(plan))
        current = _current(admin, sorted({tp.topic for tp in plan}))
        print("Status of partition reassignment:")
        pending = 0
        for tp, replicas in sorted(plan.items()):
            if tp in under_way:
                print(f"Reassignment of partition {tp.topic}-{tp.partition} is still in progress.")
                pending += 1
            elif current.get(tp) == replicas:
                print(f"Reassignment of partition {tp.topic}-{tp.partition} is completed.")
            else:
                print(f"There is no active reassignment of partition {tp.topic}-{tp.partition}, but replica set "
                      f"is {_ids(current.get(tp) or [])} rather than {_ids(replicas)}.")
                pending += 1
        if not pending and not args.preserve_throttles:
            _clear_throttles(admin, plan)
        return 1 if pending else 0


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def _current(admin: Any, topics: list[str]) -> dict[Any, list[int]]:
    """{TopicPartition: replicas} of ``topics`` as the brokers' metadata has them."""
    from raftka.client import TopicPartition
    out: dict[Any, list[int]] = {}
    for described in admin.describe_topics(topics):
        if described.get("error_code"):
            from raftka.common import errors
            raise errors.error_for(described["error_code"], f"topic {described['topic']}")
        for p in described["partitions"]:
            out[TopicPartition(described["topic"], p["partition"])] = list(p["replicas"])
    return out


def _report(results: dict[Any, Any], done_text: str, failed_text: str) -> int:
    from raftka.common import errors
    done = [tp for tp, error in results.items() if error is None]
    if done:
        print(f"{done_text} {_names(done)}")
    failed = sorted((tp, error) for tp, error in results.items() if error is not None)
    for tp, error in failed:
        print(f"{failed_text} {tp.topic}-{tp.partition}: {errors.name_of(error.code)}: {error.message}")
    return 1 if failed else 0

"""The quickstart demo: a stream of World Cup match events through a 3-broker Raftka cluster.

    python examples/worldcup_demo.py --dir .raftka --events 100000 --matches 3000

1. Generates ``--events`` events (kickoff, goals, cards, substitutions, full time) over
   ``--matches`` matches played in parallel, each keyed by its match id and numbered within
   its match (``seq`` 0, 1, 2 ...), in the order they happen across all matches.
2. Produces them with ``acks=all`` (idempotent producer) to ``--topic`` (default
   ``worldcup-events``, which must exist: scripts/quickstart.sh creates it with 6 partitions,
   replication factor 3, min.insync.replicas 2).
3. Consumes them with ``--consumers`` consumers (3) sharing the partitions, and checks that
   every match's events arrive complete and in order (a key always lands in one partition,
   and a partition is read in offset order by one consumer).
4. Prints a summary: events produced and consumed, per-partition offsets, time taken.

Exit code 0 when every event was acknowledged, consumed once, and in order per match.
Only the public client API (raftka.client) and the cluster kit's lookup of the local cluster are used.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from typing import Any

from raftka.client import AdminClient, Consumer, Producer, TopicPartition

TEAMS = ("Argentina", "Brazil", "France", "Germany", "Spain", "England", "Italy", "Netherlands",
         "Uruguay", "Portugal", "Belgium", "Croatia", "Morocco", "Japan", "Mexico", "USA", "Senegal",
         "Korea Republic", "Australia", "Denmark", "Switzerland", "Poland", "Ghana", "Cameroon",
         "Colombia", "Chile", "Sweden", "Nigeria", "Serbia", "Ecuador", "Canada", "Tunisia")
# Kinds of events in a match and their relative frequency (~2.5 goals in ~33 events a match).
EVENT_KINDS = ("goal", "shot", "corner", "foul", "offside", "yellow_card", "red_card", "substitution")
EVENT_WEIGHTS = (3, 8, 5, 10, 2, 3, 0.2, 6)
STAGES = ("group", "round of 16", "quarter-final", "semi-final", "final")
CONSUME_TIMEOUT_S = 120.0
PRODUCE_TIMEOUT_S = 120.0


def generate(events_total: int, matches: int, seed: int) -> list[dict[str, Any]]:
    """``events_total`` events over ``matches`` matches, in the global order they happen.

    Every match has a kickoff and a full-time event; the rest (goals, cards, substitutions) are
    spread over the matches at random minutes. Matches kick off in waves, so events of many
    matches interleave; within a match, ``seq`` follows the minute.
    """
    if events_total < 2 * matches:
        raise SystemExit(f"--events {events_total} is too few for {matches} matches (2 per match at least)")
    rng = random.Random(seed)
    extra = Counter(rng.randrange(matches) for _ in range(events_total - 2 * matches))
    out: list[tuple[int, int, int, dict[str, Any]]] = []
    for m in range(matches):
        match_id = f"WC-{m + 1:05d}"
        home, away = rng.sample(TEAMS, 2)
        kickoff = (m // 64) * 120  # 64 matches per wave, a wave every two hours of match time
        stage = STAGES[min(len(STAGES) - 1, m * len(STAGES) // matches)]
        minutes = sorted(rng.randint(1, 90) for _ in range(extra[m]))
        score = {home: 0, away: 0}
        timeline = [(0, {"type": "kickoff"})]
        for minute in minutes:
            team = rng.choice((home, away))
            kind = rng.choices(EVENT_KINDS, EVENT_WEIGHTS)[0]
            event: dict[str, Any] = {"type": kind, "team": team, "player": f"{team[:3].upper()}-{rng.randint(1, 23)}"}
            if kind == "goal":
                score[team] += 1
                event["score"] = f"{score[home]}-{score[away]}"
            timeline.append((minute, event))
        timeline.append((90 + rng.randint(1, 8), {"type": "full_time", "score": f"{score[home]}-{score[away]}"}))
        for seq, (minute, event) in enumerate(timeline):
            event.update(match_id=match_id, seq=seq, minute=minute, home=home, away=away, stage=stage)
            out.append((kickoff + minute, m, seq, event))
    out.sort(key=lambda item: item[:3])  # time order across matches; seq keeps each match's order
    return [item[3] for item in out]


def produce(bootstrap: str, topic: str, events: list[dict[str, Any]]) -> tuple[float, int]:
    """Send every event keyed by match id with acks=all; (seconds, failed count)."""
    began = time.monotonic()
    with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=10, batch_size=65536,
                  compression_type="lz4", client_id="worldcup-producer") as producer:
        for event in events:
            producer.send(topic, json.dumps(event, separators=(",", ":")).encode(), key=event["match_id"].encode())
        failed = producer.flush(timeout=PRODUCE_TIMEOUT_S)
    return time.monotonic() - began, sum(1 for _ in failed)


class Reader(threading.Thread):
    """One consumer of the group, in its own thread, until ``done`` says all events are in."""

    def __init__(self, index: int, bootstrap: str, topic: str, group: str,
                 start: dict[int, int], done: threading.Event) -> None:
        super().__init__(name=f"consumer-{index}", daemon=True)
        self.index, self.bootstrap, self.topic = index, bootstrap, topic
        self.group, self.start_offsets, self.done = group, start, done
        self.records: list[tuple[int, int, str, int]] = []  # (partition, offset, match_id, seq)
        self.next_offsets: dict[int, int] = {}  # partition -> offset after the last one read
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Consumer(bootstrap_servers=self.bootstrap, client_id=self.name, group_id=self.group,
                          auto_offset_reset="earliest", max_poll_records=2000) as consumer:
                consumer.subscribe([self.topic])
                while not self.done.is_set():
                    for tp, batch in consumer.poll(timeout_ms=200).items():
                        for r in batch:
                            if r.offset < self.start_offsets[r.partition]:
                                continue  # left by an earlier run of the demo
                            event = json.loads(r.value)
                            self.records.append((r.partition, r.offset, event["match_id"], event["seq"]))
                            self.next_offsets[r.partition] = r.offset + 1
        except BaseException as error:  # reported by the main thread
            self.error = error


def consume(bootstrap: str, topic: str, consumers: int, partitions: int, start: dict[int, int],
            end: dict[int, int], expected: int) -> tuple[float, list[Reader]]:
    began = time.monotonic()
    done = threading.Event()
    group = f"worldcup-{uuid.uuid4().hex[:8]}"  # a fresh group: starts at auto_offset_reset
    readers = [Reader(i + 1, bootstrap, topic, group, start, done) for i in range(consumers)]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    def reached_end() -> bool:
        reached = {p: max((r.next_offsets.get(p, 0) for r in readers), default=0) for p in end}
        return all(reached[p] >= end[p] for p in end if end[p] > start[p])

    while time.monotonic() < deadline and not reached_end() and not any(r.error for r in readers):
        time.sleep(0.05)
    done.set()
    for reader in readers:
        reader.join(30)
    took = time.monotonic() - began
    errors = [r.error for r in readers if r.error]
    if errors:
        raise SystemExit(f"error: a consumer failed: {errors[0]}")
    return took, readers


def check_order(readers: list[Reader], events: list[dict[str, Any]]) -> tuple[list[str], int]:
    """(problems, redelivered). Checks that every event was consumed, that each consumer read
    each partition in offset order, and that each match's events sit in one partition in seq
    order 0, 1, 2 ... A record read twice (a consumer-group rebalance hands a partition over
    from its last committed offset) is counted as redelivered, not as a problem."""
    problems: list[str] = []
    first: dict[tuple[int, int], tuple[str, int]] = {}
    redelivered = 0
    for reader in readers:
        last: dict[int, int] = {}
        for partition, offset, match_id, seq in reader.records:  # in the order this consumer read them
            if offset <= last.get(partition, -1) and (partition, offset) not in first:
                problems.append(f"{reader.name} read partition {partition} out of order at offset {offset}")
            last[partition] = offset
            if (partition, offset) in first:
                redelivered += 1
            else:
                first[(partition, offset)] = (match_id, seq)
    by_match: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for (partition, offset), (match_id, seq) in first.items():
        by_match[match_id].append((partition, offset, seq))
    for match_id, count in Counter(e["match_id"] for e in events).items():
        got = sorted(by_match.get(match_id, []))
        seqs = [seq for _, _, seq in got]
        if len({p for p, _, _ in got}) > 1:
            problems.append(f"{match_id}: events in partitions {sorted({p for p, _, _ in got})}")
        if seqs != list(range(count)):
            problems.append(f"{match_id}: expected seq 0..{count - 1} in offset order, got {seqs[:10]}"
                            f"{'...' if len(seqs) > 10 else ''} ({len(seqs)} events)")
    return problems, redelivered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="World Cup events through Raftka (the quickstart demo).")
    parser.add_argument("--dir", default=".raftka", help="the local cluster's directory")
    parser.add_argument("--bootstrap-server", default=None, help="brokers (default: the cluster in --dir)")
    parser.add_argument("--topic", default="worldcup-events")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--matches", type=int, default=3_000)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    began = time.monotonic()
    if args.bootstrap_server:
        bootstrap = args.bootstrap_server
    else:
        from raftka.cluster import ClusterError, local_bootstrap_servers
        try:
            bootstrap = local_bootstrap_servers(args.dir)
        except ClusterError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1

    with AdminClient(bootstrap_servers=bootstrap) as admin:
        [described] = admin.describe_topics([args.topic])
    if described["error_code"] != 0:
        print(f"error: topic {args.topic} does not exist (create it first: raftka topics create {args.topic} "
              f"--partitions 6 --replication-factor 3 --config min.insync.replicas=2)", file=sys.stderr)
        return 1
    partitions = len(described["partitions"])
    tps = [TopicPartition(args.topic, p) for p in range(partitions)]
    with Consumer(bootstrap_servers=bootstrap) as probe:
        start = {tp.partition: o for tp, o in probe.end_offsets(tps).items()}

    events = generate(args.events, args.matches, args.seed)
    kinds = Counter(e["type"] for e in events)
    cards = kinds["yellow_card"] + kinds["red_card"]
    print(f"==> producing {len(events):,} events of {args.matches:,} matches ({kinds['goal']:,} goals, {cards:,} cards, "
          f"{kinds['substitution']:,} substitutions, ...) to {args.topic}, keyed by match id, acks=all", flush=True)
    produce_s, failed = produce(bootstrap, args.topic, events)
    print(f"    acknowledged {len(events) - failed:,} in {produce_s:.1f} s "
          f"({(len(events) - failed) / produce_s:,.0f} events/s); failed {failed}", flush=True)
    if failed:
        return 1
    with Consumer(bootstrap_servers=bootstrap) as probe:
        end = {tp.partition: o for tp, o in probe.end_offsets(tps).items()}

    print(f"==> consuming with {args.consumers} consumers in one consumer group (subscribe, group_id)",
          flush=True)
    consume_s, readers = consume(bootstrap, args.topic, args.consumers, partitions, start, end, len(events))
    problems, redelivered = check_order(readers, events)
    consumed = sum(len(r.records) for r in readers) - redelivered
    print(f"    consumed {consumed:,} in {consume_s:.1f} s ({consumed / consume_s:,.0f} events/s)"
          + (f"; {redelivered:,} redelivered after a rebalance" if redelivered else ""), flush=True)
    for reader in readers:
        parts = ",".join(map(str, sorted(reader.next_offsets))) or "-"
        print(f"    {reader.name}: {len(reader.records):,} events from partitions {parts}")
    if consumed != len(events):
        problems.insert(0, f"consumed {consumed} events, produced {len(events)}")
    print("==> per-match order: " + (f"preserved for all {args.matches:,} matches (each match in one partition, "
                                       "read in offset order: seq 0, 1, 2 ... with no gap or duplicate)"
                                       if not problems else f"{len(problems)} PROBLEM(S)"))
    for problem in problems[:10]:
        print(f"    {problem}")

    finals = [e for e in events if e["type"] == "full_time"]
    best = max(finals, key=lambda e: sum(map(int, e["score"].split("-"))))
    print(f"    highest-scoring match: {best['match_id']} {best['home']} {best['score']} {best['away']} ({best['stage']})")
    print("==> summary")
    print(f"    events produced {len(events):,}, consumed {consumed:,}, matches {args.matches:,}")
    print("    partition  start offset  end offset  events")
    for p in range(partitions):
        print(f"    {p:>9}  {start[p]:>12}  {end[p]:>10}  {end[p] - start[p]:>6,}")
    print(f"    time: produce {produce_s:.1f} s, consume {consume_s:.1f} s, demo total {time.monotonic() - began:.1f} s")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())

"""`raftka spark demo`: the World Cup stats pipeline (spark/examples/worldcup_stats.py) on Spark.

    raftka spark demo                      # the local cluster in ./.raftka (scripts/quickstart.sh --keep)
    raftka spark demo --bootstrap-server 127.0.0.1:9092 --seconds 30

Starts a local SparkSession (Java 17+ needed), creates ``worldcup-events`` and
``worldcup-stats`` if missing, and runs the streaming aggregation (goals and cards per match and
team, in windows) to Parquet and to ``worldcup-stats``, while a live feed produces new matches'
events for ``--seconds``. Then it stops the queries and prints what the Parquet output holds.
Run it again with the same ``--output``: the queries go on from their checkpoints.
"""
from __future__ import annotations

import argparse
import os
import random
import threading
import time
from typing import Any

from raftka.commands._common import (CommandError, add_bootstrap_args, bootstrap_servers, cluster_dir,
                                     one_line_errors, say)

EVENTS_PARTITIONS = 6
STATS_PARTITIONS = 3
BACKLOG_MAX_S = 600.0  # longest wait for the queries to work through the events already there
DRAIN_MAX_S = 120.0  # after the live feed: longest wait for the last micro-batches
FEED_MATCHES = 24


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("spark", help="Spark pipelines on Raftka (needs Java 17+)",
                                   description="Run the PySpark data source's demo pipeline.")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="spark_command", metavar="ACTION")
    demo = sub.add_parser("demo", help="World Cup stats: worldcup-events -> Parquet and worldcup-stats")
    add_bootstrap_args(demo)
    demo.add_argument("--output", default=None, metavar="DIR",
                      help="Parquet files and checkpoints (default: DIR/spark-worldcup of the cluster dir)")
    demo.add_argument("--seconds", type=float, default=20.0, help="how long the live feed runs (20)")
    demo.add_argument("--events-per-second", type=int, default=200, help="live feed rate (200)")
    demo.add_argument("--window", default="5 seconds", help="tumbling window on the record timestamp")
    demo.add_argument("--watermark", default="2 seconds", help="how late an event may be")
    demo.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    demo.set_defaults(func=one_line_errors(run_demo))


def _ensure_topics(bootstrap: str) -> None:
    from client import AdminClient, NewTopic
    from spark.examples.worldcup_stats import EVENTS_TOPIC, STATS_TOPIC
    with AdminClient(bootstrap_servers=bootstrap) as admin:
        existing = set(admin.list_topics())
        brokers = len(admin.describe_cluster()["brokers"]) or 1
        wanted = [NewTopic(name, parts, min(3, brokers), {"min.insync.replicas": min(2, brokers)})
                  for name, parts in ((EVENTS_TOPIC, EVENTS_PARTITIONS), (STATS_TOPIC, STATS_PARTITIONS))
                  if name not in existing]
        if not wanted:
            return
        for topic in wanted:
            say(f"==> creating topic {topic.name} ({topic.num_partitions} partitions, RF {topic.replication_factor})")
        admin.create_topics(wanted)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            described = admin.describe_topics([t.name for t in wanted])
            if all(d["partitions"] and all(p["leader"] >= 0 for p in d["partitions"]) for d in described):
                return
            time.sleep(0.2)
        raise CommandError("the new topics have no leaders after 15 s")


class LiveFeed(threading.Thread):
    """Produces new matches' events (the quickstart's shape) at a steady rate."""

    def __init__(self, bootstrap: str, seconds: float, per_second: int) -> None:
        super().__init__(name="worldcup-live-feed", daemon=True)
        self.bootstrap, self.seconds, self.per_second = bootstrap, seconds, per_second
        self.sent = 0
        self.error: BaseException | None = None
        self.stop_event = threading.Event()

    def run(self) -> None:
        import json
        from client import Producer
        from scripts.worldcup_demo import generate
        from spark.examples.worldcup_stats import EVENTS_TOPIC
        run_id = f"{random.randrange(16**4):04x}"
        total = max(2 * FEED_MATCHES, int(self.seconds * self.per_second))
        events = generate(total, FEED_MATCHES, random.randrange(2**31))
        try:
            with Producer(bootstrap_servers=self.bootstrap, linger_ms=20, client_id="worldcup-live") as producer:
                began = time.monotonic()
                for i, event in enumerate(events):
                    if self.stop_event.is_set():
                        break
                    event["match_id"] = f"LIVE-{run_id}-{event['match_id'][3:]}"
                    producer.send(EVENTS_TOPIC, json.dumps(event, separators=(",", ":")).encode(),
                                  key=event["match_id"].encode())
                    self.sent = i + 1
                    ahead = began + (i + 1) / self.per_second - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
                producer.flush(timeout=60)
        except BaseException as error:  # reported by the command
            self.error = error


def _batches(query: Any) -> int:
    progress = query.lastProgress
    return progress["batchId"] + 1 if progress else 0


def _caught_up(query: Any) -> bool:
    """The last micro-batch read up to the latest offsets it saw (no backlog)."""
    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return False
    source = progress["sources"][0]
    return source.get("endOffset") is not None and source.get("endOffset") == source.get("latestOffset")


def _wait(queries: list[Any], done: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        for q in queries:
            if q.exception() is not None:
                raise CommandError(f"query {q.name} failed: {str(q.exception()).splitlines()[0]}")
        if time.monotonic() > deadline:
            raise CommandError(f"the queries did not get there within {timeout_s:.0f} s")
        time.sleep(0.5)


def run_demo(args: argparse.Namespace) -> int:
    from spark.session import JavaNotFoundError, require_java
    try:
        require_java()
    except JavaNotFoundError as error:
        raise CommandError(str(error)) from None
    if args.seconds <= 0 or args.events_per_second <= 0:
        raise CommandError("--seconds and --events-per-second must be positive")
    bootstrap = bootstrap_servers(args)
    output = os.path.abspath(args.output or os.path.join(cluster_dir(args), "spark-worldcup"))
    _ensure_topics(bootstrap)
    from client import Consumer, TopicPartition
    from spark.examples import worldcup_stats as demo
    from spark.session import local_session
    say(f"==> starting Spark ({args.master}); output and checkpoints in {output}")
    spark = local_session("raftka-spark-demo", master=args.master,
                          conf={"spark.ui.showConsoleProgress": "false"})
    feed = LiveFeed(bootstrap, args.seconds, args.events_per_second)
    try:
        queries = demo.start(spark, bootstrap, output, window=args.window, watermark=args.watermark)
        say(f"==> streaming {demo.EVENTS_TOPIC} -> Parquet ({output}/stats) and topic {demo.STATS_TOPIC}")
        try:
            began = time.monotonic()
            _wait(queries, lambda: all(_caught_up(q) for q in queries), BACKLOG_MAX_S)
            say(f"    caught up with the events already in {demo.EVENTS_TOPIC} after "
                f"{time.monotonic() - began:.0f} s")
            say(f"==> live feed: {args.events_per_second} events/s for {args.seconds:g} s "
                f"({FEED_MATCHES} new matches)")
            feed.start()
            _wait(queries, lambda: not feed.is_alive(), args.seconds + 60)
            # Caught up twice: the second batch sees the watermark the first one moved.
            seen = {q.name: _batches(q) for q in queries}
            _wait(queries, lambda: all(_caught_up(q) and _batches(q) >= seen[q.name] + 2 for q in queries),
                  DRAIN_MAX_S)
        finally:
            feed.stop_event.set()
            feed.join(60)
            progress = [(q.name, _batches(q)) for q in queries]
            for q in queries:
                q.stop()
        if feed.error is not None:
            raise CommandError(f"the live feed failed: {feed.error}")
        result = demo.summary(spark, output)
    finally:
        spark.stop()
    with Consumer(bootstrap_servers=bootstrap) as probe:
        parts = [TopicPartition(demo.STATS_TOPIC, p) for p in sorted(probe.partitions_for_topic(demo.STATS_TOPIC) or ())]
        stats_records = sum(probe.end_offsets(parts).values()) if parts else 0
    print(f"live feed: {feed.sent:,} events sent")
    for name, batches in progress:
        print(f"query {name}: {batches} micro-batches")
    print(f"Parquet ({output}/stats): {result['windows']} closed windows, {result['rows']:,} match-team rows, "
          f"{result['goals']:,} goals, {result['cards']:,} cards (windows still open are written later)")
    print(f"topic {demo.STATS_TOPIC}: {stats_records:,} stats records in all (update mode, every change)")
    if result["top_teams"]:
        print("top teams by goals (closed windows):")
        for team, goals, cards in result["top_teams"]:
            print(f"  {team:<16} goals {goals:>6,}  cards {cards:>6,}")
    return 0

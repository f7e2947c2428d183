"""World Cup stats: a Spark streaming aggregation over the quickstart's ``worldcup-events``.

    python examples/spark/worldcup_stats.py --bootstrap-servers 127.0.0.1:9092 \\
        --output /tmp/worldcup --run-seconds 60

Input: the topic ``worldcup-events`` as scripts/quickstart.sh fills it (examples/worldcup_demo.py):
one JSON object per event, keyed by match id, e.g.

    {"type": "goal", "team": "Brazil", "player": "BRA-9", "score": "1-0", "match_id": "WC-00042",
     "seq": 7, "minute": 23, "home": "Brazil", "away": "Japan", "stage": "group"}

``type`` is one of kickoff, goal, shot, corner, foul, offside, yellow_card, red_card,
substitution, full_time (kickoff and full_time have no team).

Output: per match and per team, in tumbling event-time windows of the record timestamp
(``--window``, default 10 seconds), the number of goals, yellow cards, red cards and cards:

- Parquet files in ``OUTPUT/stats`` (append mode: a window is written once the watermark,
  ``--watermark`` behind the latest event seen, has passed its end; exactly once, through the
  checkpoint in ``OUTPUT/checkpoints/parquet``);
- the topic ``worldcup-stats`` (update mode: every micro-batch sends the windows it changed, as
  JSON keyed by match id; at least once, like any Kafka sink). A Python data source sink takes
  append mode only, so this query writes each micro-batch with ``foreachBatch`` and the batch
  writer.

Stop it and start it again with the same ``--output``: it goes on from its checkpoints.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

EVENTS_TOPIC = "worldcup-events"
STATS_TOPIC = "worldcup-stats"
EVENT_SCHEMA = ("type string, team string, player string, score string, match_id string, seq int, "
                "minute int, home string, away string, stage string")
STATS_COLUMNS = ("window_start", "window_end", "match_id", "team", "goals", "yellow_cards",
                 "red_cards", "cards")


def match_events(spark: Any, bootstrap_servers: str, topic: str = EVENTS_TOPIC,
                 starting_offsets: str = "earliest", max_offsets_per_trigger: int | None = None) -> Any:
    """The events topic as a streaming DataFrame of parsed events plus the record timestamp."""
    from pyspark.sql import functions as F
    reader = (spark.readStream.format("raftka")
              .option("kafka.bootstrap.servers", bootstrap_servers)
              .option("subscribe", topic)
              .option("startingOffsets", starting_offsets))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    raw = reader.load()
    return (raw.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"), "timestamp")
            .select("e.*", "timestamp"))


def team_stats(events: Any, window: str, watermark: str) -> Any:
    """Goals and cards per (window, match, team). Events without a team (kickoff, full time,
    unparsable values) are left out."""
    from pyspark.sql import functions as F

    def count(kind: str) -> Any:
        return F.sum(F.when(F.col("type") == kind, 1).otherwise(0)).cast("int")

    stats = (events.where(F.col("team").isNotNull())
             .withWatermark("timestamp", watermark)
             .groupBy(F.window("timestamp", window), "match_id", "team")
             .agg(count("goal").alias("goals"), count("yellow_card").alias("yellow_cards"),
                  count("red_card").alias("red_cards")))
    return stats.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                        "match_id", "team", "goals", "yellow_cards", "red_cards",
                        (F.col("yellow_cards") + F.col("red_cards")).alias("cards"))


def start(spark: Any, bootstrap_servers: str, output: str, *, window: str = "10 seconds",
          watermark: str = "5 seconds", trigger: dict[str, Any] | None = None,
          events_topic: str = EVENTS_TOPIC, stats_topic: str = STATS_TOPIC,
          max_offsets_per_trigger: int | None = None) -> list[Any]:
    """Start the two streaming queries (Parquet and topic); returns them. ``trigger`` is
    DataStreamWriter.trigger's keywords (default: a micro-batch every second)."""
    from pyspark.sql import functions as F
    trigger = trigger or {"processingTime": "1 second"}
    stats = team_stats(match_events(spark, bootstrap_servers, events_topic,
                                    max_offsets_per_trigger=max_offsets_per_trigger), window, watermark)
    to_parquet = (stats.writeStream.format("parquet").outputMode("append")
                  .option("path", os.path.join(output, "stats"))
                  .option("checkpointLocation", os.path.join(output, "checkpoints", "parquet"))
                  .trigger(**trigger).queryName("worldcup_stats_parquet").start())
    as_records = stats.select(F.col("match_id").cast("binary").alias("key"),
                              F.to_json(F.struct(*STATS_COLUMNS)).alias("value"))

    def send(batch: Any, batch_id: int) -> None:
        # A Python data source sink takes append mode only; update mode goes through
        # foreachBatch, each micro-batch's changed windows written with the batch writer.
        batch.write.format("raftka").option("kafka.bootstrap.servers", bootstrap_servers) \
            .option("topic", stats_topic).mode("append").save()

    to_topic = (as_records.writeStream.outputMode("update").foreachBatch(send)
                .option("checkpointLocation", os.path.join(output, "checkpoints", "topic"))
                .trigger(**trigger).queryName("worldcup_stats_topic").start())
    return [to_parquet, to_topic]


def run(spark: Any, bootstrap_servers: str, output: str, *, run_seconds: float | None, **kwargs: Any) -> None:
    """Run the queries for ``run_seconds`` (None: until every event present now is processed,
    with Trigger.AvailableNow), then stop them. Raises the first query's failure."""
    trigger = {"availableNow": True} if run_seconds is None else None
    queries = start(spark, bootstrap_servers, output, trigger=trigger, **kwargs)
    try:
        deadline = time.monotonic() + (run_seconds if run_seconds is not None else 10**9)
        while any(q.isActive for q in queries) and time.monotonic() < deadline:
            for q in queries:
                if q.exception() is not None:
                    raise RuntimeError(f"query {q.name} failed: {q.exception()}")
            time.sleep(0.5)
    finally:
        for q in queries:
            q.stop()
    for q in queries:
        if q.exception() is not None:
            raise RuntimeError(f"query {q.name} failed: {q.exception()}")


def summary(spark: Any, output: str, top: int = 5) -> dict[str, Any]:
    """What the Parquet output holds: windows written, totals, the top teams by goals."""
    from pyspark.sql import functions as F
    path = os.path.join(output, "stats")
    if not os.path.isdir(path) or not any(name.endswith(".parquet") for name in os.listdir(path)):
        return {"rows": 0, "windows": 0, "goals": 0, "cards": 0, "top_teams": []}  # no window closed yet
    df = spark.read.parquet(path)
    totals = df.agg(F.count("*").alias("rows"), F.countDistinct("window_start").alias("windows"),
                    F.coalesce(F.sum("goals"), F.lit(0)).alias("goals"),
                    F.coalesce(F.sum("cards"), F.lit(0)).alias("cards")).first()
    teams = (df.groupBy("team").agg(F.sum("goals").alias("goals"), F.sum("cards").alias("cards"))
             .orderBy(F.desc("goals"), "team").limit(top).collect())
    return {"rows": totals["rows"], "windows": totals["windows"], "goals": totals["goals"],
            "cards": totals["cards"], "top_teams": [(r.team, r.goals, r.cards) for r in teams]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Goals and cards per match and team, in windows, "
                                                 "from worldcup-events to Parquet and worldcup-stats.")
    parser.add_argument("--bootstrap-servers", required=True, help="HOST:PORT[,...] of the brokers")
    parser.add_argument("--output", required=True, help="directory for Parquet files and checkpoints")
    parser.add_argument("--window", default="10 seconds")
    parser.add_argument("--watermark", default="5 seconds")
    parser.add_argument("--run-seconds", type=float, default=None,
                        help="run this long (default: process what is in the topic now, then stop)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    from raftka.spark.session import local_session
    spark = local_session("worldcup-stats", master=args.master,
                          conf={"spark.ui.showConsoleProgress": "false"})
    try:
        run(spark, args.bootstrap_servers, args.output, run_seconds=args.run_seconds, window=args.window,
            watermark=args.watermark, max_offsets_per_trigger=args.max_offsets_per_trigger)
        result = summary(spark, args.output)
    finally:
        spark.stop()
    print(f"windows written to Parquet: {result['windows']} ({result['rows']} match-team rows), "
          f"goals {result['goals']}, cards {result['cards']}")
    for team, goals, cards in result["top_teams"]:
        print(f"  {team:<16} goals {goals:>5}  cards {cards:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `raftka` Spark data source against a real cluster (1 controller + 3 broker processes on
127.0.0.1, shared by this module) and one local SparkSession (local[2]) for the whole run.

Proves: a batch read equals the log (read with the plain client consumer); reads stop at the
high watermark; the options of Spark's Kafka source work (offsets JSON, assign, pattern,
minPartitions, maxOffsetsPerTrigger, includeHeaders, failOnDataLoss); errors are clear; the
writer sends every row exactly as given and fails loudly when it cannot; and a streaming query
to Parquet, stopped and restarted several times while producers keep writing, ends up with every
committed record exactly once. Skipped (with the reason) when Java 17+ is missing.
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from datetime import datetime

import pytest

from raftka.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from raftka.client.errors import IllegalStateError

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

# Retention checked every second (Kafka's default is 5 minutes): the retention test waits for it.
RF3 = {"default.replication.factor": 3, "min.insync.replicas": 2, "log.retention.check.interval.ms": 1000}


# -- fixtures: one SparkSession per run (conftest.py), one cluster per module --

@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("spark-cluster", controllers=1, brokers=3, configs=RF3)


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster, request_timeout_ms=15_000)


@pytest.fixture(scope="module")
def producer(cluster):
    p = Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=5)
    try:
        yield p
    finally:
        p.close()


# -- helpers --

def new_topic(admin: AdminClient, partitions: int = 3, configs: dict | None = None, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 3, configs)])
    wait_for_topic(admin, name, partitions)
    return name


def wait_for_topic(admin: AdminClient, name: str, partitions: int, timeout_s: float = 15) -> None:
    """Brokers learn of a new topic from the metadata log a moment after CreateTopics answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        [described] = admin.describe_topics([name])
        if len(described["partitions"]) == partitions and all(p["leader"] >= 0 for p in described["partitions"]):
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {name} has no leaders after {timeout_s} s")


def produce(producer: Producer, topic: str, count: int, prefix: str = "v", headers: bool = False,
            keyed: bool = True) -> None:
    futures = [producer.send(topic, value=f"{prefix}-{i}".encode(),
                             key=f"k{i % 17}".encode() if keyed else None,
                             headers=[("seq", str(i).encode()), ("empty", b"")] if headers else None)
               for i in range(count)]
    producer.flush(timeout=60)
    for f in futures:
        f.get(timeout=60)


def log_of(cluster, topic: str) -> list:
    """Every committed record of ``topic`` (log start to high watermark), by the plain consumer."""
    consumer = Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest")
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(parts)
        end = consumer.end_offsets(parts)
        out = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end[tp] for tp in parts):
            assert time.monotonic() < deadline, "could not read the log back"
            for records in consumer.poll(timeout_ms=500, max_records=5000).values():
                out.extend(r for r in records if r.offset < end[TopicPartition(r.topic, r.partition)])
        return out
    finally:
        consumer.close()


def reader(spark, cluster, **options):
    r = spark.read.format("raftka").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def stream_reader(spark, cluster, **options):
    r = spark.readStream.format("raftka").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


# -- batch --

def test_batch_read_returns_exactly_the_log_with_every_column(spark, cluster, admin, producer):
    topic = new_topic(admin, partitions=3)
    produce(producer, topic, 2000, headers=True)
    expected = log_of(cluster, topic)
    assert len(expected) == 2000
    rows = reader(spark, cluster, subscribe=topic, includeHeaders="true").load().collect()
    got = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value), r.topic, r.timestampType,
                  int(r.timestamp.timestamp() * 1000), [(h.key, bytes(h.value)) for h in r.headers])
                 for r in rows)
    want = sorted((r.partition, r.offset, r.key, r.value, r.topic, r.timestamp_type, r.timestamp,
                   [(k, v) for k, v in r.headers]) for r in expected)
    assert got == want


def test_batch_read_honours_offsets_json_assign_pattern_and_min_partitions(spark, cluster, admin, producer):
    prefix = f"pat{uuid.uuid4().hex[:4]}"
    a = new_topic(admin, partitions=2, prefix=prefix)
    b = new_topic(admin, partitions=1, prefix=prefix)
    produce(producer, a, 400)
    produce(producer, b, 100, keyed=False)
    end_a = {r.partition: r.offset + 1 for r in log_of(cluster, a)}
    starting = f'{{"{a}": {{"0": 5, "1": -2}}}}'
    ending = f'{{"{a}": {{"0": {end_a[0] - 3}, "1": -1}}}}'
    df = reader(spark, cluster, subscribe=a, startingOffsets=starting, endingOffsets=ending).load()
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == sorted([(0, o) for o in range(5, end_a[0] - 3)] + [(1, o) for o in range(end_a[1])])

    df = reader(spark, cluster, assign=f'{{"{a}": [1]}}').load()
    assert {r.partition for r in df.select("partition").collect()} == {1}

    df = reader(spark, cluster, subscribePattern=f"{prefix}-.*").load()
    assert Counter(r.topic for r in df.select("topic").collect()) == {a: 400, b: 100}

    df = reader(spark, cluster, subscribe=f"{a},{b}", minPartitions="9").load()
    assert df.rdd.getNumPartitions() >= 9
    pairs = [(r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect()]
    assert len(pairs) == len(set(pairs)) == 500


def test_batch_latest_is_the_high_watermark_not_the_leaders_log_end(spark, cluster, admin, producer):
    """Pause both followers and write with acks=1: the leader's log grows, the high watermark
    does not; Spark must see only the records below it. Spark's metadata lookups may try a
    paused broker first (it answers nothing); they must still reach the leader in time."""
    topic = new_topic(admin, partitions=1)
    produce(producer, topic, 50)
    [described] = admin.describe_topics([topic])
    part = described["partitions"][0]
    followers = [b for b in part["replicas"] if b != part["leader"]]
    leader = cluster.broker_address(part["leader"])
    fast = Producer(bootstrap_servers=leader, acks=1, enable_idempotence=False)
    fast.send(topic, value=b"committed").get(timeout=10)
    wait_for(lambda: len(log_of(cluster, topic)) == 51, 10, "the record to be committed")
    for b in followers:
        cluster.pause(b)
    try:
        offsets = [fast.send(topic, value=b"not-committed-yet").get(timeout=10).offset for _ in range(5)]
        assert offsets[-1] >= 51  # the leader appended them
        started = time.monotonic()
        rows = spark.read.format("raftka").option("kafka.bootstrap.servers", leader) \
            .option("kafka.request.timeout.ms", "1500").option("subscribe", topic).load() \
            .select("offset").collect()
        print(f"read with paused followers took {time.monotonic() - started:.1f} s")
    finally:
        for b in followers:
            cluster.resume(b)
        fast.close()
    assert sorted(r.offset for r in rows) == list(range(51))


def test_unknown_topic_and_bad_offsets_fail_with_clear_messages(spark, cluster, admin):
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    with pytest.raises(Exception, match=f"topic '{missing}' does not exist"):
        reader(spark, cluster, subscribe=missing).load().count()
    query = stream_reader(spark, cluster, subscribe=missing).writeStream.format("noop").start()
    with pytest.raises(Exception, match=f"topic '{missing}' does not exist"):
        query.awaitTermination(60)
    query.stop()
    topic = new_topic(admin, partitions=2)
    with pytest.raises(Exception, match="startingOffsets.*valid JSON"):
        reader(spark, cluster, subscribe=topic, startingOffsets='{"x": {"0": ').load().count()
    with pytest.raises(Exception, match="every subscribed partition; missing: " + topic + "-1"):
        reader(spark, cluster, subscribe=topic, startingOffsets=f'{{"{topic}": {{"0": 0}}}}').load().count()
    with pytest.raises(Exception, match="not subscribed or do not exist: " + topic + "-5"):
        reader(spark, cluster, subscribe=topic, startingOffsets=f'{{"{topic}": {{"5": 0}}}}').load().count()
    with pytest.raises(Exception, match="beyond the high watermark"):
        reader(spark, cluster, subscribe=topic, endingOffsets=f'{{"{topic}": {{"0": 99, "1": -1}}}}').load().count()
    with pytest.raises(Exception, match="'startingoffset': .*did you mean startingOffsets"):
        reader(spark, cluster, subscribe=topic, startingOffset="earliest").load().count()


def test_a_read_starts_at_the_first_record_at_or_after_a_timestamp(spark, cluster, admin, producer):
    """Records carry timestamps BASE + i seconds (CreateTime, set by the producer). startingTimestamp
    (over startingOffsets) and a per-partition endingOffsetsByTimestamp read exactly the offsets
    ListOffsets finds for them, an ending timestamp after every record meaning the latest offset;
    a starting timestamp after every record of a partition fails the query
    (startingOffsetsByTimestampStrategy=error). One batch read, to stay quick: a stream's first
    offsets come from the same resolve_offsets (tests/test_spark_units.py)."""
    topic = new_topic(admin, partitions=2)
    base = 1_700_000_000_000
    futures = [producer.send(topic, value=f"p{p}-{i}".encode(), partition=p, timestamp_ms=base + i * 1000)
               for p in (0, 1) for i in range(10)]
    producer.flush(timeout=60)
    for f in futures:
        f.get(timeout=60)
    rows = reader(spark, cluster, subscribe=topic, startingTimestamp=str(base + 4500), startingOffsets="earliest",
                  endingOffsetsByTimestamp=f'{{"{topic}": {{"0": {base + 8000}, "1": {base + 60_000}}}}}'
                  ).load().select("partition", "offset").collect()
    assert sorted(tuple(r) for r in rows) == [(0, 5), (0, 6), (0, 7)] + [(1, i) for i in range(5, 10)]
    late = f'{{"{topic}": {{"0": {base + 60_000}, "1": {base}}}}}'
    with pytest.raises(Exception, match=f"no committed record has a timestamp at or after {base + 60_000} in "
                                        f"{topic}-0; set startingOffsetsByTimestampStrategy=latest"):
        reader(spark, cluster, subscribe=topic, startingOffsetsByTimestamp=late).load().count()


def test_data_deleted_by_retention_fails_the_read_or_is_skipped(spark, cluster, admin, producer):
    topic = new_topic(admin, partitions=1, configs={"segment.bytes": 1024, "retention.ms": 200})
    for i in range(10):  # small batches, so segments roll
        produce(producer, topic, 20, prefix=f"b{i}")
    probe = Consumer(bootstrap_servers=cluster.bootstrap_servers)
    tp = TopicPartition(topic, 0)
    try:
        log_start = wait_for(lambda: probe.beginning_offsets([tp])[tp], 30, "retention to delete a segment")
        high = probe.end_offsets([tp])[tp]
    finally:
        probe.close()
    from_zero = f'{{"{topic}": {{"0": 0}}}}'
    with pytest.raises(Exception, match="no longer in the log.*failOnDataLoss=false"):
        reader(spark, cluster, subscribe=topic, startingOffsets=from_zero).load().count()
    rows = reader(spark, cluster, subscribe=topic, startingOffsets=from_zero,
                  failOnDataLoss="false").load().select("offset").collect()
    offsets = sorted(r.offset for r in rows)
    assert offsets[0] >= log_start and offsets == list(range(offsets[0], high))


# -- streaming --

def test_streaming_honours_max_offsets_per_trigger_and_picks_up_new_topics(spark, cluster, admin, producer, tmp_path):
    prefix = f"st{uuid.uuid4().hex[:4]}"
    first = new_topic(admin, partitions=2, prefix=prefix)
    produce(producer, first, 500)
    df = stream_reader(spark, cluster, subscribePattern=f"{prefix}-.*", startingOffsets="earliest",
                       maxOffsetsPerTrigger="120")
    name = f"q{uuid.uuid4().hex[:6]}"
    query = (df.selectExpr("topic", "partition", "offset").writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="300 milliseconds")
             .start())
    try:
        wait_for(lambda: spark.sql(f"select count(*) c from {name}").first().c >= 500, 90, "the first topic")
        second = new_topic(admin, partitions=1, prefix=prefix)
        produce(producer, second, 50)
        wait_for(lambda: spark.sql(f"select count(*) c from {name}").first().c >= 550, 90, "the new topic")
        sizes = [p["numInputRows"] for p in query.recentProgress]
    finally:
        query.stop()
    rows = spark.sql(f"select topic, partition, offset from {name}").collect()
    assert Counter(r.topic for r in rows) == {first: 500, second: 50}
    assert len({tuple(r) for r in rows}) == 550
    assert max(sizes) <= 120 and sum(1 for s in sizes if s) >= 5


def test_streaming_commits_each_batch_to_the_consumer_group(spark, cluster, admin, producer, tmp_path):
    """With group.id the query commits what it processed, so the group's lag is the query's lag;
    a later query with startingOffsets=committed starts there."""
    topic = new_topic(admin, partitions=2)
    produce(producer, topic, 300)
    group = f"spark-{uuid.uuid4().hex[:6]}"
    probe = Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group)
    try:
        try:
            probe.committed(TopicPartition(topic, 0))
        except IllegalStateError as error:
            pytest.skip(f"consumer groups are not available in the client yet: {error}")
        df = stream_reader(spark, cluster, subscribe=topic, startingOffsets="earliest", **{"group.id": group})
        query = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(processingTime="300 milliseconds").start())
        try:
            produce(producer, topic, 100)
            ends = {p: o + 1 for p, o in ((r.partition, r.offset) for r in log_of(cluster, topic))}
            wait_for(lambda: all(probe.committed(TopicPartition(topic, p)) == ends[p] for p in ends),
                     60, "the group's committed offsets to reach the log end")
        finally:
            query.stop()
    finally:
        probe.close()
    lag = admin.describe_consumer_group_lag(group)
    assert sum(row["lag"] for row in lag) == 0
    produce(producer, topic, 50, prefix="after")
    assert sum(row["lag"] for row in admin.describe_consumer_group_lag(group)) == 50
    rows = reader(spark, cluster, subscribe=topic, startingOffsets="committed",
                  **{"group.id": group}).load().collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(f"after-{i}".encode() for i in range(50))


def test_exactly_once_to_parquet_across_restarts_while_producers_write(spark, cluster, admin, tmp_path):
    """Producers write all the time; the query to Parquet is stopped and restarted 3 times (one
    run with maxOffsetsPerTrigger). At the end (producers stopped, the query drained), the
    Parquet files hold each committed record exactly once: no gap, no duplicate."""
    topic = new_topic(admin, partitions=3)
    stop = threading.Event()
    sent = Counter()
    errors: list[BaseException] = []

    def write() -> None:
        p = Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=10)
        try:
            i = 0
            while not stop.is_set():
                for _ in range(50):
                    p.send(topic, value=f"r{i}".encode(), key=f"k{i % 31}".encode())
                    i += 1
                p.flush(timeout=30)
                sent["n"] = i
                time.sleep(0.05)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)
        finally:
            p.close()

    writers = [threading.Thread(target=write, daemon=True) for _ in range(2)]
    for w in writers:
        w.start()
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def start(trigger: dict, **options):
        df = stream_reader(spark, cluster, subscribe=topic, startingOffsets="earliest", **options)
        return (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
                .trigger(**trigger).start())

    try:
        for run in range(3):
            extra = {"maxOffsetsPerTrigger": "150"} if run == 1 else {}
            query = start({"processingTime": "400 milliseconds"}, **extra)
            try:
                wait_for(lambda: sum(1 for p in query.recentProgress if p["numInputRows"]) >= 2, 90,
                         f"two non-empty batches in run {run}")
            finally:
                query.stop()
    finally:
        stop.set()
        for w in writers:
            w.join(60)
    assert not errors, errors
    expected = log_of(cluster, topic)
    ends = {}
    for r in expected:
        ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)

    def drained() -> bool:
        # AvailableNow after a restart may first finish the batch the last run planned: repeat.
        query = start({"availableNow": True})
        query.awaitTermination(120)
        got = spark.read.parquet(out).groupBy("partition").max("offset").collect()
        return {r.partition: r["max(offset)"] + 1 for r in got} == ends

    wait_for(drained, 200, "the query to reach the log end", interval_s=0)
    rows = spark.read.parquet(out).select("partition", "offset", "value").collect()
    got = Counter((r.partition, r.offset, bytes(r.value)) for r in rows)
    want = Counter((r.partition, r.offset, r.value) for r in expected)
    assert len(expected) >= 500
    assert max(got.values()) == 1, "duplicates in the Parquet output"
    assert got == want


# -- writer --

def test_batch_write_sends_every_row_with_key_headers_and_partition(spark, cluster, admin):
    topic = new_topic(admin, partitions=3)
    rows = [(f"k{i}".encode(), f"value-{i}", i % 3, [("h", str(i).encode())]) for i in range(600)]
    df = spark.createDataFrame(rows, "key binary, value string, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    df.write.format("raftka").option("kafka.bootstrap.servers", cluster.bootstrap_servers) \
        .option("topic", topic).mode("append").save()
    got = sorted((r.key, r.value, r.partition, list(r.headers)) for r in log_of(cluster, topic))
    want = sorted((k, v.encode(), p, [(hk, hv) for hk, hv in h]) for k, v, p, h in rows)
    assert got == want


def test_streaming_write_copies_a_topic_and_a_failed_write_is_an_error(spark, cluster, admin, producer, tmp_path):
    source, target = new_topic(admin, partitions=2), new_topic(admin, partitions=2)
    produce(producer, source, 300)
    df = stream_reader(spark, cluster, subscribe=source, startingOffsets="earliest")
    query = (df.selectExpr("key", "upper(cast(value as string)) as value").writeStream.format("raftka")
             .option("kafka.bootstrap.servers", cluster.bootstrap_servers).option("topic", target)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    got = Counter(r.value for r in log_of(cluster, target))
    assert got == Counter(f"V-{i}".encode() for i in range(300))

    bad = spark.createDataFrame([(b"x", 7)], "value binary, partition int")
    with pytest.raises(Exception, match="row 0 could not be sent.*partition 7 does not exist"):
        bad.write.format("raftka").option("kafka.bootstrap.servers", cluster.bootstrap_servers) \
            .option("topic", target).option("kafka.max.block.ms", "3000").mode("append").save()
    with pytest.raises(Exception, match="no topic"):
        spark.createDataFrame([(b"x",)], "value binary").write.format("raftka") \
            .option("kafka.bootstrap.servers", cluster.bootstrap_servers).mode("append").save()


# -- the demo pipeline --

def test_worldcup_stats_counts_goals_and_cards_per_match_and_team_in_windows(spark, cluster, admin, tmp_path):
    """examples/spark/worldcup_stats.py over events with known timestamps (two 10 s windows per
    match and team, plus a late event that moves the watermark past them): the Parquet output and
    the latest record per window in the stats topic both equal the counts made here."""
    import json
    import random
    from raftka.cli.commands.spark import _example  # by path, as `raftka spark demo` loads it
    demo = _example("spark/worldcup_stats")
    events_topic, stats_topic = new_topic(admin, partitions=2), new_topic(admin, partitions=1)
    rng = random.Random(2026)
    base_ms = (int(time.time()) // 10 - 30) * 10_000
    expected: Counter = Counter()
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
        for i in range(400):
            match = f"WC-{i % 4:05d}"
            ts = base_ms + rng.randrange(20_000)
            kind = rng.choice(["goal", "yellow_card", "red_card", "foul", "kickoff"])
            team = None if kind == "kickoff" else rng.choice(["Brazil", "Japan"])
            event = {"type": kind, "team": team, "player": "P-1", "match_id": match, "seq": i, "minute": 1}
            p.send(events_topic, json.dumps(event).encode(), key=match.encode(), timestamp_ms=ts)
            if team is not None:
                window = ts - ts % 10_000
                expected[(window, match, team, "goals")] += kind == "goal"
                expected[(window, match, team, "yellow_cards")] += kind == "yellow_card"
                expected[(window, match, team, "red_cards")] += kind == "red_card"
        late = {"type": "foul", "team": "Clock", "match_id": "LATE", "seq": 0, "minute": 1}
        p.send(events_topic, json.dumps(late).encode(), key=b"LATE", timestamp_ms=base_ms + 120_000)
        p.flush(timeout=30)
    out = str(tmp_path / "demo")

    def parquet_rows() -> list:
        if not os.path.isdir(os.path.join(out, "stats")):
            return []
        return [r for r in spark.read.parquet(os.path.join(out, "stats")).collect() if r.match_id != "LATE"]

    def run_once() -> bool:
        # The watermark moves after a batch; AvailableNow may end before the batch that uses it.
        for q in demo.start(spark, cluster.bootstrap_servers, out, window="10 seconds", watermark="5 seconds",
                            trigger={"availableNow": True}, events_topic=events_topic, stats_topic=stats_topic):
            q.awaitTermination(120)
            assert q.exception() is None, q.exception()
        return bool(parquet_rows())

    wait_for(run_once, 150, "closed windows in the Parquet output", interval_s=0)
    got: Counter = Counter()
    for r in parquet_rows():
        window = int(r.window_start.timestamp() * 1000)
        assert int(r.window_end.timestamp() * 1000) == window + 10_000
        assert r.cards == r.yellow_cards + r.red_cards
        for col in ("goals", "yellow_cards", "red_cards"):
            got[(window, r.match_id, r.team, col)] += r[col]
    assert +got == +expected and len(parquet_rows()) == len({k[:3] for k in expected})

    latest = {}
    for record in sorted(log_of(cluster, stats_topic), key=lambda r: r.offset):
        value = json.loads(record.value)
        latest[(value["window_start"], value["match_id"], value["team"])] = value
    topic_counts: Counter = Counter()
    for value in latest.values():
        if value["match_id"] != "LATE":
            for col in ("goals", "yellow_cards", "red_cards"):
                window = int(datetime.fromisoformat(value["window_start"]).timestamp() * 1000)
                topic_counts[(window, value["match_id"], value["team"], col)] += value[col]
    assert +topic_counts == +expected

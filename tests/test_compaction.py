"""Log compaction on a live cluster (issue #23, item 1): every broker runs its log cleaner.

On 1 controller + 3 brokers with a short log.cleaner.backoff.ms:
- a keyed changelog with small segments is compacted on every replica: reading from the start
  gives the latest value of every key, in per-key order, offsets kept (with gaps), tombstones
  gone after delete.retention.ms; a follower that compacted on its own serves the same after the
  leader is killed;
- a replica added by a reassignment copies a compacted leader's log, gaps included, and serves
  it as leader;
- a record without a key is refused (INVALID_RECORD) and nothing of its batch is stored;
- ``__consumer_offsets`` is created compacted.
The cleaner's own rules (what it keeps, crash safety) are tests/test_storage_cleaner.py's.
"""
from __future__ import annotations

import time

import pytest

from helpers import FAST_CLUSTER_CONFIGS, wait_for_topic
from test_metrics_parity import total as metric_total
from raftka.client import Consumer, NewTopic, Producer, TopicPartition
from raftka.client.structs import ConfigResource
from raftka.cluster import wait_until
from raftka.common.errors import RaftkaError

WAIT_S = 60.0
KEYS = 12
ROUNDS = 40
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "1500", "min.cleanable.dirty.ratio": "0.01",
             "delete.retention.ms": "1000"}


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("compaction", controllers=1, brokers=3,
                                  configs={**FAST_CLUSTER_CONFIGS, "log.cleaner.backoff.ms": 200})


def _produce_changelog(cluster, topic: str, rounds: range = range(ROUNDS), tombstone: bool = True,
                       latest: dict[bytes, bytes | None] | None = None) -> dict[bytes, bytes | None]:
    """``rounds`` updates of the KEYS keys (key 0 only while it has no tombstone), then a
    tombstone for key 0; ``latest`` updated with the latest value of each key."""
    latest = {} if latest is None else latest
    with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=0) as producer:
        for r in rounds:
            for k in range(KEYS):
                key, value = b"k%02d" % k, b"k%02d:%04d" % (k, r)
                if key in latest and latest[key] is None:
                    continue
                producer.send(topic, value, key=key)
                latest[key] = value
            producer.flush()  # one batch per round: the cleaner has batches to drop whole
        if tombstone:
            producer.send(topic, None, key=b"k00")
            latest[b"k00"] = None
        for k in range(KEYS):  # fill the active segment so the rounds above are all in closed ones
            producer.send(topic, b"filler-%d" % k, key=b"filler-%d" % k)
        producer.flush()
    return latest


def _read_all(cluster, topic: str) -> list:
    """Every record of partition 0 from the log start to the high watermark."""
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out: list = []
        deadline = time.monotonic() + WAIT_S
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"read {len(out)} records, position {consumer.position(tp)} < {end}"
            out.extend(consumer.poll(500).get(tp, []))
        return out


def _check_compacted(records: list, latest: dict[bytes, bytes | None], *, tombstones_gone: bool) -> None:
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), "offsets must increase"
    seen: dict[bytes, bytes | None] = {}
    for r in records:
        if r.key.startswith(b"filler"):
            continue
        if r.key in seen and r.value is not None and seen[r.key] is not None:
            assert r.value > seen[r.key], f"key {r.key!r}: {r.value!r} after {seen[r.key]!r}"  # per-key order
        seen[r.key] = r.value
    expected = {k: v for k, v in latest.items() if not (tombstones_gone and v is None)}
    assert seen == expected


def _compacted(cluster, topic: str, total: int) -> list:
    """The records once the cleaner has removed at least half of the ``total`` written."""
    found: list = []

    def shrunk() -> bool:
        found[:] = _read_all(cluster, topic)
        return len(found) < total // 2
    wait_until(shrunk, WAIT_S, interval_s=0.5, what=f"{topic} compacted")
    return found


def test_a_changelog_is_compacted_on_every_replica_and_a_new_leader_serves_the_same(cluster, module_admin_factory):
    admin = module_admin_factory(cluster)
    admin.create_topics([NewTopic("changelog", 1, 3, COMPACTED)])
    wait_for_topic(admin, "changelog", 1)
    latest = _produce_changelog(cluster, "changelog")
    total = KEYS * ROUNDS + 1 + KEYS
    records = _compacted(cluster, "changelog", total)
    assert records[-1].offset == total - 1  # the active segment is never cleaned
    assert len(records) < total  # offsets kept: the removed ones are gaps (here mostly before the last round)
    _check_compacted(records, latest, tombstones_gone=False)
    # Each broker cleaned its own replica, and its /metrics says so.
    assert all(metric_total(cluster, [b], "raftka_broker_log_cleanings_total") >= 1 for b in cluster.broker_ids)
    assert metric_total(cluster, cluster.broker_ids, "raftka_broker_log_cleaner_failures_total") == 0
    # The tombstone goes at a cleaning once delete.retention.ms has passed since the first one
    # that covered it (so at the third cleaning at the earliest); updates make the log dirty again.
    rounds = iter(range(ROUNDS, 10 * ROUNDS, 5))

    def tombstone_gone() -> bool:
        start = next(rounds)
        _produce_changelog(cluster, "changelog", range(start, start + 5), tombstone=False, latest=latest)
        time.sleep(1.0)
        return all(r.key != b"k00" for r in _read_all(cluster, "changelog"))
    wait_until(tombstone_gone, WAIT_S, interval_s=0.5, what="the tombstone removed")
    # Each follower compacted on its own: the one that leads after a kill -9 serves the same.
    leader = admin.describe_topics(["changelog"])[0]["partitions"][0]["leader"]
    cluster.kill(leader)
    try:
        wait_until(lambda: admin.describe_topics(["changelog"])[0]["partitions"][0]["leader"] not in (leader, -1),
                   WAIT_S, what="a new leader")
        wait_until(lambda: len(_read_all(cluster, "changelog")) < total // 2, WAIT_S, interval_s=0.5,
                   what="the new leader's log compacted too")
        _check_compacted(_read_all(cluster, "changelog"), latest, tombstones_gone=True)
    finally:
        cluster.restart(leader)


def test_a_replica_added_to_a_compacted_partition_copies_its_gaps_and_serves_as_leader(cluster, module_admin_factory):
    admin = module_admin_factory(cluster)
    admin.create_topics([NewTopic("moved-changelog", 1, 1, {**COMPACTED, "min.insync.replicas": "1"})])
    wait_for_topic(admin, "moved-changelog", 1)
    first = admin.describe_topics(["moved-changelog"])[0]["partitions"][0]["replicas"][0]
    ids = [first, next(b for b in cluster.broker_ids if b != first)]
    latest = _produce_changelog(cluster, "moved-changelog")
    before = _compacted(cluster, "moved-changelog", KEYS * ROUNDS + 1 + KEYS)
    tp = TopicPartition("moved-changelog", 0)
    admin.alter_partition_reassignments({tp: [ids[1], ids[0]]})  # the new replica first: preferred leader

    def moved() -> bool:
        p = admin.describe_topics(["moved-changelog"])[0]["partitions"][0]
        return sorted(p["isr"]) == sorted([ids[0], ids[1]]) and not admin.list_partition_reassignments([tp])
    wait_until(moved, WAIT_S, what="the new replica in sync")
    admin.perform_leader_election(topic_partitions=[tp])
    wait_until(lambda: admin.describe_topics(["moved-changelog"])[0]["partitions"][0]["leader"] == ids[1],
               WAIT_S, what="the new replica leads")
    after = _read_all(cluster, "moved-changelog")
    # What the new leader copied may have been compacted further since, never differently.
    assert [r.offset for r in after] == sorted(set(r.offset for r in after))
    assert set(r.offset for r in after) <= set(r.offset for r in before) | {before[-1].offset + 1}
    _check_compacted(after, latest, tombstones_gone=len([r for r in after if r.key == b"k00"]) == 0)


def test_a_record_without_a_key_is_refused_by_a_compacted_topic(cluster, module_admin_factory):
    admin = module_admin_factory(cluster)
    admin.create_topics([NewTopic("keyed-only", 1, 3, {"cleanup.policy": "compact"})])
    wait_for_topic(admin, "keyed-only", 1)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all", retries=0, enable_idempotence=False) as producer:
        producer.send("keyed-only", b"v", key=b"k").get(timeout=20)
        with pytest.raises(RaftkaError) as refused:
            producer.send("keyed-only", b"no key").get(timeout=20)
        assert refused.value.code == 87 and "compacted topic" in str(refused.value)  # INVALID_RECORD
        producer.send("keyed-only", b"v2", key=b"k").get(timeout=20)  # the partition goes on
    assert [r.value for r in _read_all(cluster, "keyed-only")] == [b"v", b"v2"]


def test_the_consumer_offsets_topic_is_compacted(cluster, module_admin_factory):
    admin = module_admin_factory(cluster)
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id="compaction-probe") as consumer:
        consumer.subscribe(["keyed-only"])
        wait_until(lambda: (consumer.poll(200), bool(consumer.assignment()))[1], WAIT_S,
                   what="the group joined (it creates __consumer_offsets)")
    described = admin.describe_configs([ConfigResource("topic", "__consumer_offsets")])
    entry = described["__consumer_offsets"]["cleanup.policy"]
    assert entry.value in ("compact", ["compact"]) and not entry.is_default

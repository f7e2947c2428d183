"""OffsetsForLeaderEpoch answers every case as Kafka's leader does (LeaderEpochFileCache.endOffsetFor
behind Partition.lastOffsetForLeaderEpoch), and the readers of an undefined answer (-1, -1) act
as Kafka's do.

The leader here is a real ReplicaManager and Partition over a real storage Log, led through
epochs 2, 4 and 6 with records in each, so its leader-epoch cache is {2: 0, 4: 3, 6: 5} and its
log end offset 8. The consumer side runs the asyncio consumer against test_client_logic's fake
broker, whose new leader answers (-1, -1).
"""
from __future__ import annotations

import asyncio
import time

import pytest

from raftka.broker.metadata import PartitionInfo
from raftka.broker.partition import Partition
from raftka.broker.replica_fetcher import NO_DIVERGING_EPOCH, apply_fetch_answer
from raftka.broker.replica_manager import ReplicaManager
from raftka.client import TopicPartition
from raftka.client.errors import OffsetOutOfRangeError
from raftka.common import errors
from raftka.common.records import BatchBuilder, assign_offsets
from raftka.storage.log import Log

from test_client_logic import FakeKafka, batch_of, consumer, poll_offsets

pytestmark = pytest.mark.timeout(60)


def _batch(n: int) -> bytes:
    builder = BatchBuilder()
    for i in range(n):
        builder.append(int(time.time() * 1000), None, b"v%d" % i)
    return builder.build()


def _leader_through_epochs(tmp_path) -> tuple[ReplicaManager, Partition]:
    """Broker 1 leads t-0 at epochs 2 (offsets 0-2), 4 (3-4) and 6 (5-7)."""
    log = Log.open(tmp_path / "t-0", topic="t", partition=0)
    p = Partition("t", 0, 1, log, min_insync_replicas=1)
    for epoch, count in ((2, 3), (4, 2), (6, 3)):
        p.apply_metadata(PartitionInfo(replicas=(1,), isr=(1,), leader=1, leader_epoch=epoch,
                                       partition_epoch=epoch))
        p.append_as_leader(_batch(count), 1)
    manager = ReplicaManager(1, {}, logs=None, alter_partition=None)
    manager.partitions[("t", 0)] = p
    return manager, p


def _ask(manager: ReplicaManager, leader_epoch: int, current_leader_epoch: int = 6) -> tuple[int, int, int]:
    out = manager.offsets_for_leader_epoch("t", {"partition": 0, "current_leader_epoch": current_leader_epoch,
                                                 "leader_epoch": leader_epoch})
    return out["error_code"], out["leader_epoch"], out["end_offset"]


def test_the_leader_answers_each_requested_epoch_as_kafkas_leader_epoch_cache_does(tmp_path):
    manager, p = _leader_through_epochs(tmp_path)
    assert p.log.leader_epoch_cache.epoch_entries() == [(2, 0), (4, 3), (6, 5)]
    assert p.log.log_end_offset == 8
    assert _ask(manager, 6) == (errors.NONE, 6, 8)   # the current epoch: up to the log end offset
    assert _ask(manager, 4) == (errors.NONE, 4, 5)   # a known epoch: where the next one starts
    assert _ask(manager, 5) == (errors.NONE, 4, 5)   # between entries: the largest epoch below it
    assert _ask(manager, 3) == (errors.NONE, 2, 3)
    assert _ask(manager, 1) == (errors.NONE, 1, 0)   # older than every entry: the first entry's start
    assert _ask(manager, 9) == (errors.NONE, -1, -1)  # newer than the latest: undefined, not the log start
    assert _ask(manager, -1) == (errors.NONE, -1, -1)  # no epoch asked: undefined


def test_an_epoch_older_than_the_log_start_ends_where_the_remaining_history_starts(tmp_path):
    # Records of epochs 2 and 4 deleted up to offset 4: the cache's first entry is (4, 4), so
    # epoch 2 ends there for the asker (Kafka: the requested epoch with the first entry's start).
    manager, p = _leader_through_epochs(tmp_path)
    p.log.update_high_watermark(8)
    p.log.delete_records_before(4)
    assert p.log.leader_epoch_cache.epoch_entries() == [(4, 4), (6, 5)]
    assert _ask(manager, 2) == (errors.NONE, 2, 4)
    assert _ask(manager, 9) == (errors.NONE, -1, -1)


def test_only_the_leader_at_the_asked_current_epoch_answers(tmp_path):
    manager, _ = _leader_through_epochs(tmp_path)
    assert _ask(manager, 6, current_leader_epoch=5) == (errors.FENCED_LEADER_EPOCH, -1, -1)
    assert _ask(manager, 6, current_leader_epoch=7) == (errors.UNKNOWN_LEADER_EPOCH, -1, -1)


def test_a_follower_reads_an_undefined_diverging_epoch_as_none_and_appends(tmp_path):
    # Kafka leaves diverging_epoch out of a Fetch answer when there is none; it decodes as
    # (-1, -1). A follower must append the records, never truncate to -1 or its log start.
    log = Log.open(tmp_path / "f-0", topic="t", partition=0)
    follower = Partition("t", 0, 2, log, min_insync_replicas=1)
    follower.apply_metadata(PartitionInfo(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=2, partition_epoch=2))
    records = assign_offsets(_batch(3), 0, 2)  # offsets 0-2 as the leader wrote them at epoch 2
    answer = {"error_code": errors.NONE, "high_watermark": 3, "log_start_offset": 0,
              "diverging_epoch": dict(NO_DIVERGING_EPOCH), "records": records}
    usable, truncated = apply_fetch_answer(follower, answer, leader_id=1)
    assert (usable, truncated) == (True, False)
    assert follower.log.log_end_offset == 3 and follower.log.high_watermark == 3


def _leader_change_to_a_log_without_the_fetched_epoch(kafka: FakeKafka, tp: TopicPartition) -> None:
    """Broker 2 takes over at epoch 1 and holds no batch of epoch 0: it answers (-1, -1) for it."""
    kafka.leaders[tp], kafka.epochs[tp] = 2, 1
    kafka.logs[tp] = [batch_of([b"n0", b"n1", b"n2"], 0, 1)]
    kafka.leo[tp] = 3


def test_an_undefined_answer_makes_the_consumer_apply_auto_offset_reset():
    # Kafka's consumer: a truncation it cannot place; with a reset policy it resets the position.
    kafka = FakeKafka({"t": 1})
    tp = TopicPartition("t", 0)
    kafka.logs[tp], kafka.leo[tp] = [batch_of([b"%d" % i for i in range(5)], 0, 0)], 5

    async def main() -> None:
        c = consumer(kafka, auto_offset_reset="earliest", retry_backoff_ms=10)
        c.assign([tp])
        assert [o for o, _ in await poll_offsets(c, tp, 5)] == [0, 1, 2, 3, 4]
        _leader_change_to_a_log_without_the_fetched_epoch(kafka, tp)
        assert await poll_offsets(c, tp, 3) == [(0, b"n0"), (1, b"n1"), (2, b"n2")]
        assert kafka.bodies[23][-1]["topics"][0]["partitions"][0]["leader_epoch"] == 0
        await c.close()

    asyncio.run(main())


def test_an_undefined_answer_with_auto_offset_reset_none_raises_until_a_seek():
    kafka = FakeKafka({"t": 1})
    tp = TopicPartition("t", 0)
    kafka.logs[tp], kafka.leo[tp] = [batch_of([b"%d" % i for i in range(5)], 0, 0)], 5

    async def main() -> None:
        c = consumer(kafka, auto_offset_reset="none", retry_backoff_ms=10)
        c.assign([tp])
        c.seek(tp, 0)
        assert [o for o, _ in await poll_offsets(c, tp, 5)] == [0, 1, 2, 3, 4]
        _leader_change_to_a_log_without_the_fetched_epoch(kafka, tp)
        with pytest.raises(OffsetOutOfRangeError, match="before any offset the new leader knows"):
            for _ in range(100):
                assert not (await c.poll(timeout_ms=50)).get(tp)
        c.seek(tp, 1)
        assert await poll_offsets(c, tp, 2) == [(1, b"n1"), (2, b"n2")]
        await c.close()

    asyncio.run(main())

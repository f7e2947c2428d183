"""Keyed produce over many partitions (#21): the producer's work per sender pass and per record
must not grow with the partitions it has ever written to, and the broker's HW checkpoint must be
cheap per partition. Before the fix, every pass walked every partition ever used (10,000 at the
scale target), every record that opened a batch woke the I/O thread from the caller's thread,
and each HW checkpoint was a temp file, a rename and two fsyncs on the broker's event loop.
"""
from __future__ import annotations

import asyncio
import os

import pytest

from raftka.client import Producer, TopicPartition
from raftka.client.aio.accumulator import RecordAccumulator
from raftka.storage.checkpoint import CheckpointFile
from test_client_logic import FakeKafka, producer

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 2000


def test_a_sender_pass_looks_only_at_partitions_with_queued_batches(monkeypatch):
    kafka = FakeKafka({"t": PARTITIONS})
    looked: list[TopicPartition] = []
    first_ready = RecordAccumulator.first_ready

    def counting(self, tp, now, *, urgent):
        looked.append(tp)
        return first_ready(self, tp, now, urgent=urgent)
    monkeypatch.setattr(RecordAccumulator, "first_ready", counting)

    async def main() -> None:
        p = producer(kafka, linger_ms=0)
        for i in range(PARTITIONS):  # every partition gets a batch once
            await p.send("t", b"v", partition=i)
        assert await p.flush(10_000) == []
        assert not p.accumulator.queues, "emptied queues are removed"
        looked.clear()
        for _ in range(5):
            await p.send("t", b"again", partition=7)
            assert await p.flush(10_000) == []
        await p.close()

    asyncio.run(main())
    # Before: every pass looked at all 2,000 partitions (>= 10,000 here).
    assert 5 <= len(looked) <= 100, len(looked)
    assert set(looked) == {TopicPartition("t", 7)}


def test_records_opening_batches_on_many_partitions_do_not_wake_the_io_thread_each():
    kafka = FakeKafka({"t": PARTITIONS})
    p = Producer(bootstrap_servers="fake:1", connection_factory=kafka.connect, linger_ms=1000)
    try:
        p.send("t", b"warm", partition=0).get(timeout=10)  # metadata and producer id
        sender = p._aio._sender
        wakeups = [0]
        wake = sender.wakeup

        def counting() -> None:
            wakeups[0] += 1
            wake()
        sender.wakeup = counting
        for i in range(PARTITIONS):  # each record opens a batch (a new linger timer)
            p.send("t", b"v", partition=i)
        assert p.flush(timeout=30) == []
        assert sum(len(v) for v in kafka.logs.values()) == PARTITIONS + 1
    finally:
        p.close()
    # Before: one cross-thread wakeup per record (2,000); now one per sender pass at most.
    assert wakeups[0] < PARTITIONS // 4, wakeups[0]


def test_the_accumulator_expires_batches_and_forgets_the_emptied_partitions():
    now = [100.0]
    acc = RecordAccumulator(linger_ms=0, clock=lambda: now[0])
    tps = [TopicPartition("t", i) for i in range(50)]
    for tp in tps:
        acc.append(tp, 1, None, b"v", None, 30)
    now[0] += 10
    acc.queues[tps[0]][0].close()
    acc.append(tps[0], 1, None, b"late", None, 30)  # a newer batch behind the expiring head
    with acc.lock:
        expired = acc.expire(now[0], 5.0)
    assert sorted(b.tp.partition for b in expired) == list(range(50))
    assert list(acc.queues) == [tps[0]] and acc.queues[tps[0]][0].count == 1


def test_new_epochs_touch_no_file_until_the_flush(tmp_path, monkeypatch):
    """Each new leader epoch of a partition (a leader change, a leader's or a follower's first
    records) wrote its leader-epoch checkpoint on the event loop: through a temp file and a
    rename (~0.5 ms under load) and later in place, where creating the file still took ~1 ms
    under a busy journal: half of a follower's time when keyed records reached 5,000 new
    partitions. Now nothing is written until the flush that moves the recovery point, which
    writes every entry."""
    from raftka.storage import Log, checkpoint
    from test_storage import make_batch
    replaced: list[str] = []
    original = checkpoint.write_atomic

    def recording(path, data, *, fsync=True):
        replaced.append(path.name)
        return original(path, data, fsync=fsync)
    leader = Log.open(tmp_path / "leader" / "t-0", {}, topic="t", partition=0)
    follower = Log.open(tmp_path / "follower" / "t-0", {}, topic="t", partition=0)
    monkeypatch.setattr(checkpoint, "write_atomic", recording)
    leader.append_as_leader(make_batch(2), 5)
    follower.append_as_follower(bytes(leader.read(0, 1 << 20).records))
    leader.leader_epoch_cache.assign(6, leader.log_end_offset)  # a leader change
    leader.append_as_leader(make_batch(1), 6)
    follower.append_as_follower(bytes(leader.read(2, 1 << 20).records))
    assert replaced == []
    for log_ in (leader, follower):
        assert not log_.leader_epoch_cache.checkpoint.path.exists()
        assert log_.leader_epoch_cache.epoch_entries() == [(5, 0), (6, 2)]
        log_.flush()
        assert log_.leader_epoch_cache.checkpoint.read() == [(5, 0), (6, 2)]
        log_.close()
    assert replaced.count("leader-epoch-checkpoint") == 2

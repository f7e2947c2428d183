"""acks=all waiters of a leader partition (Partition.replication_waiter): one queue per
partition woken by its own HW moves and role changes, one timer for every deadline.

Each test drives a real Partition over a real storage Log on one asyncio loop: appends as
leader, follower fetches that move the HW, a leadership change, deadlines. The answers must be
those the old wait-per-request loop gave: NONE once HW passes the records,
NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR has shrunk below min.insync.replicas by then,
NOT_LEADER_OR_FOLLOWER after the lead moves, REQUEST_TIMED_OUT at the deadline.
"""
from __future__ import annotations

import asyncio
import time

from raftka.broker.metadata import PartitionInfo
from raftka.broker.partition import Partition
from raftka.common import errors
from raftka.common.records import BatchBuilder
from raftka.storage.log import Log


def _batch(n: int = 1) -> bytes:
    builder = BatchBuilder()
    for i in range(n):
        builder.append(int(time.time() * 1000), None, b"v%d" % i)
    return builder.build()


def _leader(tmp_path, isr=(1, 2, 3), min_isr: int = 2) -> Partition:
    log = Log.open(tmp_path / "t-0", topic="t", partition=0)
    p = Partition("t", 0, 1, log, min_insync_replicas=min_isr)
    p.apply_metadata(PartitionInfo(replicas=(1, 2, 3), isr=isr, leader=1, leader_epoch=1, partition_epoch=1))
    assert p.is_leader
    return p


def _append(p: Partition, n: int = 1) -> int:
    info = p.append_as_leader(_batch(n), -1)
    return info.last_offset + 1


def test_waiters_answer_in_offset_order_as_the_high_watermark_passes_them(tmp_path):
    async def main():
        p = _leader(tmp_path)
        deadline = time.monotonic() + 30
        ends = [_append(p, 3) for _ in range(3)]
        waiters = [p.replication_waiter(end, deadline) for end in ends]
        assert all(isinstance(w, asyncio.Future) for w in waiters)
        # Follower 2 has the first two batches, follower 3 only the first: HW = end of batch 1.
        p.record_follower_fetch(2, ends[1])
        p.record_follower_fetch(3, ends[0])
        assert [w.done() for w in waiters] == [True, False, False]
        assert waiters[0].result() == errors.NONE
        p.record_follower_fetch(3, ends[2])
        p.record_follower_fetch(2, ends[2])
        assert [w.result() for w in waiters] == [errors.NONE] * 3
        assert not p._acks_waiters
        # Already replicated: answered at once, no future.
        assert p.replication_waiter(ends[0], deadline) == errors.NONE
        p.log.close()
    asyncio.run(main())


def test_waiters_of_a_lost_leadership_answer_not_leader_or_follower(tmp_path):
    async def main():
        p = _leader(tmp_path)
        end = _append(p)
        waiter = p.replication_waiter(end, time.monotonic() + 30)
        p.apply_metadata(PartitionInfo(replicas=(1, 2, 3), isr=(2, 3), leader=2, leader_epoch=2, partition_epoch=2))
        assert (await asyncio.wait_for(waiter, 5)) == errors.NOT_LEADER_OR_FOLLOWER
        p.log.close()
    asyncio.run(main())


def test_a_waiter_answers_not_enough_replicas_after_append_when_the_isr_shrank_below_min(tmp_path):
    async def main():
        p = _leader(tmp_path, min_isr=3)
        end = _append(p)
        waiter = p.replication_waiter(end, time.monotonic() + 30)
        # The committed ISR drops follower 3: HW = min(leader, follower 2), ISR 2 < min 3.
        p.record_follower_fetch(2, end)
        assert not waiter.done()
        p.apply_metadata(PartitionInfo(replicas=(1, 2, 3), isr=(1, 2), leader=1, leader_epoch=1, partition_epoch=2))
        assert (await asyncio.wait_for(waiter, 5)) == errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        p.log.close()
    asyncio.run(main())


def test_deadlines_time_out_each_waiter_alone_with_one_timer(tmp_path):
    async def main():
        p = _leader(tmp_path)
        now = time.monotonic()
        late = p.replication_waiter(_append(p), now + 30)
        soon = p.replication_waiter(_append(p), now + 0.05)  # earlier deadline: the timer re-arms
        sooner = p.replication_waiter(_append(p), now + 0.02)
        assert (await asyncio.wait_for(sooner, 5)) == errors.REQUEST_TIMED_OUT
        assert (await asyncio.wait_for(soon, 5)) == errors.REQUEST_TIMED_OUT
        assert not late.done()
        assert p._acks_timer is not None  # still armed for the 30 s deadline
        assert p.replication_waiter(_append(p), now - 1) == errors.REQUEST_TIMED_OUT
        p.record_follower_fetch(2, p.log.log_end_offset)
        assert not late.done()  # follower 3 has nothing yet
        p.record_follower_fetch(3, p.log.log_end_offset)
        assert late.result() == errors.NONE
        p.log.close()
    asyncio.run(main())


def test_wait_for_replication_still_awaits_the_same_answer(tmp_path):
    async def main():
        p = _leader(tmp_path)
        end = _append(p)
        task = asyncio.ensure_future(p.wait_for_replication(end, time.monotonic() + 30))
        await asyncio.sleep(0)
        assert not task.done()
        p.record_follower_fetch(3, end)
        await asyncio.sleep(0)
        assert not task.done()  # follower 2 has nothing yet
        p.record_follower_fetch(2, end)
        assert (await asyncio.wait_for(task, 5)) == errors.NONE
        p.log.close()
    asyncio.run(main())

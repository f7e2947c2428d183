"""Waiting fetches at a leader (ReplicaManager.fetch long polls): each is woken only by what can
answer it. A follower's fetch (replica_id >= 0) reads up to the log end: it is answered at the
next append. A consumer's fetch reads up to the high watermark: an append alone cannot answer
it, the HW move that follows can. A role change wakes both (they answer NOT_LEADER_OR_FOLLOWER).

Each test drives a real ReplicaManager and Partition over a real storage Log on one asyncio
loop; ``reads`` counts how often the fetch looked at the partition (one look per wake-up).
"""
from __future__ import annotations

import asyncio
import time

from raftka.broker.metadata import PartitionInfo
from raftka.broker.partition import Partition
from raftka.broker.replica_manager import ReplicaManager
from raftka.common import errors
from raftka.common.records import BatchBuilder
from raftka.storage.log import Log

WAIT_MS = 20_000  # the long poll's max_wait_ms: a test that waits for it has failed
ANSWER_TIMEOUT_S = 5.0  # generous: the answer is due within a few turns of the loop


def _batch(n: int = 1) -> bytes:
    builder = BatchBuilder()
    for i in range(n):
        builder.append(int(time.time() * 1000), None, b"v%d" % i)
    return builder.build()


def _manager(tmp_path) -> tuple[ReplicaManager, Partition, list[int]]:
    log = Log.open(tmp_path / "t-0", topic="t", partition=0)
    p = Partition("t", 0, 1, log, min_insync_replicas=2)
    p.apply_metadata(PartitionInfo(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=1, partition_epoch=1))
    manager = ReplicaManager(1, {"fetch.max.bytes": 1 << 20}, logs=None, alter_partition=None)
    manager.partitions[("t", 0)] = p
    reads: list[int] = []
    original = manager.read_partition

    def counting(replica_id, request, topic, first_pass, budget):
        reads.append(replica_id)
        return original(replica_id, request, topic, first_pass, budget)
    manager.read_partition = counting  # type: ignore[method-assign]
    return manager, p, reads


def _fetch(manager: ReplicaManager, replica_id: int, offset: int, wait_ms: int = WAIT_MS) -> asyncio.Task:
    body = {"replica_id": replica_id, "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": offset,
                                                       "current_leader_epoch": 1}]}]}
    return asyncio.get_running_loop().create_task(manager.fetch(body))


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _answer(out: dict) -> dict:
    return out["responses"][0]["partitions"][0]


def test_a_waiting_consumer_fetch_sleeps_through_the_append_and_answers_at_the_hw_move(tmp_path):
    async def main():
        manager, p, reads = _manager(tmp_path)
        fetch = _fetch(manager, -1, 0)
        await _turns()
        assert not fetch.done() and reads == [-1]
        p.append_as_leader(_batch(3), -1)  # LEO 3, HW still 0: nothing a consumer may read
        await _turns()
        assert not fetch.done()
        assert reads == [-1], "an append that leaves the HW alone woke the consumer's fetch"
        p.record_follower_fetch(2, 3)
        p.record_follower_fetch(3, 3)  # HW 0 -> 3
        answer = _answer(await asyncio.wait_for(fetch, ANSWER_TIMEOUT_S))
        assert answer["error_code"] == errors.NONE and answer["high_watermark"] == 3
        assert answer["records"], "the answer holds the records below the new HW"
        assert reads == [-1, -1]
        assert not p._hw_waiters and not p._record_waiters
        p.log.close()
    asyncio.run(main())


def test_a_waiting_follower_fetch_sleeps_through_hw_moves_and_answers_at_the_append(tmp_path):
    async def main():
        manager, p, reads = _manager(tmp_path)
        p.append_as_leader(_batch(2), -1)
        p.record_follower_fetch(2, 2)  # follower 2 has everything; follower 3 nothing yet
        follower2 = _fetch(manager, 2, 2)
        await _turns()
        assert not follower2.done()
        p.record_follower_fetch(3, 2)  # HW 0 -> 2: nothing new for follower 2 to copy
        assert p.high_watermark == 2
        await _turns()
        assert not follower2.done()
        assert reads == [2], "a HW move woke a follower's fetch that only new records can answer"
        p.append_as_leader(_batch(1), -1)
        answer = _answer(await asyncio.wait_for(follower2, ANSWER_TIMEOUT_S))
        assert answer["error_code"] == errors.NONE and answer["records"]
        assert reads == [2, 2]
        p.log.close()
    asyncio.run(main())


def test_a_role_change_answers_waiting_fetches_at_once(tmp_path):
    async def main():
        manager, p, _ = _manager(tmp_path)
        consumer = _fetch(manager, -1, 0)
        follower = _fetch(manager, 2, 0)
        await _turns()
        assert not consumer.done() and not follower.done()
        p.apply_metadata(PartitionInfo(replicas=(1, 2, 3), isr=(2, 3), leader=2, leader_epoch=2,
                                       partition_epoch=2))
        for task in (consumer, follower):
            answer = _answer(await asyncio.wait_for(task, ANSWER_TIMEOUT_S))
            assert answer["error_code"] in (errors.NOT_LEADER_OR_FOLLOWER, errors.FENCED_LEADER_EPOCH)
        p.log.close()
    asyncio.run(main())


def test_a_fetch_with_nothing_to_read_answers_at_max_wait_and_leaves_no_waiter(tmp_path):
    async def main():
        manager, p, _ = _manager(tmp_path)
        started = time.monotonic()
        answers = await asyncio.wait_for(asyncio.gather(_fetch(manager, -1, 0, 200), _fetch(manager, 2, 0, 200)),
                                         ANSWER_TIMEOUT_S)
        assert time.monotonic() - started >= 0.19
        for out in answers:
            answer = _answer(out)
            assert answer["error_code"] == errors.NONE and not answer["records"]
        assert not p._hw_waiters and not p._record_waiters
        p.log.close()
    asyncio.run(main())

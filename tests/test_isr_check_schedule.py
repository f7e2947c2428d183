"""The leader's ISR check (ReplicaManager._isr_loop) costs what can change, not what is hosted.

A ReplicaManager over real logs leads many partitions with a full ISR; its loop runs on a short
tick (replica.lag.time.max.ms / 2) while the partitions' clock is moved by hand. Counting
``Partition.isr_proposal`` calls shows which partitions a tick visited: all of them once after
metadata made them leaders, then none until the oldest caught-up time of a partition's followers
is replica.lag.time.max.ms old. Shrinks and expansions are still proposed as before.
"""
from __future__ import annotations

import asyncio

from raftka.broker.metadata import BrokerInfo, MetadataView, PartitionInfo, TopicInfo
from raftka.broker.partition import Partition
from raftka.broker.replica_manager import ReplicaManager
from raftka.storage import LogManager

LAG_MS = 100  # a tick every 50 ms of real time
TICKS_S = 0.3  # several ticks
WAIT_S = 10.0  # for what must happen within a tick or two, on a loaded box
PARTITIONS = 40


async def _until(condition) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not within WAIT_S"
        await asyncio.sleep(0.01)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _view(isr_of: dict[int, tuple[int, ...]], fenced: frozenset[int] = frozenset(), offset: int = 1) -> MetadataView:
    parts = tuple(PartitionInfo((1, 2, 3), isr_of.get(i, (1, 2, 3)), 1, 1, 1) for i in range(PARTITIONS))
    brokers = {b: BrokerInfo(b, 1, {"PLAINTEXT": f"127.0.0.1:{9090 + b}"}, None, b in fenced) for b in (1, 2, 3)}
    return MetadataView(offset, brokers, {"t": TopicInfo("t", "id-t", parts, {})}, {})


async def _run(tmp_path, isr_of: dict[int, tuple[int, ...]], steps, fenced: frozenset[int] = frozenset()):
    clock = Clock()
    proposals: list[tuple[int, tuple[int, ...]]] = []
    visits: list[int] = []

    async def alter(partition: Partition, isr: tuple[int, ...]) -> None:
        proposals.append((partition.index, isr))

    logs = LogManager([str(tmp_path)], {})
    manager = ReplicaManager(1, {"replica.lag.time.max.ms": LAG_MS, "min.insync.replicas": 1,
                                 "replica.high.watermark.checkpoint.interval.ms": 5000}, logs, alter, clock=clock)
    original = Partition.isr_proposal

    def counting(self, lag_ms, now=None):
        visits.append(self.index)
        return original(self, lag_ms, now)
    Partition.isr_proposal = counting  # type: ignore[method-assign]
    try:
        manager.on_metadata(_view(isr_of, fenced))
        manager.start()
        for step in steps:
            await step(manager, clock, visits, proposals)
    finally:
        Partition.isr_proposal = original  # type: ignore[method-assign]
        for task in manager._tasks:
            task.cancel()
        logs.close()


def test_an_idle_leader_checks_each_partition_once_then_only_when_a_follower_can_lag(tmp_path):
    async def first_ticks(manager, clock, visits, proposals):
        await _until(lambda: len(visits) >= PARTITIONS)
        await asyncio.sleep(TICKS_S)
        assert sorted(visits) == list(range(PARTITIONS)), "each partition once, after metadata made it leader"
        assert proposals == []

    async def follower_keeps_up(manager, clock, visits, proposals):
        visits.clear()
        clock.now += LAG_MS * 0.6
        p0 = manager.partitions[("t", 0)]
        for replica in (2, 3):  # partition 0's followers fetch at the log end
            p0.record_follower_fetch(replica, p0.log.log_end_offset)
        await asyncio.sleep(TICKS_S)
        assert visits == [], "nothing can lag before replica.lag.time.max.ms: no partition is visited"

    async def the_others_lag(manager, clock, visits, proposals):
        clock.now += LAG_MS * 0.6  # past the deadline of every partition but 0
        await _until(lambda: len({index for index, isr in proposals if isr == (1,)}) >= PARTITIONS - 1)
        await asyncio.sleep(TICKS_S)
        shrunk = {index for index, isr in proposals if isr == (1,)}
        assert shrunk == set(range(1, PARTITIONS)), "the followers that stopped fetching leave the ISR"
        assert 0 in visits and (0, (1,)) not in proposals, "partition 0's followers are caught up"

    asyncio.run(_run(tmp_path, {}, [first_ticks, follower_keeps_up, the_others_lag]))


def test_a_leader_short_of_replicas_adds_a_follower_at_the_next_tick_after_it_catches_up(tmp_path):
    async def join(manager, clock, visits, proposals):
        await asyncio.sleep(TICKS_S)
        assert proposals == []
        p5 = manager.partitions[("t", 5)]
        p5.record_follower_fetch(3, p5.log.log_end_offset)
        await _until(lambda: (5, (1, 2, 3)) in proposals)
        assert {index for index, _ in proposals} == {5}

    asyncio.run(_run(tmp_path, {5: (1, 2)}, [join]))


def test_a_fenced_follower_is_not_proposed_until_the_metadata_unfences_it(tmp_path):
    """A killed follower's last fetches leave it "caught up" for replica.lag.time.max.ms; while it
    is fenced the controller would refuse it (INELIGIBLE_REPLICA), so no round asks for it."""
    async def fenced_then_unfenced(manager, clock, visits, proposals):
        p5 = manager.partitions[("t", 5)]
        p5.record_follower_fetch(3, p5.log.log_end_offset)  # its fetch from before it was fenced
        visits.clear()
        await _until(lambda: visits.count(5) >= 3)  # several ticks looked at partition 5
        assert proposals == [], "broker 3 is fenced: not proposed"
        shared = manager.view.topics  # the same TopicInfo objects: only the broker changed
        manager.on_metadata(MetadataView(2, _view({}).brokers, shared, {}))
        await _until(lambda: (5, (1, 2, 3)) in proposals)
        assert [index for index, _ in proposals] == [5]

    asyncio.run(_run(tmp_path, {5: (1, 2)}, [fenced_then_unfenced], fenced=frozenset({3})))
